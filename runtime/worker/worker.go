// Package worker assembles laneq's runtime for one scope in one process: a
// controller (when to read), a scheduler (how to claim, on which executors)
// and the work-item queue (what a claim, a heartbeat and a finish are). It
// is the piece a backend team runs.
//
//	w, err := worker.New(queue, cfg, map[string]worker.Handler{"deliver": deliver})
//	err = w.Run(ctx) // until ctx ends or the controller fails
//
// A handler returns nil to complete its item, ErrSkip to skip it,
// WaitForDependency when a durable prerequisite is missing (the item waits
// for its producer's Satisfy instead of retrying), an error wrapping
// workqueue.ErrPermanent to send it to dead, and any other error to retry it
// with the queue's backoff (dead once the retry budget is spent).
// A panic or a blown deadline is a retry too. On shutdown running items are
// released, due at once.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Handler runs one work item. Its context ends at the handler deadline, on
// shutdown, or when the lease could not be renewed.
type Handler func(ctx context.Context, job *Job) error

// ErrSkip makes a handler's item finish as skipped (nothing to do).
var ErrSkip = errors.New("worker: skip")

// Job is a claimed work item and its immutable event.
type Job struct {
	Item  workqueue.Claimed
	Event workqueue.StoredEvent
	q     *workqueue.Queue
	owned *workqueue.Claimed // the executor's copy, which Finish uses
}

// RecordProgress marks durable forward progress: a later failure of this
// attempt starts a fresh retry series.
func (j *Job) RecordProgress(ctx context.Context) error {
	if err := j.q.RecordProgress(ctx, j.owned); err != nil {
		return err
	}
	j.Item.SafeRetries = j.owned.SafeRetries
	return nil
}

// Input returns what the item runs on: for a source projection generation
// (Item.ProjectionKey set; see workqueue.Work.Projection) every event after
// the previous generation's through the one it selected, in admission
// order; for per-event work its one event.
func (j *Job) Input(ctx context.Context) ([]workqueue.StoredEvent, error) {
	if j.Item.ProjectionKey == "" {
		return []workqueue.StoredEvent{j.Event}, nil
	}
	return j.q.ProjectionInput(ctx, j.Item)
}

// DependencyWait is the outcome WaitForDependency returns.
type DependencyWait struct{ Dependency workqueue.Dependency }

func (e *DependencyWait) Error() string {
	if err := e.Dependency.Validate(); err != nil {
		return fmt.Sprintf("worker: invalid dependency wait: %v", err)
	}
	return fmt.Sprintf("worker: waiting for dependency %q (%d keys)", e.Dependency.WakeKey, len(e.Dependency.Keys))
}

// WaitForDependency is a handler outcome: the item's prerequisite is
// missing, so it waits (workqueue.Queue.Wait) until a producer satisfies one
// of dep's keys, instead of retrying. The attempt is given back and no retry
// is counted; the item keeps its lanes' followers behind it. Before the
// item's next work the worker checks dep's keys again and waits again,
// without running the handler, while none is satisfied. An invalid dep
// fails the attempt as an ordinary error.
func WaitForDependency(dep workqueue.Dependency) error { return &DependencyWait{Dependency: dep} }

// FailureClass lets a handler's error name its failure class (stored on the
// item, low-cardinality, no payloads), also for a permanent error;
// otherwise "permanent" for an error wrapping workqueue.ErrPermanent and
// "handler_error" for others. A panic, a blown deadline and a failed lease
// renewal are "panic", "deadline" and "lease_renewal" whatever they wrap.
type FailureClass interface{ FailureClass() string }

// Worker runs one scope's work in this process.
type Worker struct {
	hub     atomic.Pointer[wake.Hub]          // set while Run announces to other processes
	wakeSub atomic.Pointer[wake.Subscription] // the scope's endpoint while Run has one
	// described is what the endpoint row says of the worker's state
	// (written at registration, when the worker is not quiet yet).
	described atomic.Pointer[describedState]
	cfg       Config
	q         *workqueue.Queue
	claimer   *workqueue.Claimer
	sched     *scheduler.Scheduler[*workqueue.Claimed]
	ctrl      *controller.Controller
	handlers  map[string]Handler
	periodic  *periodic.Runner   // nil without Config.Schedules
	limiter   *ratelimit.Limiter // nil without Config.Limits
	// limited holds a Claimer per rate-limited work type, and unlimited
	// the other work types, which claimer claims (Config.Limits): a
	// Claimer's scan floors are only valid for the one set of work types
	// it always scans, and a limited type is left out of claims while its
	// window is spent.
	limited   map[string]*workqueue.Claimer
	unlimited []string
	types     []string // handlers' work types, sorted
	classes   []string // queue classes the executor shapes serve, sorted
	sweep     *workqueue.DependencySweep
	// laneCursor is where the next lane recovery page starts; only the
	// controller's maintenance touches it, one at a time.
	laneCursor workqueue.LaneCursor
	// complete writes completions of items in no lane, completeLaned of
	// items in lanes (a transaction each, with claim on promote); both nil:
	// each completion written alone.
	complete, completeLaned *leaseBatcher
	renew                   *leaseBatcher // nil: each renewal written alone
	log                     *slog.Logger
	metrics                 *metrics
	history                 *history // per-minute counts for the dashboard's charts
	clock                   clock.Clock
	// claimBegan is when the last claim turn began (real time); only the
	// controller's loop reads and writes it.
	claimBegan time.Time
	// lookedBack is the last lease expiry the lookup reported as past (see
	// source.NextWorkAt); only the controller's loop touches it.
	lookedBack time.Time

	restarts atomic.Uint64
	running  atomic.Bool
	ran      atomic.Bool

	unservedMu sync.Mutex
	unserved   []workqueue.WorkKind

	// grouped is the Group this worker is a member of (nil: a worker of
	// its own): the group's endpoint brings its wakes and its health.
	grouped *Group
}

// lanedCompleteWriters is how many batches of completions in lanes a worker
// writes at once (completions in no lane: one, a statement each). A laned
// batch is a transaction of several statements (finish, follower lookups
// and locks, take or promote, commit, read-back), and every laned item
// finishing meanwhile waits for it: with one in flight the processing
// budget, not the database, bounded a lanes-of-five drain. Two for items
// in no lane halved their batches and cost about a third of their
// throughput (BenchmarkThroughputVsFloor/lanes=0).
const lanedCompleteWriters = 2

// New builds a Worker; handlers maps each work type this process runs to
// its handler.
func New(q *workqueue.Queue, cfg Config, handlers map[string]Handler) (*Worker, error) {
	if q == nil {
		return nil, errors.New("worker: nil queue")
	}
	if len(handlers) == 0 {
		return nil, &ConfigError{"handlers", "", "at least one work type handler is required"}
	}
	for wt, h := range handlers {
		if h == nil {
			return nil, &ConfigError{"handlers", wt, "nil handler"}
		}
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	log := cfg.Logger.With("scope", cfg.Scope)
	if cfg.Controller.Clock == nil {
		cfg.Controller.Clock = clock.Real()
	}
	if cfg.Scheduler.Clock == nil {
		cfg.Scheduler.Clock = cfg.Controller.Clock
	}
	if cfg.Scheduler.HeartbeatEvery == 0 {
		cfg.Scheduler.HeartbeatEvery = q.Lease() / 3
	}
	cfg.Scheduler.Logger, cfg.Controller.Logger = log, log
	if len(cfg.Limits) > 0 {
		cfg.NoClaimOnPromote = true // a taken follower would start outside its limit
	}
	if cfg.CompleteBatch == 0 {
		cfg.CompleteBatch = DefaultCompleteBatch
	}
	if cfg.CompleteBatch < 1 || cfg.CompleteBatch > workqueue.MaxCompleteBatch {
		return nil, &ConfigError{"CompleteBatch", fmt.Sprint(cfg.CompleteBatch), fmt.Sprintf("want 1..%d", workqueue.MaxCompleteBatch)}
	}
	w := &Worker{cfg: cfg, q: q, handlers: maps.Clone(handlers), types: sortedKeys(handlers), log: log, clock: cfg.Controller.Clock}
	w.described.Store(&describedState{}) // registration describes a worker not quiet yet, with none abandoned
	var err error
	if w.claimer, err = q.NewClaimer(cfg.Scope, cfg.Owner, cfg.Claimer); err != nil {
		return nil, err
	}
	if w.sweep, err = q.NewDependencySweep(cfg.Scope, cfg.DependencySweep); err != nil {
		return nil, err
	}
	if cfg.CompleteBatch > 1 {
		w.complete = newLeaseBatcher(w.completeBatch, cfg.CompleteBatch, 1)
		w.completeLaned = newLeaseBatcher(w.completeBatch, cfg.CompleteBatch, lanedCompleteWriters)
		w.renew = newLeaseBatcher(q.RenewMany, cfg.CompleteBatch, 1)
	}
	cfg.Scheduler.OnCapacityFreed = func() { w.ctrl.CapacityFreed() }
	if w.sched, err = scheduler.New[*workqueue.Claimed](backend{w}, cfg.Scheduler); err != nil {
		return nil, err
	}
	w.classes = servedClasses(w.sched.Shapes())
	if w.ctrl, err = controller.New(source{w}, cfg.Controller); err != nil {
		return nil, err
	}
	if w.metrics, err = newMetrics(cfg.MeterProvider, w); err != nil {
		return nil, err
	}
	if w.history, err = newHistory(cfg.History, cfg.Owner); err != nil {
		return nil, err
	}
	w.unlimited = w.types
	if len(cfg.Limits) > 0 {
		if w.limiter, err = ratelimit.New(q, cfg.Scope, cfg.Limits, ratelimit.Options{Clock: cfg.Controller.Clock, KeepEnded: cfg.RateWindowsKept}); err != nil {
			return nil, &ConfigError{"Limits", "", err.Error()}
		}
		w.unlimited, w.limited = nil, map[string]*workqueue.Claimer{}
		for _, t := range w.types {
			if !w.limiter.GatesClaims(t) {
				w.unlimited = append(w.unlimited, t)
				continue
			}
			if w.limited[t], err = q.NewClaimer(cfg.Scope, cfg.Owner, cfg.Claimer); err != nil {
				return nil, err
			}
		}
	}
	if len(cfg.Schedules) > 0 {
		w.periodic, err = periodic.New(q, periodic.Config{Scope: cfg.Scope, Schedules: cfg.Schedules,
			OnTimeWithin: cfg.PeriodicOnTimeWithin, Clock: cfg.Controller.Clock, Logger: log})
		if err != nil {
			return nil, &ConfigError{"Schedules", "", err.Error()}
		}
	}
	w.cfg = cfg
	for _, msg := range cfg.Unsafe(q.Lease()) {
		log.Warn("unsafe worker configuration", "detail", msg)
	}
	return w, nil
}

// defaultOwner is Config.Owner's default: "<hostname>:<pid>".
func defaultOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%.80s:%d", host, os.Getpid())
}

// Fingerprint identifies the configuration: a Supervisor rebuilds a worker
// only when it stopped or this changed. Functions and instances (Hooks,
// clocks, Logger, MeterProvider, a custom Limiter, a schedule's Event) are
// not part of it: changing only those does not rebuild a running worker.
func (c Config) Fingerprint(workTypes []string) string {
	cl, ctl := c.Claimer, c.Controller
	wk := c.Wake
	var schedules []string
	for _, s := range c.Schedules {
		schedules = append(schedules, fmt.Sprintf("%s %q %s %v %d", s.Name, s.Cron, s.Every, s.Location, s.Missed))
	}
	return fmt.Sprintf("%s|%s|%q|%s|%s|%t|%s|%+v|%d %t|%t %p %s %s|%t %s|%q %s|%+v", c.Scope, c.Owner, workTypes, c.Scheduler.Fingerprint(),
		fmt.Sprint(ctl.GenerationProbeEvery, ctl.ReconcileEvery, ctl.MaintainEvery, ctl.QuietProbeEvery, ctl.QuietBackstopEvery), c.StageTiming,
		fmt.Sprint(cl.StaleScanEvery, cl.ScanWindow, cl.StragglerWindow), c.DependencySweep, c.CompleteBatch, c.NoClaimOnPromote,
		wk.Off, wk.Shared, wk.Hub.Listen, wk.Hub.Advertise, c.History.Off, c.History.Retention,
		schedules, c.PeriodicOnTimeWithin, c.Limits)
}

// WorkTypes returns the work types this worker claims, sorted.
func (w *Worker) WorkTypes() []string { return slices.Clone(w.types) }

func sortedKeys(m map[string]Handler) []string { return slices.Sorted(maps.Keys(m)) }

// servedClasses is the union of the shapes' queue classes, sorted.
func servedClasses(shapes []scheduler.Shape) []string {
	var out []string
	for _, sh := range shapes {
		for _, c := range sh.QueueClasses {
			if !slices.Contains(out, c) {
				out = append(out, c)
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkWorkKinds reports work this worker has a handler for but no executor
// shape claims (its queue class is none of the profile's classes): such
// items are never claimed here and block their lanes. Logged once per kind
// and counted by the unserved-work-kinds gauge.
func (w *Worker) checkWorkKinds(ctx context.Context) error {
	kinds, err := w.q.WorkKinds(ctx, w.cfg.Scope)
	if err != nil {
		return err
	}
	var unserved []workqueue.WorkKind
	for _, k := range kinds {
		if slices.Contains(w.types, k.WorkType) && !slices.Contains(w.classes, k.QueueClass) {
			unserved = append(unserved, k)
		}
	}
	w.unservedMu.Lock()
	defer w.unservedMu.Unlock()
	for _, k := range unserved {
		if !slices.Contains(w.unserved, k) {
			w.log.Warn("work of a queue class no executor shape serves: it is never claimed by this worker and blocks its lanes",
				"queue_class", k.QueueClass, "work_type", k.WorkType, "served_classes", w.classes, "profile", w.cfg.Scheduler.Profile)
		}
	}
	w.unserved = unserved
	return nil
}

// UnservedWorkKinds returns the kinds the last check found (see
// checkWorkKinds).
func (w *Worker) UnservedWorkKinds() []workqueue.WorkKind {
	w.unservedMu.Lock()
	defer w.unservedMu.Unlock()
	return slices.Clone(w.unserved)
}

// Run starts the executors and the controller and returns when ctx ends or
// the controller fails; running items are then finished (released on
// shutdown) before it returns. A Worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.ran.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice; build a new Worker")
	}
	w.running.Store(true)
	defer w.running.Store(false)
	stopWakes, err := w.startWakes(ctx)
	if err != nil {
		return err
	}
	if err := w.sched.Start(ctx); err != nil {
		stopWakes()
		return err
	}
	// Work made claimable through this worker's Queue (an enqueue, a
	// committed Tx, a satisfied dependency, a promotion, a release; see
	// workqueue.Announcement) wakes it: no Wake call of the caller's.
	// Work due later makes its next lookup look far enough to arm the due
	// timer for it.
	stopListening := w.q.OnAnnounce(func(n workqueue.Announcement) {
		if n.Scope == w.cfg.Scope && n.Rewind {
			w.rewind() // a late commit's rows may lie behind the floors
		}
		switch {
		case n.Scope != w.cfg.Scope:
		case n.LookFar:
			w.ctrl.WakeLookFar()
		default:
			w.ctrl.Wake()
		}
	})
	defer stopListening()
	if w.periodic != nil {
		// Ticks are enqueued through w.q, whose announcement wakes this
		// worker (and, through the wake hub, the others).
		pctx, stopPeriodic := context.WithCancel(ctx)
		periodicDone := make(chan struct{})
		go func() {
			defer close(periodicDone)
			_ = w.periodic.Run(pctx) // returns nil when pctx ends; failures are logged and retried
		}()
		defer func() { stopPeriodic(); <-periodicDone }()
	}
	execs := w.sched.Shapes()
	w.log.Info("worker started", "owner", w.cfg.Owner, "executors", w.cfg.Scheduler.Executors,
		"profile", w.cfg.Scheduler.Profile, "shapes", len(execs), "work_types", w.WorkTypes())
	err = w.runController(ctx)
	w.sched.Stop()
	// What the executors finished since the last maintenance: written now,
	// on a context of its own (ctx has ended).
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), historyFlushTimeout)
	if herr := w.flushHistory(flushCtx, true); herr != nil {
		w.log.Warn("history of the last minutes not written", "err", herr)
	}
	cancelFlush()
	stopWakes()
	w.metrics.close()
	if err == nil {
		w.log.Info("worker stopped")
		return nil
	}
	w.log.Error("worker stopped on error", "err", err, "controller_usable", w.ctrl.Usable())
	return err
}

// Controller restarts after errors that leave it usable (a failed read, a
// claim proven not to have committed) back off from RestartBackoffMin,
// doubling up to RestartBackoffMax. Executors keep running meanwhile.
const (
	RestartBackoffMin = time.Second
	RestartBackoffMax = 30 * time.Second
)

// runController runs the controller until ctx ends (nil) or it fails with
// an outcome it cannot vouch for (the error).
func (w *Worker) runController(ctx context.Context) error {
	return w.ctrl.RunRestarting(ctx, controller.Restart{
		Min: RestartBackoffMin, Max: RestartBackoffMax,
		Restarted: func(err error, after time.Duration) {
			w.restarts.Add(1)
			w.log.Warn("controller stopped on an error that changed nothing durable; restarting", "err", err, "after", after)
		},
	})
}

// Running reports whether Run is active.
func (w *Worker) Running() bool { return w.running.Load() }

// Wake tells the worker new work may be claimable. Everything that makes
// work claimable through the worker's own Queue wakes it by itself
// (workqueue.Announcement); call Wake after writing through another Queue
// of this process. Other processes hear of it from that Queue's
// announcements (see WakeConfig), or else on their next probe.
func (w *Worker) Wake() { w.ctrl.Wake() }

// Satisfy records a dependency key of the worker's scope and wakes the
// waiters of wakeKey (workqueue.Queue.Satisfy, which announces them to
// this worker and to other processes). A producer that must commit its
// prerequisite with its own rows uses workqueue.Tx.Satisfy.
func (w *Worker) Satisfy(ctx context.Context, wakeKey, key string) (woken int64, err error) {
	return w.q.Satisfy(ctx, w.cfg.Scope, wakeKey, key)
}

// Stats reports what the worker's parts did.
type Stats struct {
	Controller controller.Stats
	Scheduler  scheduler.Stats
	// Queue counts the queue's write retries (shared by every worker on the
	// same Queue).
	Queue workqueue.QueueStats
	// Contention is what this worker's claimer lost to other claimers of
	// the scope, and how far it spread out to stop losing.
	Contention workqueue.ContentionStats
	// ControllerRestarts counts restarts after errors that left the
	// controller usable.
	ControllerRestarts uint64
	// Quiet says the controller probes on the quiet periods (other
	// processes' wakes reach this one).
	Quiet bool
	// Wake is the wake hub's counters while Run uses one (a shared hub's
	// count every user's traffic).
	Wake wake.Stats
}

func (w *Worker) Stats() Stats {
	st := Stats{Controller: w.ctrl.Stats(), Scheduler: w.sched.Stats(), Queue: w.q.Stats(), Contention: w.claimer.Contention(),
		ControllerRestarts: w.restarts.Load(), Quiet: w.ctrl.Quiet()}
	if hub := w.hub.Load(); hub != nil {
		st.Wake = hub.Stats()
	}
	return st
}

// Settle waits until the controller handled every signal sent so far (for
// tests and tools).
func (w *Worker) Settle(ctx context.Context) error { return w.ctrl.Settle(ctx) }

// rewind makes every claimer of the worker scan from the front of its
// ranges on its next claim (Claimer.Rewind).
func (w *Worker) rewind() {
	w.claimer.Rewind()
	for _, c := range w.limited {
		c.Rewind()
	}
}
