package plancheck

import (
	"fmt"
	"strings"
)

// DefaultScaleSlack is how many more rows a case may read at the large scale
// than at the small one when the case states no slack: one coprocessor page
// (TiDB reads index ranges in pages of up to 64 rows before a LIMIT stops
// it, so a page may be fuller when more rows exist).
const DefaultScaleSlack = 64

// Case is one plan-check case: a catalog statement, the arguments it runs
// with on the fixture, and its budgets. Cases live in queries/plancheck.json.
type Case struct {
	Query string         `json:"query"`
	Args  map[string]any `json:"args"`
	// MaxRowsRead bounds rows read by scan operators at every scale.
	MaxRowsRead int64 `json:"max_rows_read"`
	// Note explains the budget for reviewers (not used by the rules).
	Note string `json:"note,omitempty"`
	// ScaleSlack bounds rows(largest scale) - rows(smallest scale); nil means
	// DefaultScaleSlack.
	ScaleSlack *int64 `json:"scale_slack,omitempty"`
	// AllowFullScan, when set, is the reviewed reason a full scan is fine.
	AllowFullScan string `json:"allow_full_scan,omitempty"`
	// NoRead, when set, is the reviewed reason the statement reads nothing
	// TiDB would show (a plain INSERT ... VALUES). Without it a plan with no
	// scan operator fails: its read may have folded out of sight.
	NoRead string `json:"no_read,omitempty"`
	// Hot marks a statement of the claim path: it is also timed on the
	// churned fixture (see Churn) and must not run more than ChurnRatio
	// (default DefaultChurnRatio) times slower there than fresh, unless
	// ChurnAllow gives the reviewed reason.
	Hot        bool    `json:"hot,omitempty"`
	ChurnRatio float64 `json:"churn_ratio,omitempty"`
	ChurnAllow string  `json:"churn_allow,omitempty"`
	// Inner, for a statement whose read folds away while planning (an
	// uncorrelated EXISTS or scalar subquery evaluates to a constant), is
	// that inner read, explained and judged in its place.
	Inner string `json:"inner,omitempty"`
}

func (c Case) slack() int64 {
	if c.ScaleSlack != nil {
		return *c.ScaleSlack
	}
	return DefaultScaleSlack
}

// Observation is one case explained at one scale.
type Observation struct {
	Scale       int
	Ops         []Operator
	RowsRead    int64
	ProcessKeys int64 // when the server reports it
	HasKeys     bool
}

// judgePlan applies the per-plan rules to one observation.
func judgePlan(c Case, o Observation) []string {
	var v []string
	for _, op := range o.Ops {
		if fullScans[op.ID] && c.AllowFullScan == "" {
			v = append(v, fmt.Sprintf("%s: %s on %s at scale %d (a full scan reads the whole table or index; add an index or allow it with a reason)",
				c.Query, op.RawID, orUnknown(op.Access), o.Scale))
		}
	}
	if !HasScan(o.Ops) && c.NoRead == "" {
		v = append(v, fmt.Sprintf("%s: the plan at scale %d reads nothing visible (%s): a predicate may have folded to a constant; explain its inner read (\"inner\") or state why it reads nothing (\"no_read\")",
			c.Query, o.Scale, Brief(o.Ops)))
	}
	if c.MaxRowsRead > 0 && o.RowsRead > c.MaxRowsRead {
		v = append(v, fmt.Sprintf("%s: reads %d rows at scale %d, over its budget of %d (%s)",
			c.Query, o.RowsRead, o.Scale, c.MaxRowsRead, Brief(o.Ops)))
	}
	if o.HasKeys && c.MaxRowsRead > 0 && o.ProcessKeys > c.MaxRowsRead {
		v = append(v, fmt.Sprintf("%s: processes %d keys at scale %d, over its budget of %d",
			c.Query, o.ProcessKeys, o.Scale, c.MaxRowsRead))
	}
	return v
}

// judgeScale compares the smallest and largest scale: rows read must not
// grow with the backlog beyond the case's slack.
func judgeScale(c Case, small, large Observation) []string {
	if grown := large.RowsRead - small.RowsRead; grown > c.slack() {
		return []string{fmt.Sprintf("%s: rows read grow with the backlog: %d at scale %d, %d at scale %d (+%d, slack %d); the plan reads rows it does not need (%s)",
			c.Query, small.RowsRead, small.Scale, large.RowsRead, large.Scale, grown, c.slack(), Brief(large.Ops))}
	}
	return nil
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no access object)"
	}
	return s
}
