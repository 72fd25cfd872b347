package bench

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/naivedb"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// EnvWorker carries a worker process's configuration (JSON). A binary that
// embeds the bench (the laneq command, a test binary) checks IsWorker first
// thing in main and runs WorkerMain instead of its usual work.
const EnvWorker = "LANEQ_BENCH_WORKER"

// Work types of the bench workload.
const (
	typeDeliver = "deliver" // per-event work, in source and target lanes or none
	typeProject = "project" // source projection generations
	typeConsume = "consume" // waits for a dependency another item's handler satisfies
	typeLimited = "limited" // per-event work in no lane, under Spec.RateLimit
	typeTick    = "tick"    // a periodic schedule's tick (Spec.Periodic)
)

// tickSchedule names the bench's periodic schedule.
const tickSchedule = "bench-tick"

// processConfig is what the coordinator hands a worker process.
type processConfig struct {
	Name           string        `json:"name"`
	DSN            string        `json:"dsn"`
	Scopes         []string      `json:"scopes"`
	Naive          bool          `json:"naive"`
	Executors      int           `json:"executors"`
	NoTake         bool          `json:"no_claim_on_promote"`
	Lease          time.Duration `json:"lease"`
	HandlerLatency time.Duration `json:"handler_latency"`
	FailureRate    float64       `json:"failure_rate"`
	Periodic       time.Duration `json:"periodic"`
	RateLimit      int           `json:"rate_limit"`
	RateKeys       int           `json:"rate_keys"`
	// StubbornFor is how long a stubborn event's first attempt ignores its
	// context (Spec.StubbornEvery); HandlerDeadline and AbandonAfter are
	// the scheduler's (zero: its defaults).
	StubbornFor     time.Duration `json:"stubborn_for"`
	HandlerDeadline time.Duration `json:"handler_deadline"`
	AbandonAfter    time.Duration `json:"abandon_after"`
}

// IsWorker reports whether this process was started as a bench worker.
func IsWorker() bool { return os.Getenv(EnvWorker) != "" }

// WorkerMain runs a bench worker process until SIGTERM (a graceful stop:
// running items are released) or SIGKILL (the fault). It prints "ready"
// on stdout once its workers run. SIGUSR1 drops connections under its next
// claims, renewals and finishes (the dropped-connection fault).
func WorkerMain() int {
	var cfg processConfig
	if err := json.Unmarshal([]byte(os.Getenv(EnvWorker)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "bench worker: bad %s: %v\n", EnvWorker, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	dsn, err := workqueue.SessionDSN(cfg.DSN)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench worker %s: %v\n", cfg.Name, err)
		return 2
	}
	db, inj, err := faultdb.Open(dsn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench worker %s: open: %v\n", cfg.Name, err)
		return 1
	}
	defer db.Close()
	db.SetMaxOpenConns(cfg.Executors*len(cfg.Scopes) + 16)
	db.SetMaxIdleConns(cfg.Executors*len(cfg.Scopes) + 16)
	go dropOnSignal(inj)
	rec := newRecorder(db, cfg.Name)
	defer rec.close()
	if cfg.Naive {
		err = runNaive(ctx, db, cfg, rec)
	} else {
		err = runLaneq(ctx, db, cfg, rec, log)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "bench worker %s: %v\n", cfg.Name, err)
		return 1
	}
	return 0
}

// dropOnSignal arms connection faults at the claim, renewal and finish
// boundaries each time SIGUSR1 arrives: a claim whose reply is lost (it
// committed, the worker cannot know), renewals and commits whose
// connection drops before they are sent, completions whose reply is lost.
func dropOnSignal(inj *faultdb.Injector) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	for range ch {
		inj.Add(faultdb.Rule{Statement: "ClaimBatchCAS", Fault: faultdb.ReplyLost, Times: 2})
		inj.Add(faultdb.Rule{Statement: "RenewLeaseBatch", Fault: faultdb.DropBefore, Times: 2})
		inj.Add(faultdb.Rule{Statement: "FinishBatch", Fault: faultdb.ReplyLost, Times: 2})
		inj.Add(faultdb.Rule{Statement: "COMMIT", Fault: faultdb.DropBefore, Times: 2})
	}
}

func runLaneq(ctx context.Context, db *sql.DB, cfg processConfig, rec *recorder, log *slog.Logger) error {
	q, err := workqueue.New(db, workqueue.Config{
		Lease: cfg.Lease,
		// Designed failures retry soon, so a run ends in seconds.
		Retry: workqueue.RetryPolicy{Initial: 50 * time.Millisecond, Max: time.Second},
	})
	if err != nil {
		return err
	}
	var claimTook sync.Map // lease -> claim turn duration
	handle := func(ctx context.Context, job *worker.Job) error { return rec.run(ctx, cfg, job, &claimTook, q) }
	handlers := map[string]worker.Handler{typeDeliver: handle, typeProject: handle, typeConsume: handle, typeLimited: handle, typeTick: handle}
	errs := make(chan error, len(cfg.Scopes))
	for _, scope := range cfg.Scopes {
		wcfg := worker.Config{Scope: scope, Owner: cfg.Name, Logger: log}
		wcfg.Scheduler.Executors = cfg.Executors
		wcfg.Scheduler.HandlerDeadline = cfg.HandlerDeadline
		wcfg.Scheduler.AbandonAfter = cfg.AbandonAfter
		wcfg.NoClaimOnPromote = cfg.NoTake
		if cfg.RateLimit > 0 {
			wcfg.Limits = []ratelimit.Limit{{WorkType: typeLimited, N: cfg.RateLimit, Per: time.Second, PerKey: cfg.RateKeys > 0}}
			wcfg.RateWindowsKept = 24 * time.Hour // the verifier reads every window's grants back
		}
		if cfg.Periodic > 0 {
			wcfg.Schedules = []periodic.Schedule{{Name: tickSchedule, Every: cfg.Periodic, Event: func(time.Time) (workqueue.Event, error) {
				return workqueue.Event{Work: []workqueue.Work{{WorkType: typeTick}}}, nil
			}}}
		}
		wcfg.Hooks = &worker.Hooks{
			AfterClaimTurn: func(took time.Duration, claimed []workqueue.Claimed) {
				for _, c := range claimed {
					claimTook.Store(keyOf(c.Lease), took)
				}
			},
			AfterFinish: func(c workqueue.Claimed, _ error, err error) { rec.verdict(c.Lease, err) },
		}
		w, err := worker.New(q, wcfg, handlers)
		if err != nil {
			return err
		}
		go func() { errs <- w.Run(ctx) }()
	}
	fmt.Println("ready")
	var first error
	for range cfg.Scopes {
		if err := <-errs; err != nil && first == nil && ctx.Err() == nil {
			first = err
		}
	}
	return first
}

// designedFailure decides, the same way in every process, whether an
// attempt fails on purpose.
func designedFailure(workID int64, attempt int32, rate float64) bool {
	if rate <= 0 {
		return false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", workID, attempt)
	return float64(h.Sum64()%1_000_000) < rate*1_000_000
}

// latency is the handler's simulated work: HandlerLatency ±50%, varied per
// item so executors do not march in step.
func latency(workID int64, base time.Duration) time.Duration {
	if base <= 0 {
		return 0
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "lat/%d", workID)
	return base/2 + time.Duration(h.Sum64()%uint64(base+1))
}

// payload is what a bench event carries.
type payload struct {
	// Satisfies names the dependency key this event's handler satisfies.
	Satisfies string `json:"satisfies,omitempty"`
	// Stubborn: the first attempt's handler ignores its context for
	// processConfig.StubbornFor (Spec.StubbornEvery).
	Stubborn bool `json:"stubborn,omitempty"`
}

// payloadOf decodes a job's event payload.
func payloadOf(job *worker.Job) (payload, error) {
	var p payload
	if len(job.Event.Payload) > 0 {
		if err := json.Unmarshal(job.Event.Payload, &p); err != nil {
			return p, fmt.Errorf("bench: payload of event %d: %w", job.Event.EventID, err)
		}
	}
	return p, nil
}

// ignoreContext is a stubborn handler's work: it runs for d whatever ctx
// says (a handler stuck in a call that takes no context), then returns
// ctx's cause if ctx ended, so its outcome says why it was told to stop.
func ignoreContext(ctx context.Context, d time.Duration) error {
	time.Sleep(d) // on purpose: this handler does not look at ctx
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}

// leaseKey identifies one claim of one item.
type leaseKey struct{ workID, token int64 }

func keyOf(l workqueue.Lease) leaseKey { return leaseKey{l.WorkID, l.Token} }

// recordTimeout bounds one write of the recorder (a TiDB pause of the
// fault plan lasts seconds).
const recordTimeout = 30 * time.Second

// recordContext is the context of one write of the recorder: not the
// handler's, which can end while the write is in flight (then the row
// may commit while the call fails), and bounded by recordTimeout.
func recordContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
}

// recorder writes attempt rows and batches accepted verdicts.
type recorder struct {
	q       *benchdb.Queries
	process string

	mu       sync.Mutex
	attempts map[leaseKey]int64 // lease -> its attempt row, until the verdict
	accepted []int64
	flush    chan struct{}
	done     chan struct{}
}

func newRecorder(db *sql.DB, process string) *recorder {
	r := &recorder{q: benchdb.New(db), process: process, attempts: map[leaseKey]int64{},
		flush: make(chan struct{}, 1), done: make(chan struct{})}
	go r.flushLoop()
	return r
}

// run is every bench handler: record the start, do the work, record the end.
func (r *recorder) run(ctx context.Context, cfg processConfig, job *worker.Job, claimTook *sync.Map, q *workqueue.Queue) error {
	c := job.Item
	var took time.Duration
	if v, ok := claimTook.LoadAndDelete(keyOf(c.Lease)); ok {
		took = v.(time.Duration)
	}
	p, perr := payloadOf(job)
	stubborn := perr == nil && p.Stubborn && c.Attempt == 1 && cfg.StubbornFor > 0
	// The start is written under a context of its own: a process frozen
	// between its pre-start renewal and this call wakes with its heartbeat
	// due, finds the lease taken over and cancels the handler's context,
	// and a start that committed while its call failed would leave an
	// attempt with neither end nor verdict, which reads as a kill.
	sctx, cancel := recordContext(ctx)
	id, err := r.q.StartAttempt(sctx, benchdb.StartAttemptParams{
		Process: r.process, WorkID: c.WorkID, LeaseToken: c.Lease.Token, Attempt: c.Attempt,
		Reclaimed: c.Reclaimed, ClaimUs: took.Microseconds(), Stubborn: stubborn,
	})
	cancel()
	if err != nil {
		return fmt.Errorf("bench: record attempt start: %w", err)
	}
	r.mu.Lock()
	r.attempts[keyOf(c.Lease)] = id
	r.mu.Unlock()
	var outcome error
	switch {
	case perr != nil:
		outcome = perr
	case stubborn:
		if outcome = ignoreContext(ctx, cfg.StubbornFor); outcome == nil {
			outcome = r.work(ctx, cfg, job, p, q)
		}
	default:
		outcome = r.work(ctx, cfg, job, p, q)
	}
	word := outcomeWord(outcome, ctx.Err() != nil)
	// The end is recorded even when the context ended: a frozen process
	// that wakes past its lease still says when its handler returned.
	if err := r.end(ctx, id, word); err != nil {
		return err
	}
	return outcome
}

// outcomeWord is what bench_attempt.outcome says of a handler's return:
// the outcome's word, whatever the context says now. A handler that
// returned nil is "ok" even when its context ended just after it returned
// (a deadline passing before this is asked), since the worker completes
// its item.
func outcomeWord(outcome error, ctxEnded bool) string {
	switch {
	case outcome != nil && ctxEnded:
		return "canceled"
	case outcome != nil:
		return "error"
	}
	return "ok"
}

// end records an attempt's end, also when ctx ended, and again after a
// dropped connection: an attempt without an end reads as one its
// process's kill cut short.
func (r *recorder) end(ctx context.Context, id int64, outcome string) error {
	var err error
	for try := range 5 {
		if try > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		wctx, cancel := recordContext(ctx)
		err = r.q.EndAttempt(wctx, benchdb.EndAttemptParams{AttemptID: id, Outcome: sql.NullString{String: outcome, Valid: true}})
		cancel()
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("bench: record attempt end: %w", err)
}

func (r *recorder) work(ctx context.Context, cfg processConfig, job *worker.Job, p payload, q *workqueue.Queue) error {
	c := job.Item
	select {
	case <-time.After(latency(c.WorkID, cfg.HandlerLatency)):
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if c.WorkType == typeProject {
		if _, err := job.Input(ctx); err != nil {
			return fmt.Errorf("bench: projection input: %w", err)
		}
	}
	if designedFailure(c.WorkID, c.Attempt, cfg.FailureRate) {
		return errors.New("bench: designed failure")
	}
	if p.Satisfies != "" {
		if _, err := q.Satisfy(ctx, c.Scope, p.Satisfies, p.Satisfies); err != nil {
			return fmt.Errorf("bench: satisfy %s: %w", p.Satisfies, err)
		}
	}
	return nil
}

// verdict records what the queue answered to an attempt's outcome write.
func (r *recorder) verdict(l workqueue.Lease, err error) {
	r.mu.Lock()
	id, ok := r.attempts[keyOf(l)]
	delete(r.attempts, keyOf(l))
	if ok && err == nil {
		r.accepted = append(r.accepted, id)
	}
	r.mu.Unlock()
	if !ok {
		return // a dependency wait before the handler ran: no attempt
	}
	if err != nil {
		msg := err.Error()
		if len(msg) > 255 {
			msg = msg[:255]
		}
		ctx, cancel := recordContext(context.Background())
		defer cancel()
		_ = r.q.SetFinishRejected(ctx, benchdb.SetFinishRejectedParams{AttemptID: id, FinishError: sql.NullString{String: msg, Valid: true}})
		return
	}
	select {
	case r.flush <- struct{}{}:
	default:
	}
}

// flushLoop writes accepted verdicts at most every 100ms, in one statement
// per flush; a verdict a kill loses leaves the attempt without one, which
// the verifier reads as "unknown".
func (r *recorder) flushLoop() {
	defer close(r.done)
	for range r.flush {
		r.flushNow()
		time.Sleep(100 * time.Millisecond)
	}
	r.flushNow()
}

func (r *recorder) flushNow() {
	r.mu.Lock()
	ids := r.accepted
	r.accepted = nil
	r.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := recordContext(context.Background())
	defer cancel()
	_ = r.q.SetFinishAccepted(ctx, ids)
}

func (r *recorder) close() {
	close(r.flush)
	<-r.done
}

// runNaive is the baseline: each executor loops over the naive claim
// (SELECT ... FOR UPDATE of the first due row, mark it processing, commit),
// runs the same handler, and completes the row.
func runNaive(ctx context.Context, db *sql.DB, cfg processConfig, rec *recorder) error {
	nq := naivedb.New(db)
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Executors*len(cfg.Scopes))
	for _, scope := range cfg.Scopes {
		for range cfg.Executors {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := naiveLoop(ctx, db, nq, scope, cfg, rec); err != nil && ctx.Err() == nil {
					errs <- err
				}
			}()
		}
	}
	fmt.Println("ready")
	wg.Wait()
	close(errs)
	return <-errs
}

func naiveLoop(ctx context.Context, db *sql.DB, nq *naivedb.Queries, scope string, cfg processConfig, rec *recorder) error {
	idle := 10 * time.Millisecond
	for ctx.Err() == nil {
		start := time.Now()
		id, err := naiveClaim(ctx, db, nq, scope)
		took := time.Since(start)
		if errors.Is(err, sql.ErrNoRows) {
			select {
			case <-time.After(idle):
			case <-ctx.Done():
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			continue // a deadlock or lock-wait timeout between claimers: claim again
		}
		aid, err := rec.q.StartAttempt(ctx, benchdb.StartAttemptParams{
			Process: rec.process, WorkID: id, LeaseToken: 0, Attempt: 1, ClaimUs: took.Microseconds(),
		})
		if err != nil {
			return fmt.Errorf("bench: record attempt start: %w", err)
		}
		select {
		case <-time.After(latency(id, cfg.HandlerLatency)):
		case <-ctx.Done():
		}
		wctx := context.WithoutCancel(ctx)
		if err := rec.end(ctx, aid, "ok"); err != nil {
			return err
		}
		if err := nq.NaiveComplete(wctx, id); err != nil {
			return fmt.Errorf("bench: naive complete %d: %w", id, err)
		}
		rec.mu.Lock()
		rec.accepted = append(rec.accepted, aid)
		rec.mu.Unlock()
		select {
		case rec.flush <- struct{}{}:
		default:
		}
	}
	return nil
}

// naiveClaim is one naive claim transaction.
func naiveClaim(ctx context.Context, db *sql.DB, nq *naivedb.Queries, scope string) (int64, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	q := nq.WithTx(tx)
	id, err := q.NaiveClaimNext(ctx, naivedb.NaiveClaimNextParams{ScopeID: scope, Generation: 1})
	if err != nil {
		return 0, err
	}
	if err := q.NaiveMarkProcessing(ctx, id); err != nil {
		return 0, err
	}
	return id, tx.Commit()
}
