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
		if seen[c.Name()] {
			return nil, fmt.Errorf("plancheck: two cases named %s (give them labels)", c.Name())
		}
		seen[c.Name()] = true
		if c.MaxRowsRead <= 0 && c.NoRead == "" {
			return nil, fmt.Errorf("plancheck: case %s needs max_rows_read (or no_read with a reason)", c.Name())
		}
	}
	return f.Cases, nil
}

// Result is the verdict on one case across the fixtures.
type Result struct {
	Query        string        `json:"query"` // the case's name (see Case.Name)
	Observations []Observation `json:"-"`
	RowsRead     []int64       `json:"rows_read"` // per fixture, in Report.Fixtures order
	// RU: the request units TiDB reports for one execution, per fixture
	// (empty when the server reports none). Reported, not judged yet: on
	// the embedded engine RU grow where rows read are capped (README). A
	// write's RU leave out what its commit would write: the explain is
	// rolled back.
	RU []float64 `json:"ru,omitempty"`
	// MedianMs: a hot case's median execution time per fixture (empty when
	// not timed).
	MedianMs  []float64 `json:"median_ms,omitempty"`
	Operators string    `json:"operators"` // at the largest fixture
	Shape     string    `json:"shape"`     // at the largest fixture
	// ChurnedMs: a hot case's median on the churned fixture (0 when none).
	ChurnedMs float64 `json:"churned_ms,omitempty"`
	// PlanCached: whether TiDB caches a hot case's plan when it runs
	// prepared, as the runtime runs it (nil when not checked).
	PlanCached *bool    `json:"plan_cached,omitempty"`
	Violations []string `json:"violations,omitempty"`
	boundArgs  int      // arguments the case binds (see Case.PerElement)
}

// Pass reports whether the case has no violation.
func (r Result) Pass() bool { return len(r.Violations) == 0 }

// Report is a whole run.
type Report struct {
	Server   string   `json:"server"`
	Fixtures []string `json:"fixtures"` // smallest first
	Scales   []int    `json:"scales"`   // per fixture; 0 for one plancheck did not seed
	Results  []Result `json:"results"`
	// Traced are the runtime's recorded calls, explained (see Trace).
	Traced []TracedResult `json:"traced,omitempty"`
	// Uncovered lists catalog statements without a case: each fails the run.
	Uncovered []string `json:"uncovered,omitempty"`
}

// Pass reports whether every case and traced statement passed and every
// statement has a case.
func (r Report) Pass() bool {
	if len(r.Uncovered) > 0 {
		return false
	}
	for _, res := range r.Results {
		if !res.Pass() {
			return false
		}
	}
	for _, tr := range r.Traced {
		if !tr.Pass() {
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

// Fixture is one database the cases are explained on: a fixture plancheck
// seeded at a scale, or a database of the user's (Scale 0), such as a copy
// of production data.
type Fixture struct {
	Name  string
	Scale int
	DB    *sql.DB
}

// Options are the optional parts of a Check.
type Options struct {
	// Churned is a copy of the largest fixture after Churn: hot cases are
	// also timed there against the largest fresh fixture.
	Churned *sql.DB
	// Trace recorded the runtime's statements on Churned (see Churn): they
	// are explained there with the arguments the runtime sent.
	Trace *Trace
	// Values override fixture values for "$name" arguments (for a database
	// plancheck did not seed).
	Values map[string]any
	// Runs is how many timed runs each median takes. Default DefaultRuns.
	Runs int
	// Progress receives a line per case.
	Progress io.Writer
}

// Check explains every case on every fixture (in the order given, smallest
// first) and judges it: the plan rules on each, the scale and time rules
// between the first and the last, the churn rule against Options.Churned,
// and then the runtime's traced calls.
func Check(ctx context.Context, stmts []Statement, cases []Case, fixtures []Fixture, opts Options) (Report, error) {
	rep := Report{}
	if len(fixtures) == 0 {
		return rep, fmt.Errorf("plancheck: no database to check")
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	for _, f := range fixtures {
		rep.Fixtures = append(rep.Fixtures, f.Name)
		rep.Scales = append(rep.Scales, f.Scale)
		if f.Scale > 0 {
			if err := Verify(ctx, f.DB); err != nil {
				return rep, fmt.Errorf("plancheck: %s: %w", f.Name, err)
			}
		}
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
	for k, v := range opts.Values {
		values[k] = v
	}
	byQuery := map[string]Case{}          // the first case of each statement, for traced calls
	boundArgs := map[string]int{}         // how many arguments that case binds
	churnedCase := map[string]timedCase{} // each hot case's time where the traced calls ran
	for _, c := range cases {
		res, churned, err := checkCase(ctx, c, sqlOf[c.Query], values, fixtures, opts)
		if err != nil {
			return rep, err
		}
		if _, ok := byQuery[c.Query]; !ok {
			byQuery[c.Query], boundArgs[c.Query] = c, res.boundArgs
		}
		if churned.median > 0 {
			if _, ok := churnedCase[c.Query]; !ok {
				churnedCase[c.Query] = churned
			}
		}
		rep.Results = append(rep.Results, res)
		fmt.Fprintf(opts.Progress, "plancheck: %-34s rows %v ms %v %s\n", res.Query, res.RowsRead, res.MedianMs, verdict(res.Pass()))
	}
	if opts.Trace != nil && opts.Churned != nil {
		traced, err := checkTrace(ctx, opts.Churned, opts.Trace, byQuery, boundArgs, churnedCase, opts.Runs)
		if err != nil {
			return rep, err
		}
		rep.Traced = traced
		for _, tr := range traced {
			fmt.Fprintf(opts.Progress, "plancheck: traced %-27s %d calls, rows %d, %.2f ms %s\n", tr.Query, tr.Calls, tr.RowsRead, tr.MedianMs, verdict(tr.Pass()))
		}
	}
	return rep, nil
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

// checkCase runs one case on every fixture (and the churned one) and
// returns its result and, for a hot case, the case bound and timed on the
// churned fixture.
func checkCase(ctx context.Context, c Case, stmt string, values map[string]any, fixtures []Fixture, opts Options) (Result, timedCase, error) {
	res := Result{Query: c.Name()}
	if c.Inner != "" {
		stmt = c.Inner
	}
	timed := c.Hot && c.NoRead == ""
	for _, f := range fixtures {
		args, err := resolveOn(ctx, f.DB, c.Args, values)
		if err != nil {
			return res, timedCase{}, fmt.Errorf("plancheck: %s at %s: %w", c.Name(), f.Name, err)
		}
		query, bound, err := Bind(stmt, args)
		if err != nil {
			return res, timedCase{}, fmt.Errorf("plancheck: %s: %w", c.Name(), err)
		}
		o, err := explainBound(ctx, f.DB, query, bound)
		if err != nil {
			return res, timedCase{}, fmt.Errorf("plancheck: %s at %s: %w", c.Name(), f.Name, err)
		}
		o.Fixture, res.boundArgs = f.Name, len(bound)
		if timed {
			if o.Median, err = MedianTime(ctx, f.DB, query, bound, opts.Runs); err != nil {
				return res, timedCase{}, fmt.Errorf("plancheck: time %s at %s: %w", c.Name(), f.Name, err)
			}
			res.MedianMs = append(res.MedianMs, ms(o.Median))
		}
		res.Observations = append(res.Observations, o)
		res.RowsRead = append(res.RowsRead, o.RowsRead)
		if o.HasRU {
			res.RU = append(res.RU, o.RU)
		}
		res.Violations = append(res.Violations, judgePlan(c, o)...)
	}
	if n := len(res.Observations); n > 1 {
		small, large := res.Observations[0], res.Observations[n-1]
		res.Violations = append(res.Violations, judgeScale(c, small, large)...)
		if timed {
			v := judgeTime(c, small, large)
			if len(v) > 0 {
				var err error
				// One slow median on a busy machine is not a finding: time
				// both again, and judge the second pair.
				var m [2]time.Duration
				v, m, err = retime(ctx, c, stmt, values, [2]Fixture{fixtures[0], fixtures[n-1]}, opts.Runs, func(m [2]time.Duration) []string {
					small.Median, large.Median = m[0], m[1]
					return judgeTime(c, small, large)
				})
				if err != nil {
					return res, timedCase{}, err
				}
				res.MedianMs[0], res.MedianMs[n-1] = ms(m[0]), ms(m[1])
			}
			res.Violations = append(res.Violations, v...)
		}
	}
	last := res.Observations[len(res.Observations)-1]
	res.Operators, res.Shape = Brief(last.Ops), Shape(last.Ops)
	if timed {
		if err := checkPlanCache(ctx, c, stmt, values, fixtures[len(fixtures)-1], &res); err != nil {
			return res, timedCase{}, err
		}
	}
	if !timed || opts.Churned == nil {
		return res, timedCase{}, nil
	}
	args, err := resolveOn(ctx, opts.Churned, c.Args, values)
	if err != nil {
		return res, timedCase{}, fmt.Errorf("plancheck: %s churned: %w", c.Name(), err)
	}
	query, bound, err := Bind(stmt, args)
	if err != nil {
		return res, timedCase{}, err
	}
	churned, err := MedianTime(ctx, opts.Churned, query, bound, opts.Runs)
	if err != nil {
		return res, timedCase{}, fmt.Errorf("plancheck: time %s churned: %w", c.Name(), err)
	}
	v := judgeChurn(c, last.Median, churned)
	if len(v) > 0 {
		// As for the time rule: time the fresh and the churned fixture
		// again, alternately, and judge that pair.
		var m [2]time.Duration
		v, m, err = retime(ctx, c, stmt, values, [2]Fixture{fixtures[len(fixtures)-1], {Name: "churned", DB: opts.Churned}}, opts.Runs, func(m [2]time.Duration) []string {
			return judgeChurn(c, m[0], m[1])
		})
		if err != nil {
			return res, timedCase{}, err
		}
		churned = m[1]
	}
	res.ChurnedMs = ms(churned)
	res.Violations = append(res.Violations, v...)
	return res, timedCase{query: query, args: bound, median: churned}, nil
}

// timedCase is a hot case bound on the churned database and its median
// time there: what a traced call is compared with, and timed again beside.
type timedCase struct {
	query  string
	args   []any
	median time.Duration
}

// checkPlanCache runs a hot case prepared at fixture f and adds a
// violation when TiDB does not cache its plan.
func checkPlanCache(ctx context.Context, c Case, stmt string, values map[string]any, f Fixture, res *Result) error {
	args, err := resolveOn(ctx, f.DB, c.Args, values)
	if err != nil {
		return fmt.Errorf("plancheck: %s at %s: %w", c.Name(), f.Name, err)
	}
	query, bound, err := Bind(stmt, args)
	if err != nil {
		return fmt.Errorf("plancheck: %s: %w", c.Name(), err)
	}
	cached, reason, err := PlanCached(ctx, f.DB, query, bound)
	if err != nil {
		return fmt.Errorf("plancheck: plan cache of %s at %s: %w", c.Name(), f.Name, err)
	}
	res.PlanCached = &cached
	switch {
	case !cached && c.UncachedPlan == "":
		res.Violations = append(res.Violations, fmt.Sprintf("%s: a hot statement's plan is not cached when it runs prepared (%s): it is optimized again on every run; fix it, or give the reviewed reason as uncached_plan", c.Name(), reason))
	case cached && c.UncachedPlan != "":
		res.Violations = append(res.Violations, fmt.Sprintf("%s: the plan is cached now; remove uncached_plan (%q)", c.Name(), c.UncachedPlan))
	}
	return nil
}

// retimeAttempts is how many interleaved re-timings a hot case gets after
// a failing first pair before its time rule counts.
const retimeAttempts = 2

// retime measures a case's medians on two fixtures again (the smallest
// and the largest, or the largest and its churned copy) and judges them.
// Each attempt alternates the two fixtures run by run, so a burst of load
// on a shared machine slows both sides alike instead of one; a range that
// really grows with the backlog (or with the delete markers) is slower on
// the second side in every attempt and still fails. It returns the last
// attempt's verdict and medians.
func retime(ctx context.Context, c Case, stmt string, values map[string]any, sides [2]Fixture, runs int, judge func(medians [2]time.Duration) []string) ([]string, [2]time.Duration, error) {
	var bound [2]struct {
		f     Fixture
		query string
		args  []any
	}
	var medians [2]time.Duration
	for i, f := range sides {
		args, err := resolveOn(ctx, f.DB, c.Args, values)
		if err != nil {
			return nil, medians, err
		}
		query, b, err := Bind(stmt, args)
		if err != nil {
			return nil, medians, err
		}
		bound[i].f, bound[i].query, bound[i].args = f, query, b
	}
	var v []string
	for range retimeAttempts {
		err := interleavedMedians(runs, func(side int) (time.Duration, error) {
			b := bound[side]
			o, err := explainBound(ctx, b.f.DB, b.query, b.args)
			if err != nil {
				return 0, fmt.Errorf("plancheck: time %s at %s: %w", c.Name(), b.f.Name, err)
			}
			d, ok := ExecTime(o.Ops)
			if !ok {
				return 0, fmt.Errorf("plancheck: time %s at %s: no execution time in the plan's root operator", c.Name(), b.f.Name)
			}
			return d, nil
		}, &medians)
		if err != nil {
			return nil, medians, err
		}
		if v = judge(medians); len(v) == 0 {
			return nil, medians, nil
		}
	}
	return v, medians, nil
}

// Explain runs EXPLAIN ANALYZE of one catalog statement with its named
// arguments (see Bind).
func Explain(ctx context.Context, db *sql.DB, stmt string, args map[string]any) (Observation, error) {
	query, bound, err := Bind(stmt, args)
	if err != nil {
		return Observation{}, err
	}
	return explainBound(ctx, db, query, bound)
}

// explainBound runs EXPLAIN ANALYZE of a bound statement. A statement that
// writes runs inside a transaction that is rolled back: EXPLAIN ANALYZE
// executes it.
func explainBound(ctx context.Context, db *sql.DB, query string, args []any) (Observation, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Observation{}, err
	}
	defer tx.Rollback() //nolint:errcheck // the explain must change nothing
	rows, err := tx.QueryContext(ctx, "EXPLAIN ANALYZE "+query, args...)
	if err != nil {
		return Observation{}, fmt.Errorf("EXPLAIN ANALYZE: %w", err)
	}
	ops, err := ReadPlan(rows)
	if err != nil {
		return Observation{}, err
	}
	keys, hasKeys := ProcessKeys(ops)
	ru, hasRU := RequestUnits(ops)
	return Observation{Ops: ops, RowsRead: RowsRead(ops), ProcessKeys: keys, HasKeys: hasKeys, RU: ru, HasRU: hasRU}, nil
}

// ReadPlan reads and closes the rows of an EXPLAIN ANALYZE (see ParsePlan).
func ReadPlan(rows *sql.Rows) ([]Operator, error) {
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, fmt.Errorf("read the plan's columns: %w", err)
	}
	var table [][]string
	for rows.Next() {
		raw := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range raw {
			ptrs[i] = &raw[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, fmt.Errorf("read a plan row: %w", err)
		}
		row := make([]string, len(cols))
		for i, v := range raw {
			row[i] = v.String
		}
		table = append(table, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the plan: %w", err)
	}
	return ParsePlan(table)
}
