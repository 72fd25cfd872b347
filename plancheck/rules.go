package plancheck

import (
	"fmt"
	"strings"
	"time"
)

// DefaultScaleSlack is how many more rows a case may read at the large scale
// than at the small one when the case states no slack: one coprocessor page
// (TiDB reads index ranges in pages of up to 64 rows before a LIMIT stops
// it, so a page may be fuller when more rows exist).
const DefaultScaleSlack = 64

// Case is one plan-check case: a catalog statement, the arguments it runs
// with on the fixture, and its budgets. Cases live in queries/plancheck.json.
type Case struct {
	Query string `json:"query"`
	// Label tells apart several cases of one statement (different argument
	// shapes); the report names the case Query#Label.
	Label string         `json:"label,omitempty"`
	Args  map[string]any `json:"args"`
	// MaxRowsRead bounds rows read by scan operators at every scale.
	MaxRowsRead int64 `json:"max_rows_read"`
	// PerElement says the budget is for the case's slice elements (a batch
	// point get reads one row per key asked for): a traced call asking for
	// more keys gets a budget in proportion.
	PerElement bool `json:"per_element,omitempty"`
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
	// Hot marks a statement of the claim path. It is timed (the median of
	// several runs after a warm-up) on every fixture: at the largest it must
	// not run more than TimeRatio (default DefaultTimeRatio) times slower
	// than at the smallest, and on the churned fixture (see Churn) not more
	// than ChurnRatio (default DefaultChurnRatio) times slower than fresh;
	// medians under TimeFloor pass. TimeAllow and ChurnAllow are the
	// reviewed escapes. The runtime's traced calls of the statement are held
	// to TimeRatio of the case's time on the same database.
	Hot        bool    `json:"hot,omitempty"`
	TimeRatio  float64 `json:"time_ratio,omitempty"`
	TimeAllow  string  `json:"time_allow,omitempty"`
	ChurnRatio float64 `json:"churn_ratio,omitempty"`
	ChurnAllow string  `json:"churn_allow,omitempty"`
	// A hot statement must also have its plan cached by TiDB when it runs
	// prepared, as the runtime runs it (see PlanCached): else it is
	// optimized again on every run. UncachedPlan is the reviewed escape
	// (why this one may be optimized every time); a case whose plan is
	// cached must not carry one.
	UncachedPlan string `json:"uncached_plan,omitempty"`
	// Inner, for a statement whose read folds away while planning (an
	// uncorrelated EXISTS or scalar subquery evaluates to a constant), is
	// that inner read, explained and judged in its place.
	Inner string `json:"inner,omitempty"`
}

// Name is how the report names the case: its statement, and its label if any.
func (c Case) Name() string {
	if c.Label == "" {
		return c.Query
	}
	return c.Query + "#" + c.Label
}

func (c Case) slack() int64 {
	if c.ScaleSlack != nil {
		return *c.ScaleSlack
	}
	return DefaultScaleSlack
}

// Observation is one case explained on one fixture.
type Observation struct {
	Fixture     string
	Ops         []Operator
	RowsRead    int64
	ProcessKeys int64 // when the server reports it
	HasKeys     bool
	RU          float64 // request units, when the server reports them (see RequestUnits)
	HasRU       bool
	Median      time.Duration // a hot case's median execution time
}

// judgePlan applies the per-plan rules to one observation.
func judgePlan(c Case, o Observation) []string {
	var v []string
	for _, op := range o.Ops {
		if fullScans[op.ID] && c.AllowFullScan == "" {
			v = append(v, fmt.Sprintf("%s: %s on %s at %s (a full scan reads the whole table or index; add an index or allow it with a reason)",
				c.Name(), op.RawID, orUnknown(op.Access), o.Fixture))
		}
	}
	if !HasScan(o.Ops) && c.NoRead == "" {
		v = append(v, fmt.Sprintf("%s: the plan at %s reads nothing visible (%s): a predicate may have folded to a constant; explain its inner read (\"inner\") or state why it reads nothing (\"no_read\")",
			c.Name(), o.Fixture, Brief(o.Ops)))
	}
	if c.MaxRowsRead > 0 && o.RowsRead > c.MaxRowsRead {
		v = append(v, fmt.Sprintf("%s: reads %d rows at %s, over its budget of %d (%s)",
			c.Name(), o.RowsRead, o.Fixture, c.MaxRowsRead, Brief(o.Ops)))
	}
	if o.HasKeys && c.MaxRowsRead > 0 && o.ProcessKeys > c.MaxRowsRead {
		v = append(v, fmt.Sprintf("%s: processes %d keys at %s, over its budget of %d",
			c.Name(), o.ProcessKeys, o.Fixture, c.MaxRowsRead))
	}
	return v
}

// judgeScale compares the smallest and largest fixture: rows read must not
// grow with the backlog beyond the case's slack.
func judgeScale(c Case, small, large Observation) []string {
	if grown := large.RowsRead - small.RowsRead; grown > c.slack() {
		return []string{fmt.Sprintf("%s: rows read grow with the backlog: %d at %s, %d at %s (+%d, slack %d); the plan reads rows it does not need (%s)",
			c.Name(), small.RowsRead, small.Fixture, large.RowsRead, large.Fixture, grown, c.slack(), Brief(large.Ops))}
	}
	return nil
}

func orUnknown(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no access object)"
	}
	return s
}
