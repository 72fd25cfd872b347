package plancheck

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/laneq/laneq/internal/sqlwrap"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Trace records the catalog statements a DB's connections send, with the
// arguments the runtime chose (a claimer's scan windows, a finisher's
// follower windows, next-work spans), keeping the last few of each. Check
// explains them beside the hand-written cases: a runtime change that sends
// an unbounded range fails plancheck even when every case still passes.
type Trace struct {
	keep   int
	mu     sync.Mutex
	calls  map[string][]TracedCall
	counts map[string]int
}

// TracedCall is one recorded execution.
type TracedCall struct {
	Query string // as sent: sqlc's SQL with its placeholders
	Args  []any
}

// DefaultTraceKeep is how many of each statement's last calls a Trace
// keeps: enough that the claim scans of every queue class are among them.
const DefaultTraceKeep = 12

// NewTrace keeps the last keep calls of each statement.
func NewTrace(keep int) *Trace {
	return &Trace{keep: max(keep, 1), calls: map[string][]TracedCall{}, counts: map[string]int{}}
}

// Open returns a DB for dsn whose statements t records.
func (t *Trace) Open(dsn string) (*sql.DB, error) { return sqlwrap.Open(dsn, t) }

// Before records a catalog statement (sqlwrap.Hook).
func (t *Trace) Before(_ context.Context, query string, args []driver.NamedValue) (any, error) {
	if !strings.HasPrefix(query, "-- name: ") {
		return nil, nil
	}
	name := sqlwrap.Name(query)
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.counts[name]++
	calls := append(t.calls[name], TracedCall{Query: query, Args: vals})
	if len(calls) > t.keep {
		calls = calls[len(calls)-t.keep:]
	}
	t.calls[name] = calls
	return nil, nil
}

// After leaves the outcome as it is (sqlwrap.Hook).
func (t *Trace) After(_ context.Context, _ string, _ any, err error) error { return err }

// Calls returns the recorded calls by statement name, and how often each
// statement ran in all.
func (t *Trace) Calls() (map[string][]TracedCall, map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	calls, counts := map[string][]TracedCall{}, map[string]int{}
	for k, v := range t.calls {
		calls[k] = append([]TracedCall(nil), v...)
	}
	for k, v := range t.counts {
		counts[k] = v
	}
	return calls, counts
}

// WorkloadOptions configures Churn.
type WorkloadOptions struct {
	// Items pushed through the runtime. Default 5000.
	Items int
	// Claimer configures the worker's claimer (a test breaks it on purpose).
	Claimer workqueue.ClaimerConfig
	// Progress receives a line when the workload is done.
	Progress io.Writer
}

// churnWorkType marks the workload's items; no case selects it, so the
// fixture rows the cases name are untouched.
const churnWorkType = "churn"

// Churn runs opts.Items work items through the real runtime on db, in the
// target scope: a runtime/worker with 8 executors claims, runs and
// completes them while they are enqueued, in batches of 250, across the
// three queue classes, a fifth of them in lanes of five, and one in 50
// failing its first attempt (a retry through the due timer). Every claim and
// finish leaves MVCC delete markers behind, which is what a busy queue's
// statements step over until GC (10 minutes by default); and when db
// records a Trace, it holds the arguments the runtime actually sent.
func Churn(ctx context.Context, db *sql.DB, opts WorkloadOptions) error {
	if opts.Items <= 0 {
		opts.Items = 5000
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	started := time.Now()
	qu, err := workqueue.New(db, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: 20 * time.Millisecond, Max: time.Second}})
	if err != nil {
		return fmt.Errorf("plancheck: churn: %w", err)
	}
	cfg := worker.Config{Scope: TargetScope, Owner: "plancheck-churn", Claimer: opts.Claimer,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Scheduler.Executors = 8
	cfg.Controller.GenerationProbeEvery = 200 * time.Millisecond
	w, err := worker.New(qu, cfg, map[string]worker.Handler{churnWorkType: func(_ context.Context, job *worker.Job) error {
		if job.Item.Attempt == 1 && strings.HasSuffix(job.Event.SourceID, "/retry") {
			return fmt.Errorf("plancheck: the churn's scripted first failure")
		}
		return nil
	}})
	if err != nil {
		return fmt.Errorf("plancheck: churn: %w", err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(runCtx) }()
	defer func() { stop(); <-done }()
	classes := []string{"interactive", "default", "bulk"}
	for start := 0; start < opts.Items; start += 250 {
		events := make([]workqueue.Event, 0, 250)
		for i := start; i < min(start+250, opts.Items); i++ {
			work := workqueue.Work{WorkType: churnWorkType, QueueClass: classes[i%3]}
			if i%5 == 0 {
				work.SourceLane = fmt.Sprintf("churn-lane:%d", i/25)
			}
			source := fmt.Sprint(i)
			if i%50 == 7 {
				source += "/retry"
			}
			events = append(events, workqueue.Event{IdempotencyKey: fmt.Sprintf("churn:%d", i), SourceID: source, Work: []workqueue.Work{work}})
		}
		if _, err := qu.Enqueue(ctx, TargetScope, events); err != nil {
			return fmt.Errorf("plancheck: churn enqueue: %w", err)
		}
		w.Wake()
	}
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var left int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND work_type = ? AND state <> 'completed'`,
			TargetScope, churnWorkType).Scan(&left); err != nil {
			return fmt.Errorf("plancheck: churn progress: %w", err)
		}
		if left == 0 {
			break
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("plancheck: churn worker stopped with %d items left: %v", left, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("plancheck: churn: %d of %d items left after 10 minutes", left, opts.Items)
		}
		time.Sleep(100 * time.Millisecond) // a progress poll of this tool, not of the runtime
	}
	fmt.Fprintf(opts.Progress, "plancheck: churned %d items through runtime/worker in %s\n", opts.Items, time.Since(started).Round(time.Millisecond))
	return nil
}

// TracedResult is the verdict on the recorded calls of one statement.
type TracedResult struct {
	Query      string   `json:"query"`
	Calls      int      `json:"calls"`     // executions recorded in all
	Explained  int      `json:"explained"` // the last ones, explained (first scans left out)
	RowsRead   int64    `json:"rows_read"` // the most any explained call read
	MedianMs   float64  `json:"median_ms"` // the slowest explained call's median
	Args       string   `json:"args"`      // the slowest call's arguments, abridged
	Violations []string `json:"violations,omitempty"`
}

// Pass reports whether the statement's recorded calls broke no rule.
func (r TracedResult) Pass() bool { return len(r.Violations) == 0 }

// checkTrace explains the recorded calls of every catalog statement that has
// a case on db (where they ran) and judges them: no full scan, rows read
// within the case's budget, and, for a hot case, time within TimeRatio of
// what the hand-written case took on the same database.
func checkTrace(ctx context.Context, db *sql.DB, trace *Trace, cases map[string]Case, caseArgs map[string]int, caseTimed map[string]timedCase, runs int) ([]TracedResult, error) {
	calls, counts := trace.Calls()
	names := make([]string, 0, len(calls))
	for name := range calls {
		// Statements with nothing to explain (an INSERT ... VALUES, whose
		// EXPLAIN ANALYZE would insert its row again) are left out.
		if c, ok := cases[name]; ok && c.NoRead == "" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []TracedResult
	for _, name := range names {
		c := cases[name]
		res := TracedResult{Query: name, Calls: counts[name]}
		base, hasBase := caseTimed[name]
		ratio := max(c.TimeRatio, DefaultTimeRatio)
		// The call furthest over its reviewed case (by time when there is
		// none), and that case's time when it was judged.
		var slowest, slowestBase time.Duration
		worst := -1.0
		for _, call := range calls[name] {
			if firstScan(call) || farLookup(name, call) {
				continue // a shape that runs rarely by design: see each
			}
			res.Explained++
			o, err := explainBound(ctx, db, call.Query, call.Args)
			if err != nil {
				return out, fmt.Errorf("traced %s %s: %w", name, abridge(call.Args), err)
			}
			o.Fixture = "traced"
			budget := c
			if c.PerElement && caseArgs[name] > 0 && len(call.Args) > caseArgs[name] {
				// Batch point gets: as many rows as keys. The case's bound
				// arguments hold its keys; the traced call's extra ones are keys.
				budget.MaxRowsRead = c.MaxRowsRead * int64(len(call.Args)) / int64(caseArgs[name])
			}
			for _, v := range judgePlan(budget, o) {
				res.Violations = append(res.Violations, "traced "+v+" with the arguments the runtime sent: "+abridge(call.Args))
			}
			res.RowsRead = max(res.RowsRead, o.RowsRead)
			if !c.Hot || c.NoRead != "" {
				continue
			}
			d, err := MedianTime(ctx, db, call.Query, call.Args, runs)
			if err != nil {
				return out, fmt.Errorf("time traced %s: %w", name, err)
			}
			b := base.median
			// One slow median on a busy machine is not a finding: time the
			// call again, and the reviewed case right beside it, so both are
			// measured under the same load, up to retimeRounds times, and
			// keep the round that shows the call least slow. A range wider
			// than the case's stays slower in every round whatever the load;
			// a burst of load does not (seen beside a CPU hog: 6.4x in one
			// round).
			for round := 0; hasBase && overRatio(b, d, ratio) && round < retimeRounds; round++ {
				d2, err := MedianTime(ctx, db, call.Query, call.Args, runs)
				if err != nil {
					return out, fmt.Errorf("time traced %s: %w", name, err)
				}
				b2, err := MedianTime(ctx, db, base.query, base.args, runs)
				if err != nil {
					return out, fmt.Errorf("time case %s again: %w", name, err)
				}
				b2 = max(b2, base.median)
				if float64(d2)/float64(b2) < float64(d)/float64(b) {
					d, b = d2, b2
				}
			}
			score := float64(d)
			if hasBase {
				score /= float64(b)
			}
			if score >= worst {
				worst, slowest, slowestBase, res.Args = score, d, b, abridge(call.Args)
			}
		}
		res.MedianMs = ms(slowest)
		if hasBase && c.Hot && c.TimeAllow == "" && overRatio(slowestBase, slowest, ratio) {
			res.Violations = append(res.Violations, fmt.Sprintf("traced %s: %.1fx slower (%s) with the arguments the runtime sent than the reviewed case on the same database (%s), over its ratio of %.1f: the runtime's range is wider than the case says (%s)",
				name, float64(slowest)/float64(slowestBase), round(slowest), round(slowestBase), ratio, res.Args))
		}
		out = append(out, res)
	}
	return out, nil
}

// retimeRounds bounds how often a traced call over its ratio is timed again
// beside its reviewed case before the verdict.
const retimeRounds = 3

// farLookup reports a next-work lookup span that starts a minute or more
// ahead: a quiet worker's far lookup (on entering quiet mode, at the quiet
// backstop, after a look-far wake), which looks as far as the quiet
// backstop once in hours, never per claim turn. On the embedded engine its
// time grows with the not-due backlog in the span; the "#far-span" case
// bounds its rows and shows that time.
func farLookup(name string, call TracedCall) bool {
	if name != "NextWorkAt" || len(call.Args) < 3 {
		return false
	}
	from, ok := call.Args[2].(int64)
	return ok && from >= farLookupFrom.Microseconds()
}

// farLookupFrom is where a worker's normal lookups end (the 1-minute
// reconciliation backstop) rounded up to the span boundary after it.
const farLookupFrom = 64 * time.Second

// firstScan reports a call whose range starts at the beginning of time: a
// claimer cursor's first scan of a class, at start-up or after a
// reconciliation rescan. It reads the class's whole range once by design;
// the "#first-scan" cases bound that shape, and the traced check judges the
// runtime's steady-state ranges.
func firstScan(call TracedCall) bool {
	for _, a := range call.Args {
		if t, ok := a.(time.Time); ok && t.Equal(time.Unix(0, 0)) {
			return true
		}
	}
	return false
}

// abridge shows arguments briefly: times as times, long lists shortened.
func abridge(args []any) string {
	parts := make([]string, 0, len(args))
	for i, a := range args {
		if i == 12 {
			parts = append(parts, fmt.Sprintf("… %d more", len(args)-i))
			break
		}
		switch v := a.(type) {
		case time.Time:
			parts = append(parts, v.UTC().Format("2006-01-02T15:04:05.000000"))
		case []byte:
			parts = append(parts, fmt.Sprintf("%d bytes", len(v)))
		default:
			s := fmt.Sprint(v)
			if len(s) > 40 {
				s = s[:40] + "…"
			}
			parts = append(parts, s)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
