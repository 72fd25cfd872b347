package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/internal/serverusage"
	"github.com/laneq/laneq/internal/tidbenv"
	"github.com/laneq/laneq/queries"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
	"github.com/laneq/laneq/schema"
)

// Options says where a run happens.
type Options struct {
	Spec Spec
	// Server is the TiDB to run on; a TiDB pause needs one this process
	// started (embedded or Docker).
	Server *tidbenv.Server
	// Executable and Args start a worker process (the process runs
	// WorkerMain when it sees EnvWorker). Default: this executable, no
	// arguments.
	Executable string
	Args       []string
	// Progress receives a progress line every ProgressEvery (default 2s);
	// nil discards them.
	Progress      io.Writer
	ProgressEvery time.Duration
	// KeepDatabases leaves the bench databases behind for inspection.
	KeepDatabases bool
}

// Run runs the laneq phase and, with Spec.Baseline, the naive phase, and
// reports both. An error means the run could not be carried out; a run
// that found violations returns a Report whose OK is false.
func Run(ctx context.Context, opts Options) (*Report, error) {
	spec, err := opts.Spec.WithDefaults()
	if err != nil {
		return nil, err
	}
	if opts.Server == nil {
		return nil, errors.New("bench: no TiDB server")
	}
	if opts.Executable == "" {
		if opts.Executable, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("bench: find this executable to start workers: %w", err)
		}
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	if opts.ProgressEvery <= 0 {
		opts.ProgressEvery = 2 * time.Second
	}
	rep := &Report{Spec: spec, Shape: buildWorkload(spec, false).shape(), TiDB: fmt.Sprintf("%s %s (%s)", opts.Server.Kind, opts.Server.Version, opts.Server.Detail)}
	if rep.Laneq, err = runPhase(ctx, opts, spec, phaseFaults); err != nil {
		return nil, err
	}
	if spec.Baseline {
		free, err := runPhase(ctx, opts, spec, phaseFree)
		if err != nil {
			return nil, err
		}
		naive, err := runPhase(ctx, opts, spec, phaseNaive)
		if err != nil {
			return nil, err
		}
		rep.LaneqFree, rep.Naive = &free, &naive
		rep.Ratios = ratiosOf(free, naive)
	}
	return rep, nil
}

// Phases of a run.
const (
	// phaseFaults is laneq on the whole workload (lanes, bursts,
	// projections, dependencies, designed failures) under the fault plan.
	phaseFaults = "laneq"
	// phaseFree and phaseNaive are the baseline pair: the same laneless
	// events, without faults or designed failures, claimed by laneq and by
	// the naive loop (which knows nothing of lanes, projections or
	// dependencies and has no lease recovery).
	phaseFree  = "laneq-free"
	phaseNaive = "naive"
)

// phase is one run on one fresh database.
type phase struct {
	opts  Options
	spec  Spec
	naive bool   // the naive claim loop runs the workers
	name  string // phaseFaults, phaseFree or phaseNaive
	db    *sql.DB
	bq    *benchdb.Queries
	dsn   string
	wl    workload
	logs  string // directory of the worker processes' stderr logs
	start time.Time
	// drainedAt is the database clock when the queue was seen drained:
	// ticks stored after it may be left pending by the stop.
	drainedAt time.Time

	mu        sync.Mutex
	procs     []*proc
	problems  []string // processes that died on their own
	lastFault string
	faults    int
	skipped   []string
	enqueued  int
	// cancels counts the cancellations made (Spec.Cancels);
	// skippedCancels says why the others were not.
	cancels        int
	skippedCancels []string
}

// disrupt runs the fault plan and the cancellations side by side, until
// both are done; the first to fail stops the other, and its error is the
// phase's.
func (p *phase) disrupt(ctx context.Context) error {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	var wg sync.WaitGroup
	for _, run := range []func(context.Context) error{p.injectFaults, p.cancelRunning} {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				stop(err)
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx) // nil unless one failed or the phase was cancelled
}

func runPhase(ctx context.Context, opts Options, spec Spec, name string) (PhaseReport, error) {
	p := &phase{opts: opts, spec: spec, naive: name == phaseNaive, name: name}
	if name != phaseFaults {
		p.spec.Faults = FaultPlan{} // the naive loop has no lease recovery: a fault would lose work
		p.spec.FailureRate = -1     // nor a retry path
		p.spec.Deadline = spec.BaselineDeadline
		p.spec.Periodic, p.spec.RateLimit, p.spec.RateKeys = 0, 0, 0 // the naive loop has neither
		p.spec.StubbornEvery, p.spec.Cancels = 0, 0                  // nor cancellation
		p.spec.HandlerDeadline, p.spec.AbandonAfter = 0, 0           // nor a handler deadline
	}
	dbName := "laneq_bench_" + strings.ReplaceAll(p.name, "-", "_") + "_" + randomHex(4)
	if err := p.setUp(ctx, dbName); err != nil {
		return PhaseReport{}, err
	}
	defer func() {
		p.db.Close()
		if !opts.KeepDatabases {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			_ = opts.Server.DropDatabase(dctx, dbName)
		}
	}()
	fmt.Fprintf(opts.Progress, "%s: database %s, %d processes × %d executors, %d events, worker logs in %s\n",
		p.name, dbName, spec.Processes, spec.Executors, spec.Items, p.logs)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i := range spec.Processes {
		if _, err := p.startProcess(runCtx, fmt.Sprintf("p%d", i+1)); err != nil {
			p.stopAll()
			return PhaseReport{}, err
		}
	}
	usageBefore, err := serverusage.ReadExcept(ctx, p.db, benchStatements)
	if err != nil {
		p.stopAll()
		return PhaseReport{}, fmt.Errorf("bench: %s: usage before the run: %w", name, err)
	}
	p.start = time.Now()
	enqueueErr := make(chan error, 1)
	go func() { enqueueErr <- p.enqueue(runCtx) }()
	disrupted := make(chan error, 1)
	go func() { disrupted <- p.disrupt(runCtx) }()
	drained, err := p.waitDrained(ctx, enqueueErr, disrupted)
	if drained {
		// Ticks enqueued from now until the processes stop may be left
		// pending: the verifier lets those be.
		if p.drainedAt, err = p.bq.BenchNow(ctx); err != nil {
			p.stopAll()
			return PhaseReport{}, fmt.Errorf("bench: %s: read the database clock: %w", name, err)
		}
	}
	p.stopAll()
	if err != nil {
		return PhaseReport{}, err
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
	defer rcancel()
	usageAfter, err := serverusage.ReadExcept(rctx, p.db, benchStatements)
	if err != nil {
		return PhaseReport{}, fmt.Errorf("bench: %s: usage after the run: %w", name, err)
	}
	rep, err := p.report(rctx)
	if err != nil {
		return PhaseReport{}, err
	}
	rep.Usage = usagePerItem(usageAfter.Sub(usageBefore), rep.Items)
	rep.Database = dbName
	if !drained && name == phaseFaults {
		rep.Verification.problem("the queue did not drain within the deadline (%s)", spec.Deadline)
	}
	p.mu.Lock()
	for _, pr := range p.problems {
		rep.Verification.problem("%s", pr)
	}
	rep.Verification.OK = rep.Verification.ProblemCount == 0
	rep.SkippedFaults = p.skipped
	rep.Cancels.Skipped = p.skippedCancels
	p.mu.Unlock()
	verdict := "verified"
	if !rep.Verification.OK {
		verdict = fmt.Sprintf("FAILED verification (%d problems)", rep.Verification.ProblemCount)
	}
	fmt.Fprintf(opts.Progress, "%s: done: %d of %d items terminal in %s (%.0f items/s), claim p50/p99 %s/%s, end-to-end p50/p99 %s/%s; %s\n",
		name, rep.Completed+rep.Skipped+rep.Dead, rep.Items, dur(rep.Duration), rep.Throughput,
		dur(rep.ClaimP50), dur(rep.ClaimP99), dur(rep.EndToEndP50), dur(rep.EndToEndP99), verdict)
	return rep, nil
}

// benchStatements matches the bench's own statements in the statement
// summary's normalized text: every one names a bench_ table or alias
// (queries/bench/bench.sql), and laneq's catalog names none. Its
// bookkeeping is not laneq's cost.
const benchStatements = `%bench\_%`

// usagePerItem is a phase's usage per item.
func usagePerItem(u serverusage.Usage, items int) Usage {
	per := u.PerItem(items)
	return Usage{
		RUPerItem: per.RU(), ReadRUPerItem: per.ReadRU, WriteRUPerItem: per.WriteRU,
		StatementsPerItem: per.Statements, KeysPerItem: per.TotalKeys,
	}
}

// setUp creates and migrates the phase's database and its scopes.
func (p *phase) setUp(ctx context.Context, dbName string) error {
	srv := p.opts.Server
	if err := srv.CreateDatabase(ctx, dbName); err != nil {
		return err
	}
	db, err := srv.Open(dbName)
	if err != nil {
		return err
	}
	p.db, p.dsn, p.bq = db, srv.DSN(dbName), benchdb.New(db)
	if err := serverusage.Enable(ctx, db); err != nil {
		// Without the privilege the summary keeps its defaults: usage is
		// still read, but a busy server may evict entries and undercount.
		fmt.Fprintf(p.opts.Progress, "%s: %v; RU figures may undercount\n", p.name, err)
	}
	db.SetMaxOpenConns(16)
	if _, err := schema.Up(ctx, db); err != nil {
		return fmt.Errorf("bench: migrate %s: %w", dbName, err)
	}
	if err := createBenchTables(ctx, db); err != nil {
		return err
	}
	p.wl = buildWorkload(p.spec, p.name != phaseFaults)
	q, err := workqueue.New(db, workqueue.Config{Lease: p.spec.Lease})
	if err != nil {
		return err
	}
	for _, s := range p.wl.scopes {
		if err := q.EnsureScope(ctx, s, 1); err != nil {
			return fmt.Errorf("bench: create scope %s: %w", s, err)
		}
	}
	if p.logs, err = os.MkdirTemp("", "laneq-bench-"+p.name+"-"); err != nil {
		return fmt.Errorf("bench: log directory: %w", err)
	}
	return nil
}

// createBenchTables adds the bench's own tables (queries.BenchSchema) to a
// migrated database.
func createBenchTables(ctx context.Context, db *sql.DB) error {
	for _, stmt := range strings.Split(queries.BenchSchema, ";\n") {
		if strings.TrimSpace(stripComments(stmt)) == "" {
			continue
		}
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("bench: create bench tables: %w", err)
		}
	}
	return nil
}

func stripComments(stmt string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(stmt, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// enqueue writes the workload in batches, at most EnqueueRate events/s.
func (p *phase) enqueue(ctx context.Context) error {
	q, err := workqueue.New(p.db, workqueue.Config{Lease: p.spec.Lease})
	if err != nil {
		return err
	}
	// As a producer should: announce each commit to the workers' wake
	// endpoints, so they claim within milliseconds instead of at their
	// next probe.
	hub, err := wake.New(q, wake.Config{})
	if err != nil {
		return fmt.Errorf("bench: wake hub: %w", err)
	}
	defer hub.Close()
	hub.Watch(q)
	batch := p.spec.EnqueueBatch
	for from := 0; from < len(p.wl.events); from += batch {
		to := min(from+batch, len(p.wl.events))
		byScope := map[string][]workqueue.Event{}
		var order []string
		for _, se := range p.wl.events[from:to] {
			if _, ok := byScope[se.scope]; !ok {
				order = append(order, se.scope)
			}
			byScope[se.scope] = append(byScope[se.scope], se.event)
		}
		for _, s := range order {
			if err := enqueueRetrying(ctx, q, s, byScope[s]); err != nil {
				return fmt.Errorf("bench: enqueue events %d..%d: %w", from, to-1, err)
			}
		}
		p.mu.Lock()
		p.enqueued = to
		p.mu.Unlock()
		if rate := p.spec.EnqueueRate; rate > 0 {
			due := p.start.Add(time.Duration(float64(to) / float64(rate) * float64(time.Second)))
			select {
			case <-time.After(time.Until(due)):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

// enqueueRetrying enqueues through faults: a TiDB pause or a dropped
// connection fails an Enqueue, and enqueueing again is idempotent.
func enqueueRetrying(ctx context.Context, q *workqueue.Queue, scope string, events []workqueue.Event) error {
	var err error
	for range 30 {
		if _, err = q.Enqueue(ctx, scope, events); err == nil || ctx.Err() != nil || errors.Is(err, workqueue.ErrInvalid) {
			return err
		}
		select {
		case <-time.After(time.Second):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// waitDrained waits until every event is enqueued, every fault injected
// and cancellation made, and every item terminal, printing progress; false when the deadline
// passed first.
func (p *phase) waitDrained(ctx context.Context, enqueueErr, disrupted <-chan error) (bool, error) {
	enqueued, disruptionsDone := false, false
	var deadline <-chan time.Time
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	lastPrint := time.Now()
	for {
		select {
		case err := <-enqueueErr:
			if err != nil {
				return false, err
			}
			enqueued = true
		case err := <-disrupted:
			if err != nil {
				return false, err
			}
			disruptionsDone = true
		case <-deadline:
			return false, nil
		case <-ctx.Done():
			return false, ctx.Err()
		case <-tick.C:
		}
		if enqueued && disruptionsDone && deadline == nil {
			deadline = time.After(p.spec.Deadline)
		}
		states, err := p.bq.CountRunItemStates(ctx)
		if err != nil {
			continue // TiDB paused or a connection dropped: look again
		}
		live, terminal := 0, 0
		for _, s := range states {
			switch s.State {
			case "completed", "skipped", "dead":
				terminal += int(s.Items)
			default:
				live += int(s.Items)
			}
		}
		if time.Since(lastPrint) >= p.opts.ProgressEvery {
			lastPrint = time.Now()
			p.mu.Lock()
			el := time.Since(p.start)
			cancels := ""
			if p.spec.Cancels > 0 {
				cancels = fmt.Sprintf("  cancels %d/%d", p.cancels+len(p.skippedCancels), p.spec.Cancels)
			}
			fmt.Fprintf(p.opts.Progress, "%s: %6.1fs  events %d/%d  items terminal %d, live %d  %.0f items/s%s  faults %d/%d%s\n",
				p.name, el.Seconds(), p.enqueued, len(p.wl.events), terminal, live,
				float64(terminal)/el.Seconds(), cancels, p.faults, p.spec.Faults.Total(), p.lastFault)
			p.mu.Unlock()
		}
		if enqueued && disruptionsDone && live == 0 {
			return true, nil
		}
	}
}

// stopAll stops every live worker process gracefully (SIGTERM: running
// items are released), killing any that does not exit in 30s.
func (p *phase) stopAll() {
	p.mu.Lock()
	procs := p.procs
	p.mu.Unlock()
	for _, pr := range procs {
		pr.stop(30 * time.Second)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// workerEnv is the worker process's configuration variable.
func (p *phase) workerEnv(name string) (string, error) {
	cfg := processConfig{
		Name: name, DSN: p.dsn, Scopes: p.wl.scopes, Naive: p.naive,
		Executors: p.spec.Executors, NoTake: p.spec.NoClaimOnPromote, Lease: p.spec.Lease,
		HandlerLatency: p.spec.HandlerLatency, FailureRate: max(p.spec.FailureRate, 0),
		Periodic: p.spec.Periodic, RateLimit: p.spec.RateLimit, RateKeys: p.spec.RateKeys,
		StubbornFor: p.spec.StubbornFor, HandlerDeadline: p.spec.HandlerDeadline, AbandonAfter: p.spec.AbandonAfter,
	}
	b, err := json.Marshal(cfg)
	return EnvWorker + "=" + string(b), err
}
