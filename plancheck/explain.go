// Package plancheck runs EXPLAIN ANALYZE for every statement of laneq's query
// catalog on a real TiDB, on seeded fixtures at more than one scale, and
// judges the plans: no full scans, rows read within a per-case budget, rows
// read that do not grow with the backlog, and no plan whose reads folded out
// of sight.
package plancheck

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// Operator is one row of an EXPLAIN ANALYZE plan.
type Operator struct {
	ID       string // without its numeric suffix: "IndexRangeScan"
	RawID    string // as printed: "IndexRangeScan_36"
	Depth    int    // 0 for the root
	EstRows  float64
	ActRows  int64
	Task     string // root, cop[tikv], ...
	Access   string // "table:w, index:idx_work_item_claim(...)"
	ExecInfo string
	OpInfo   string
}

// scanOperators are the operators whose actRows are rows (or keys) read from
// storage. On unistore they are the only measure of rows examined.
var scanOperators = map[string]bool{
	"TableFullScan": true, "TableRangeScan": true, "IndexFullScan": true, "IndexRangeScan": true,
	"TableRowIDScan": true, "Point_Get": true, "Batch_Point_Get": true,
}

// fullScans are the operators plancheck rejects unless a case allows them.
var fullScans = map[string]bool{"TableFullScan": true, "IndexFullScan": true}

var idSuffix = regexp.MustCompile(`_\d+$`)

// ParsePlan turns EXPLAIN ANALYZE rows (id, estRows, actRows, task, access
// object, execution info, operator info, ...) into operators.
func ParsePlan(rows [][]string) ([]Operator, error) {
	ops := make([]Operator, 0, len(rows))
	for i, r := range rows {
		if len(r) < 7 {
			return nil, fmt.Errorf("plancheck: plan row %d has %d columns, want at least 7 (is this EXPLAIN ANALYZE output?)", i, len(r))
		}
		raw := r[0]
		trimmed := strings.TrimLeft(raw, " │├└─")
		depth := len([]rune(raw)) - len([]rune(trimmed))
		id := strings.TrimSpace(trimmed)
		base := idSuffix.ReplaceAllString(id, "")
		// "Selection_38(Build)" / "(Probe)" carry the side after the suffix.
		if j := strings.Index(base, "("); j >= 0 {
			base = idSuffix.ReplaceAllString(base[:j], "")
		}
		est, _ := strconv.ParseFloat(strings.TrimSpace(r[1]), 64)
		act, err := strconv.ParseInt(strings.TrimSpace(r[2]), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("plancheck: plan row %d (%s): actRows %q: %w", i, id, r[2], err)
		}
		ops = append(ops, Operator{
			ID: base, RawID: id, Depth: depth / 2, EstRows: est, ActRows: act,
			Task: strings.TrimSpace(r[3]), Access: strings.TrimSpace(r[4]),
			ExecInfo: strings.TrimSpace(r[5]), OpInfo: strings.TrimSpace(r[6]),
		})
	}
	return ops, nil
}

// RowsRead sums actRows over the scan operators.
func RowsRead(ops []Operator) int64 {
	var n int64
	for _, op := range ops {
		if scanOperators[op.ID] {
			n += op.ActRows
		}
	}
	return n
}

// HasScan reports whether any operator reads storage.
func HasScan(ops []Operator) bool {
	for _, op := range ops {
		if scanOperators[op.ID] {
			return true
		}
	}
	return false
}

var processKeys = regexp.MustCompile(`total_process_keys: (\d+)`)

// ProcessKeys sums total_process_keys where the server reports it (TiKV);
// unistore reports none, and ok is false.
func ProcessKeys(ops []Operator) (n int64, ok bool) {
	for _, op := range ops {
		for _, m := range processKeys.FindAllStringSubmatch(op.ExecInfo, -1) {
			v, _ := strconv.ParseInt(m[1], 10, 64)
			n += v
			ok = true
		}
	}
	return n, ok
}

var requestUnits = regexp.MustCompile(`(?:^|, )RU:([0-9.]+)`)

// RequestUnits is the request units (RU, what TiDB Cloud bills and
// resource groups limit) TiDB reports for the whole statement on the plan's
// root operator; ok is false when the server reports none (resource control
// off).
func RequestUnits(ops []Operator) (ru float64, ok bool) {
	if len(ops) == 0 {
		return 0, false
	}
	m := requestUnits.FindStringSubmatch(ops[0].ExecInfo)
	if m == nil {
		return 0, false
	}
	ru, err := strconv.ParseFloat(m[1], 64)
	return ru, err == nil
}

// Shape is the brief plan shape used for golden comparisons: operator ids
// by depth with their access objects, without row counts or timings.
func Shape(ops []Operator) string {
	var b strings.Builder
	for _, op := range ops {
		b.WriteString(strings.Repeat("  ", op.Depth))
		b.WriteString(op.ID)
		if op.Access != "" {
			b.WriteString(" ")
			b.WriteString(op.Access)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Brief is one line naming the operators, for the report table.
func Brief(ops []Operator) string {
	var parts []string
	for _, op := range ops {
		if scanOperators[op.ID] {
			parts = append(parts, fmt.Sprintf("%s(%d)", op.ID, op.ActRows))
		}
	}
	if len(parts) == 0 {
		for _, op := range ops {
			parts = append(parts, op.ID)
		}
	}
	return strings.Join(parts, " ")
}
