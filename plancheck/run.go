package plancheck

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/laneq/laneq/queries"
)

// Statement is what plancheck needs of a catalog statement.
type Statement struct {
	Name string
	SQL  string
}

// CatalogStatements lists the catalog through package queries.
func CatalogStatements() ([]Statement, error) {
	stmts, err := queries.Statements()
	if err != nil {
		return nil, err
	}
	out := make([]Statement, len(stmts))
	for i, s := range stmts {
		out[i] = Statement{Name: s.Name, SQL: s.SQL}
	}
	return out, nil
}

// LoadCases parses a cases file (queries/plancheck.json).
func LoadCases(b []byte) ([]Case, error) {
	var f struct {
		Cases []Case `json:"cases"`
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("plancheck: cases: %w", err)
	}
	seen := map[string]bool{}
	for i, c := range f.Cases {
		if c.Query == "" {
			return nil, fmt.Errorf("plancheck: case %d has no query", i)
		}
		if seen[c.Query] {
			return nil, fmt.Errorf("plancheck: two cases for %s", c.Query)
		}
		seen[c.Query] = true
		if c.MaxRowsRead <= 0 && c.NoRead == "" {
			return nil, fmt.Errorf("plancheck: case %s needs max_rows_read (or no_read with a reason)", c.Query)
		}
	}
	return f.Cases, nil
}

// Result is the verdict on one case across the scales.
type Result struct {
	Query        string        `json:"query"`
	Observations []Observation `json:"-"`
	RowsRead     []int64       `json:"rows_read"` // per scale, in Scales order
	Operators    string        `json:"operators"` // at the largest scale
	Shape        string        `json:"shape"`     // at the largest scale
	// FreshMs and ChurnedMs: median execution time of a hot case at the
	// largest scale, without and with churn (0 when not measured).
	FreshMs    float64  `json:"fresh_ms,omitempty"`
	ChurnedMs  float64  `json:"churned_ms,omitempty"`
	Violations []string `json:"violations,omitempty"`
}

// Pass reports whether the case has no violation.
func (r Result) Pass() bool { return len(r.Violations) == 0 }

// Report is a whole run.
type Report struct {
	Server  string   `json:"server"`
	Scales  []int    `json:"scales"`
	Results []Result `json:"results"`
	// Uncovered lists catalog statements without a case: each fails the run.
	Uncovered []string `json:"uncovered,omitempty"`
}

// Pass reports whether every case passed and every statement has a case.
func (r Report) Pass() bool {
	if len(r.Uncovered) > 0 {
		return false
	}
	for _, res := range r.Results {
		if !res.Pass() {
			return false
		}
	}
	return true
}

// Coverage returns the statements that have no case, and cases that name no
// statement.
func Coverage(stmts []Statement, cases []Case) (uncovered, unknown []string) {
	byName := map[string]bool{}
	for _, s := range stmts {
		byName[s.Name] = true
	}
	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.Query] = true
		if !byName[c.Query] {
			unknown = append(unknown, c.Query)
		}
	}
	for _, s := range stmts {
		if !covered[s.Name] {
			uncovered = append(uncovered, s.Name)
		}
	}
	sort.Strings(uncovered)
	sort.Strings(unknown)
	return uncovered, unknown
}

// ScaleDB is one seeded database at one scale.
type ScaleDB struct {
	Scale int
	DB    *sql.DB
}

// Check explains every case on every scale's database and judges it. When
// churned is not nil (a fixture at the largest scale after Churn), hot cases
// are also timed there against the largest fresh scale.
func Check(ctx context.Context, stmts []Statement, cases []Case, scales []ScaleDB, churned *sql.DB, progress io.Writer) (Report, error) {
	sort.Slice(scales, func(i, j int) bool { return scales[i].Scale < scales[j].Scale })
	rep := Report{}
	for _, s := range scales {
		rep.Scales = append(rep.Scales, s.Scale)
	}
	uncovered, unknown := Coverage(stmts, cases)
	if len(unknown) > 0 {
		return rep, fmt.Errorf("plancheck: cases for statements not in the catalog: %s", strings.Join(unknown, ", "))
	}
	rep.Uncovered = uncovered
	sqlOf := map[string]string{}
	for _, s := range stmts {
		sqlOf[s.Name] = s.SQL
	}
	values := Values()
	for _, c := range cases {
		res := Result{Query: c.Query}
		stmt := sqlOf[c.Query]
		if c.Inner != "" {
			stmt = c.Inner
		}
		for _, s := range scales {
			args, err := resolveOn(ctx, s.DB, c.Args, values)
			if err != nil {
				return rep, fmt.Errorf("plancheck: %s at scale %d: %w", c.Query, s.Scale, err)
			}
			o, err := Explain(ctx, s.DB, stmt, args)
			if err != nil {
				return rep, fmt.Errorf("plancheck: %s at scale %d: %w", c.Query, s.Scale, err)
			}
			o.Scale = s.Scale
			res.Observations = append(res.Observations, o)
			res.RowsRead = append(res.RowsRead, o.RowsRead)
			res.Violations = append(res.Violations, judgePlan(c, o)...)
		}
		if n := len(res.Observations); n > 1 {
			res.Violations = append(res.Violations, judgeScale(c, res.Observations[0], res.Observations[n-1])...)
		}
		last := res.Observations[len(res.Observations)-1]
		res.Operators, res.Shape = Brief(last.Ops), Shape(last.Ops)
		if c.Hot && churned != nil {
			largest := scales[len(scales)-1].DB
			args, err := resolveOn(ctx, largest, c.Args, values)
			if err != nil {
				return rep, fmt.Errorf("plancheck: %s: %w", c.Query, err)
			}
			fresh, err := medianTime(ctx, largest, stmt, args, 5)
			if err != nil {
				return rep, fmt.Errorf("plancheck: time %s fresh: %w", c.Query, err)
			}
			if args, err = resolveOn(ctx, churned, c.Args, values); err != nil {
				return rep, fmt.Errorf("plancheck: %s: %w", c.Query, err)
			}
			churnedTime, err := medianTime(ctx, churned, stmt, args, 5)
			if err != nil {
				return rep, fmt.Errorf("plancheck: time %s churned: %w", c.Query, err)
			}
			res.FreshMs, res.ChurnedMs = ms(fresh), ms(churnedTime)
			res.Violations = append(res.Violations, judgeChurn(c, fresh, churnedTime)...)
		}
		rep.Results = append(rep.Results, res)
		verdict := "ok"
		if !res.Pass() {
			verdict = "FAIL"
		}
		fmt.Fprintf(progress, "plancheck: %-28s rows %v %s\n", c.Query, res.RowsRead, verdict)
	}
	return rep, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// resolveOn resolves a case's arguments for one database: "$name" strings
// become fixture values, and "@now", "@now-90s", "@now+1h" become times
// relative to that database's NOW(6), as the runtime's scan bounds are.
func resolveOn(ctx context.Context, db *sql.DB, args map[string]any, values map[string]any) (map[string]any, error) {
	var now time.Time
	if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil {
		return nil, fmt.Errorf("read the database clock: %w", err)
	}
	return resolve(args, values, now)
}

// resolve replaces "$name" string arguments with fixture values and
// "@now[±duration]" with times relative to now, inside lists too.
func resolve(args map[string]any, values map[string]any, now time.Time) (map[string]any, error) {
	out := make(map[string]any, len(args))
	var bad error
	var one func(v any) any
	one = func(v any) any {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, "$") {
				if val, ok := values[x[1:]]; ok {
					return val
				}
			}
			if rest, ok := strings.CutPrefix(x, "@now"); ok {
				if rest == "" {
					return now
				}
				d, err := time.ParseDuration(rest)
				if err != nil {
					bad = fmt.Errorf("argument %q: want @now, @now+DURATION or @now-DURATION: %w", x, err)
					return x
				}
				return now.Add(d)
			}
			return x
		case []any:
			l := make([]any, len(x))
			for i := range x {
				l[i] = one(x[i])
			}
			return l
		case float64: // JSON numbers: the catalog's numeric parameters are integers
			return int64(x)
		}
		return v
	}
	for k, v := range args {
		out[k] = one(v)
	}
	return out, bad
}

// Explain runs EXPLAIN ANALYZE of one statement with its arguments. A
// statement that writes runs inside a transaction that is rolled back:
// EXPLAIN ANALYZE executes it.
func Explain(ctx context.Context, db *sql.DB, stmt string, args map[string]any) (Observation, error) {
	query, bound, err := Bind(stmt, args)
	if err != nil {
		return Observation{}, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Observation{}, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, "EXPLAIN ANALYZE "+query, bound...)
	if err != nil {
		return Observation{}, fmt.Errorf("EXPLAIN ANALYZE: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return Observation{}, err
	}
	var table [][]string
	for rows.Next() {
		raw := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return Observation{}, err
		}
		row := make([]string, len(cols))
		for i, v := range raw {
			row[i] = v.String
		}
		table = append(table, row)
	}
	if err := rows.Err(); err != nil {
		return Observation{}, err
	}
	ops, err := ParsePlan(table)
	if err != nil {
		return Observation{}, err
	}
	keys, hasKeys := ProcessKeys(ops)
	return Observation{Ops: ops, RowsRead: RowsRead(ops), ProcessKeys: keys, HasKeys: hasKeys}, nil
}
