// Package scheduler is the claim side of a scope in one process: one
// Scheduler per scope per process, injected into every executor of that
// scope. It serializes claims (executors add execution slots, never more
// scanners), shapes them by queue profile, admits them through a claim
// limiter, and runs claimed items on executor slots with a lease heartbeat,
// a per-item deadline and local panic recovery.
//
// A claim turn walks the executor shapes in rotation. For each shape with
// free places (its free slots, plus the items it may hold waiting for a
// slot while its handlers are short: Config.ClaimAhead) it asks the
// limiter for at most that many rows and reserves only those places; then
// one backend call claims for every admitted shape (its classes and
// preference; the backend may serve shapes whose eligible work is the same
// with one claim), and each shape's items go to its slots.
// No slot is reserved for a shape that is not claiming (no phantom
// reservations), and the rows a claim did not win go back to the budget at
// once.
package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
)

// Request is one claim for one executor shape.
type Request struct {
	Shape        string
	QueueClasses []string
	Preferred    []string
	Max          int
	StaleOnly    bool
}

// ClaimResult is what a Backend's Claim won for one Request.
type ClaimResult[I any] struct {
	Items []I // at most the request's Max; returned even with Err
	// Err is the request's error: ErrContended when it came back short
	// because other claimers took its candidates first (the shape stays
	// hungry, since a lost candidate proves there was due work).
	Err error
}

// Backend is the durable queue a scheduler claims from and finishes into.
type Backend[I any] interface {
	// Claim claims for the shapes of one turn: reqs in rotation order, one
	// result per request, in order. Every item of a result must be of one
	// of its request's classes (or an expired lease, which any slot may
	// run), at most Max of them; with StaleOnly only expired leases. A
	// backend may serve several requests with one claim (one read, one
	// scan) when the same items suit them all.
	Claim(ctx context.Context, reqs []Request) []ClaimResult[I]
	// Renew extends the item's lease; an error ends the attempt.
	Renew(ctx context.Context, item I) error
	// Hold extends the lease of an item whose attempt's context ended
	// (deadline, cancellation, shutdown, failed renewals) while its handler
	// still runs: unlike Renew it must renew an item whose cancellation was
	// requested, because the item stays this process's, and its lanes stay
	// held, until the handler returns. An error wrapping ErrOwnershipLost
	// says the item is someone else's (or ended): holding stops.
	Hold(ctx context.Context, item I) error
	// Handle runs the item's work under the attempt's context.
	Handle(ctx context.Context, item I) error
	// Finish makes outcome durable through the lease-fenced path: nil
	// completes; errors retry, release or fail by the backend's policy
	// (ErrShutdown and ErrNotStarted should release, a *PanicError or
	// ErrHandlerDeadline retry). Its context outlives the attempt's
	// cancellation.
	Finish(ctx context.Context, item I, outcome error) error
}

var (
	// ErrContended is returned by a Backend's Claim, with the items it won,
	// when it came back short because other claimers took candidates first.
	// It is not a failure.
	ErrContended = errors.New("scheduler: claim contended")
	// ErrShutdown is the cause of an attempt cancelled because its
	// scheduler stopped.
	ErrShutdown = errors.New("scheduler: shutting down")
	// ErrNotStarted is the outcome of an item claimed ahead that waited
	// past a heartbeat for its slot and could not renew its lease: it never
	// ran, and Finish should release it (as for ErrShutdown).
	ErrNotStarted = errors.New("scheduler: claimed item not started")
	// ErrHandlerDeadline is the cause of an attempt that ran past the
	// handler deadline.
	ErrHandlerDeadline = errors.New("scheduler: handler deadline exceeded")
	// ErrLeaseRenewal is the cause of an attempt whose lease could not be
	// renewed; the item may already belong to another claimer.
	ErrLeaseRenewal = errors.New("scheduler: lease renewal failed")
	// ErrCancelled, wrapped by a Backend.Renew error, says the item's
	// cancellation was requested: the attempt's context is cancelled at once
	// with that error as its cause, and the outcome passed to Finish wraps
	// it unless the handler returned nil.
	ErrCancelled = errors.New("scheduler: item cancelled")
	// ErrOwnershipLost, wrapped by a Backend.Renew error, says the item
	// belongs to someone else now: the attempt is cancelled at once.
	ErrOwnershipLost = errors.New("scheduler: item ownership lost")
	// ErrStopped reports a claim turn on a scheduler that is not running.
	ErrStopped = errors.New("scheduler: not running")
)

// PanicError is the outcome of a handler that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

func (p *PanicError) Error() string { return fmt.Sprintf("scheduler: handler panicked: %T", p.Value) }

// DefaultExecutors is the executor count when Config.Executors is zero.
const DefaultExecutors = 4

// DefaultClaimGather is Config.ClaimGather's default.
const DefaultClaimGather = 200 * time.Microsecond

// DefaultClaimAheadPerExecutor times Executors is Config.ClaimAhead's
// default. Measured through runtime/worker on the embedded TiDB (16
// executors, handlers returning at once, 6,000 items): one item ahead per
// executor claimed about 23 items per turn and reached 1.8-2.2× the
// per-item write floor; three claimed 35 per turn and reached 2.4-2.6×, and
// two processes on lanes of five went from 1.1-1.2× to 1.3-1.4×.
const DefaultClaimAheadPerExecutor = 3

// DefaultGiveUpAfter is Config.GiveUpAfter's default.
const DefaultGiveUpAfter = 30 * time.Second

// DefaultClaimAheadWait is Config.ClaimAheadWait's default.
const DefaultClaimAheadWait = 20 * time.Millisecond

// Config configures a Scheduler. Zero fields take the defaults.
type Config struct {
	// Executors is the number of execution slots. Default DefaultExecutors.
	Executors int
	// Profile allocates the slots to queue classes. Default ProfileReserved.
	Profile Profile
	// Classes names the latency and bulk classes of the profile.
	Classes Classes
	// MaxProcessingRows is the scope's processing budget across every
	// queue class in this process (used when Limiter is nil): items claimed
	// and not finished, whether their handler runs or their outcome is
	// committing. A slot takes its next item as soon as its handler
	// returns, while the outcome commits (together with other slots'), so
	// the default, 2 × Executors + ClaimAhead, holds a second row per slot
	// for those commits and one for every item claimed ahead; Executors
	// makes every slot wait for its own commit and claims nothing ahead.
	MaxProcessingRows int
	// Limiter admits claims. Default NewBudgetLimiter(MaxProcessingRows).
	// A limiter belongs to one scheduler: budget it frees wakes only that
	// scheduler's controller, so sharing one across schedulers can leave a
	// scope waiting for its backstop.
	Limiter Limiter
	// ClaimGather is how long a continuation turn (the claim right after
	// a turn that filled its slots: a backlog) waits for the slots of its
	// shapes to come back before it claims. Handlers that return at once
	// free their slots moments after the turn that filled them; without
	// the wait, turns alternate between the few slots free at their start,
	// each turn a scan, CAS and read-back for a handful of items. The wait
	// ends as soon as every slot of those shapes is free and budgeted, so
	// a continuation turn costs at most this much more, and the first turn
	// after an event (an enqueue, a due timer, a wake) never waits. It is
	// wall time, whatever Clock says. Default 200µs; negative disables.
	ClaimGather time.Duration
	// ClaimAhead is how many claimed items the executors may hold waiting
	// for a slot, beyond the items they run (shared among the shapes in
	// proportion to their executors, rounded down). A claim turn takes a database round
	// trip or four; without items waiting, every slot idles through the
	// turn that refills it, so a process runs at most Executors items per
	// turn time however fast its handlers are. Items wait only while
	// handlers are short: each shape holds at most as many as its
	// executors start within ClaimAheadWait at their recent handler time
	// (none until a handler has returned, none once handlers take longer
	// than ClaimAheadWait each), so slow work is never held back from
	// another process's free slots. An item that waited HeartbeatEvery
	// or longer renews its lease before it starts, and is released unrun
	// when that fails. Default DefaultClaimAheadPerExecutor × Executors;
	// negative disables.
	ClaimAhead int
	// ClaimAheadWait bounds the wait of an item claimed ahead (see
	// ClaimAhead). Wall time. Default DefaultClaimAheadWait.
	ClaimAheadWait time.Duration
	// HandlerDeadline bounds one attempt. Default 5m.
	HandlerDeadline time.Duration
	// AbandonAfter is how long a handler may ignore its cancelled context
	// (deadline, cancellation, shutdown, failed renewals) before its
	// executor slot is given back and takes new work. The item is not: its
	// lease is held (Backend.Hold) and its lanes stay blocked until the
	// handler returns, and then its outcome is finished as usual. An
	// abandoned handler runs outside the processing budget (its row is
	// given back with its slot) and is counted in Stats.AbandonedRunning.
	// Default 5s.
	AbandonAfter time.Duration
	// GiveUpAfter bounds how long Stop keeps holding the items of handlers
	// that ignore shutdown, counted from Stop. Past it, Stop returns without
	// finishing or releasing those items and stops renewing their leases:
	// each is taken over by another process only once its lease has run
	// out, and the fence refuses the old handler's writes. Default 30s;
	// negative: Stop waits for every handler to return.
	GiveUpAfter time.Duration
	// HeartbeatEvery is the lease renewal period; keep it well below the
	// lease. Default 10s.
	HeartbeatEvery time.Duration
	// RenewGrace is how long renewals may keep failing, counted from the
	// last successful one (or the claim), before the attempt is cancelled
	// with ErrLeaseRenewal: a renewal that fails while most of the lease
	// remains is retried (every HeartbeatEvery/4) instead of abandoning an
	// attempt that still owns its item. An error wrapping ErrOwnershipLost
	// cancels at once. Keep it below the lease. Default 2 × HeartbeatEvery.
	RenewGrace time.Duration
	// FinishTimeout bounds each Finish call. Default 30s.
	FinishTimeout time.Duration
	// OnCapacityFreed is called after a slot or budget frees (wire it to
	// controller.Controller.CapacityFreed).
	OnCapacityFreed func()
	Clock           clock.Clock
	Logger          *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Executors == 0 {
		c.Executors = DefaultExecutors
	}
	if c.Profile == "" {
		c.Profile = ProfileReserved
	}
	c.Classes = c.Classes.withDefaults()
	if c.ClaimAhead == 0 {
		c.ClaimAhead = DefaultClaimAheadPerExecutor * c.Executors
	} else if c.ClaimAhead < 0 {
		c.ClaimAhead = 0
	}
	if c.ClaimAheadWait == 0 {
		c.ClaimAheadWait = DefaultClaimAheadWait
	}
	if c.MaxProcessingRows == 0 {
		c.MaxProcessingRows = 2*c.Executors + c.ClaimAhead
	}
	if c.ClaimGather == 0 {
		c.ClaimGather = DefaultClaimGather
	}
	if c.HandlerDeadline == 0 {
		c.HandlerDeadline = 5 * time.Minute
	}
	if c.AbandonAfter == 0 {
		c.AbandonAfter = 5 * time.Second
	}
	if c.GiveUpAfter == 0 {
		c.GiveUpAfter = DefaultGiveUpAfter
	}
	if c.HeartbeatEvery == 0 {
		c.HeartbeatEvery = 10 * time.Second
	}
	if c.RenewGrace == 0 {
		c.RenewGrace = 2 * c.HeartbeatEvery
	}
	if c.FinishTimeout == 0 {
		c.FinishTimeout = 30 * time.Second
	}
	if c.OnCapacityFreed == nil {
		c.OnCapacityFreed = func() {}
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) renewRetryEvery() time.Duration {
	return max(c.HeartbeatEvery/4, time.Millisecond)
}

// Fingerprint identifies the configuration a running scheduler was built
// from: a supervisor rebuilds a scheduler only when it stopped or this
// changed, never because rows are blocked or delayed.
func (c Config) Fingerprint() string {
	c = c.withDefaults()
	h := fnv.New64a()
	fmt.Fprintf(h, "%d|%s|%q|%q|%d|%t|%s|%s|%s|%s|%s|%s|%d|%s|%s", c.Executors, c.Profile, c.Classes.Latency, c.Classes.Bulk,
		c.MaxProcessingRows, c.Limiter != nil, c.HandlerDeadline, c.AbandonAfter, c.HeartbeatEvery, c.FinishTimeout, c.RenewGrace, c.ClaimGather,
		c.ClaimAhead, c.ClaimAheadWait, c.GiveUpAfter)
	return fmt.Sprintf("%016x", h.Sum64())
}

// Stats counts what a scheduler did.
type Stats struct {
	ClaimTurns      uint64
	Claims          uint64 // shape claims (requests; one backend call per turn serves them all)
	Claimed         uint64 // items handed to slots
	Adopted         uint64 // of those, items a finisher claimed (Adopt)
	StaleOnlyClaims uint64
	LimiterDenials  uint64 // shapes with free slots the limiter gave nothing
	ContendedClaims uint64 // claims that came back short, losing candidates to other claimers
	Finished        uint64
	AheadRenewals   uint64 // items that waited HeartbeatEvery for a slot and renewed before starting
	AheadReleased   uint64 // of those, items whose renewal failed: released unrun
	FinishErrors    uint64
	Panics          uint64
	Abandoned       uint64 // handlers that ignored cancellation past AbandonAfter
	// AbandonedRunning is how many abandoned handlers are running now:
	// each holds its item's lease and lanes until it returns.
	AbandonedRunning int64
	// GaveUp counts handlers still running when a Stop's GiveUpAfter
	// passed: their items were left to their leases' expiry.
	GaveUp            uint64
	HeartbeatFailures uint64
	// Cancelled counts attempts cancelled because a heartbeat found the
	// item's cancellation requested (ErrCancelled).
	Cancelled uint64
	// MaxConcurrentClaims is the most backend claim calls ever in flight
	// at once; one per scheduler by construction.
	MaxConcurrentClaims int64
}

type shapeSlots[I any] struct {
	Shape
	work chan queued[I]
	// Guarded by Scheduler.mu. free counts places a claim may fill: the
	// executors plus ahead, less the items reserved, waiting or running;
	// it goes below zero when ahead shrinks under waiting items.
	free     int
	hungry   bool // its last claim filled every reserved slot
	ahead    int  // items it may hold waiting for a slot now (see Config.ClaimAhead)
	maxAhead int
	handled  time.Duration // moving average of its handlers' wall time; 0 before the first
}

// queued is an item handed to a shape's slots and when its claim began on
// Config.Clock (its lease is at least that old).
type queued[I any] struct {
	item    I
	claimed time.Time
}

// Scheduler claims for one scope and runs the items on its executors.
type Scheduler[I any] struct {
	cfg     Config
	backend Backend[I]
	limiter Limiter
	log     *slog.Logger

	claimMu sync.Mutex   // one claim at a time
	adoptMu sync.RWMutex // Adopt (read) against Stop's drain (write)
	// transferred counts budget rows of completed items that adopted items
	// took over: their releases are skipped (releaseBudget).
	transferred atomic.Int64
	next        int // rotation start, guarded by claimMu

	mu     sync.Mutex
	shapes []*shapeSlots[I]
	freed  chan struct{} // capacity freed since the last gather looked; never blocks a sender

	state  atomic.Int32 // 0 new, 1 running, 2 stopped
	cancel context.CancelCauseFunc
	giveUp chan struct{} // closed GiveUpAfter after Stop (see attempt)
	wg     sync.WaitGroup
	ctx    context.Context

	inClaim, maxInClaim                                        atomic.Int64
	turns, claims, claimed, staleOnly, denied, contended       atomic.Uint64
	finished, finishErrs, panics, abandoned, heartbeatFailures atomic.Uint64
	aheadRenewals, aheadReleased, adopted, cancelled, gaveUp   atomic.Uint64
	abandonedRunning                                           atomic.Int64
}

// New validates cfg and returns a stopped Scheduler.
func New[I any](backend Backend[I], cfg Config) (*Scheduler[I], error) {
	if backend == nil {
		return nil, errors.New("scheduler: nil backend")
	}
	cfg = cfg.withDefaults()
	switch {
	case cfg.Executors < 1:
		return nil, fmt.Errorf("scheduler: executors must be at least 1, got %d", cfg.Executors)
	case cfg.HandlerDeadline < 0 || cfg.AbandonAfter < 0 || cfg.HeartbeatEvery < 0 || cfg.FinishTimeout < 0 || cfg.RenewGrace < 0 || cfg.ClaimAheadWait < 0:
		return nil, errors.New("scheduler: durations must not be negative")
	}
	shapes, err := Shapes(cfg.Profile, cfg.Executors, cfg.Classes)
	if err != nil {
		return nil, err
	}
	lim := cfg.Limiter
	if lim == nil {
		if lim, err = NewBudgetLimiter(cfg.MaxProcessingRows, nil); err != nil {
			return nil, err
		}
	}
	s := &Scheduler[I]{cfg: cfg, backend: backend, limiter: lim, log: cfg.Logger, freed: make(chan struct{}, 1), giveUp: make(chan struct{})}
	for _, sh := range shapes {
		maxAhead := sh.Executors * cfg.ClaimAhead / cfg.Executors
		// Room for every row the budget admits (claims fill at most the
		// places; adopted items may exceed them, never the budget).
		s.shapes = append(s.shapes, &shapeSlots[I]{Shape: sh, work: make(chan queued[I], sh.Executors+maxAhead+cfg.MaxProcessingRows),
			free: sh.Executors, hungry: true, maxAhead: maxAhead})
	}
	return s, nil
}

// Shapes returns the executor shapes in claim rotation order.
func (s *Scheduler[I]) Shapes() []Shape {
	out := make([]Shape, len(s.shapes))
	for i, sh := range s.shapes {
		out[i] = sh.Shape
	}
	return out
}

// Start launches the executor slots; they run until Stop. Cancelling ctx
// does not stop them (its values are kept): only Stop ends attempts, with
// the cause ErrShutdown, so a shutdown releases items instead of failing
// them.
func (s *Scheduler[I]) Start(ctx context.Context) error {
	if !s.state.CompareAndSwap(0, 1) {
		return errors.New("scheduler: Start called twice")
	}
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	for _, sh := range s.shapes {
		for range sh.Executors {
			s.wg.Add(1)
			go s.slot(sh)
		}
	}
	return nil
}

// Stop cancels running attempts (cause ErrShutdown), waits for every slot
// to finish its item through Finish, and finishes items handed to slots
// that never started them. Claims must have stopped first. A handler that
// ignores the cancellation keeps its item (lease held, lanes blocked) and
// Stop waits for it, for GiveUpAfter at most: past that, its item is left
// to its lease's expiry, never finished or released while it may run.
func (s *Scheduler[I]) Stop() {
	if !s.state.CompareAndSwap(1, 2) {
		s.state.CompareAndSwap(0, 2)
		return
	}
	if s.cfg.GiveUpAfter > 0 { // armed first: GiveUpAfter counts from the cancellation
		t := s.cfg.Clock.NewTimer()
		t.Reset(s.cfg.GiveUpAfter)
		waited := make(chan struct{})
		defer close(waited)
		go func() {
			defer t.Stop()
			select {
			case <-t.C():
				close(s.giveUp)
			case <-waited:
			}
		}()
	}
	s.cancel(ErrShutdown)
	s.wg.Wait()
	s.claimMu.Lock() // no claim is dispatching now
	defer s.claimMu.Unlock()
	s.adoptMu.Lock() // nor a finisher adopting (Adopt); later ones see the state
	defer s.adoptMu.Unlock()
	for _, sh := range s.shapes {
		for {
			select {
			case q := <-sh.work:
				s.finish(q.item, ErrShutdown)
				s.releaseSlot(sh, -1)
				s.releaseBudget()
				continue
			default:
			}
			break
		}
	}
}

// Running reports whether the scheduler was started and not stopped.
func (s *Scheduler[I]) Running() bool { return s.state.Load() == 1 }

// Capacity is how many items a claim turn could start now; a continuation
// counts only shapes whose last claim asked for more.
func (s *Scheduler[I]) Capacity(continuation bool) int {
	if !s.Running() {
		return 0
	}
	s.mu.Lock()
	free := 0
	for _, sh := range s.shapes {
		if !continuation || sh.hungry {
			free += max(sh.free, 0)
		}
	}
	s.mu.Unlock()
	return min(free, s.limiter.Available())
}

// ClaimTurn runs one claim turn (see the package comment): every shape
// with free slots is admitted in rotation order, and one backend call
// claims for all of them.
func (s *Scheduler[I]) ClaimTurn(ctx context.Context, turn controller.Turn) (controller.ClaimBatch, error) {
	if !s.Running() {
		return controller.ClaimBatch{}, fmt.Errorf("%w: %w", ErrStopped, controller.ErrSourceOperationNotCommitted)
	}
	s.claimMu.Lock()
	defer s.claimMu.Unlock()
	if !s.Running() { // Stop won the lock: nothing would run the items
		return controller.ClaimBatch{}, fmt.Errorf("%w: %w", ErrStopped, controller.ErrSourceOperationNotCommitted)
	}
	if turn.Continuation {
		s.gather()
	}
	s.turns.Add(1)
	var batch controller.ClaimBatch
	first := s.next
	s.next = (s.next + 1) % len(s.shapes)
	var (
		reqs     []Request
		claiming []*shapeSlots[I]
		admitErr error
	)
	for i := range s.shapes {
		sh := s.shapes[(first+i)%len(s.shapes)]
		s.mu.Lock()
		free, hungry := sh.free, sh.hungry
		s.mu.Unlock()
		if free <= 0 || (turn.Continuation && !hungry) {
			batch.More = batch.More || hungry
			continue
		}
		req, ok, err := s.admit(ctx, sh, free)
		if err != nil {
			admitErr = err // claim for the shapes already admitted, then report
			break
		}
		if ok {
			reqs, claiming = append(reqs, req), append(claiming, sh)
			continue
		}
		// Denied. By the budget, a hungry shape stays hungry, and More
		// lets the controller continue once capacity frees; without it a
		// turn whose budget went to a shape without work (then not hungry)
		// would end the claiming while work waits, until the next event.
		s.mu.Lock()
		batch.More = batch.More || sh.hungry
		s.mu.Unlock()
	}
	var firstErr error
	if len(reqs) > 0 {
		began := s.cfg.Clock.Now() // no lease of this turn is older
		results := s.claim(ctx, reqs)
		for k, sh := range claiming {
			started, err := s.dispatch(sh, reqs[k], results[k], began)
			batch.Started += started
			s.mu.Lock()
			batch.More = batch.More || sh.hungry
			s.mu.Unlock()
			if firstErr == nil {
				firstErr = err
			}
		}
	}
	err := cmp.Or(firstErr, admitErr)
	if err != nil && batch.Started > 0 && errors.Is(err, controller.ErrSourceOperationNotCommitted) {
		// Items already won this turn are running; the failed read changed
		// nothing. End the turn with what it has.
		s.log.Warn("claim read failed after items were won this turn", "won", batch.Started, "err", err)
		return batch, nil
	}
	return batch, err
}

// admit asks the limiter for up to free rows of sh and reserves the slots
// granted; ok is false when it granted none.
func (s *Scheduler[I]) admit(ctx context.Context, sh *shapeSlots[I], free int) (req Request, ok bool, err error) {
	grant, err := s.limiter.Admit(ctx, free)
	if err != nil {
		return req, false, fmt.Errorf("scheduler: claim limiter: %w: %w", err, controller.ErrSourceOperationNotCommitted)
	}
	if grant.Max <= 0 {
		s.denied.Add(1)
		if s.limiter.Available() > 0 {
			// Denied by pressure, not by budget: this shape asks for no
			// continuation (a budget denial ends when capacity frees; a
			// pressure denial waits for the next event).
			s.mu.Lock()
			sh.hungry = false
			s.mu.Unlock()
		}
		return req, false, nil
	}
	if grant.Max = s.take(sh, grant.Max, free); grant.Max <= 0 {
		return req, false, nil // a finisher's items took the places meanwhile (Adopt)
	}
	if grant.StaleOnly {
		s.staleOnly.Add(1)
	}
	s.claims.Add(1)
	return Request{Shape: sh.Name, QueueClasses: sh.QueueClasses, Preferred: sh.Preferred, Max: grant.Max, StaleOnly: grant.StaleOnly}, true, nil
}

// claim makes the turn's one backend call.
func (s *Scheduler[I]) claim(ctx context.Context, reqs []Request) []ClaimResult[I] {
	if n := s.inClaim.Add(1); n > s.maxInClaim.Load() {
		s.maxInClaim.Store(n)
	}
	defer s.inClaim.Add(-1)
	results := s.backend.Claim(ctx, reqs)
	if len(results) != len(reqs) {
		// A backend that drops a result would leave slots reserved forever.
		panic(fmt.Sprintf("scheduler: backend returned %d claim results for %d requests", len(results), len(reqs)))
	}
	return results
}

// dispatch hands what one request won to its shape's reserved slots and
// gives back the slots it did not fill.
func (s *Scheduler[I]) dispatch(sh *shapeSlots[I], req Request, res ClaimResult[I], claimed time.Time) (int, error) {
	err := res.Err
	contended := errors.Is(err, ErrContended)
	if contended {
		s.contended.Add(1)
		err = nil
	}
	if len(res.Items) > req.Max {
		// A backend that overfills would run items without slots.
		panic(fmt.Sprintf("scheduler: backend claimed %d items for %d slots", len(res.Items), req.Max))
	}
	unused := req.Max - len(res.Items)
	s.mu.Lock()
	sh.free += unused
	// A failed claim proves nothing about what is left: the shape stays
	// hungry, so the turn's other shapes winning items (which swallows the
	// error) cannot leave it waiting for an event that may never come. When
	// it fails again with nothing won, the error ends the turn.
	sh.hungry = unused == 0 || contended || err != nil
	s.mu.Unlock()
	if unused > 0 {
		s.limiter.Release(unused)
	}
	for _, item := range res.Items {
		sh.work <- queued[I]{item, claimed} // a reserved place is waiting: never blocks
	}
	s.claimed.Add(uint64(len(res.Items)))
	return len(res.Items), err
}

// Adopt hands items a finisher claimed for this process outside a claim
// turn to the executors of shape: a backend that claims, in a completion's
// own transaction, the lane followers it promotes (claim on promote). Each
// item takes over the processing-budget row of an item that finisher
// completed, whose release is still to come (the caller guarantees at most
// one adopted item per such completion): the budget keeps counting the
// rows that are processing, without admitting anew. The items wait for the
// shape's slots like items claimed ahead (an item that waited a heartbeat
// renews before it starts), beyond its free places if need be: the next
// claim turns claim that much less. After Stop they are finished with
// ErrShutdown (released unrun) instead. Returns how many it handed over.
func (s *Scheduler[I]) Adopt(shape string, items []I, claimed time.Time) int {
	if len(items) == 0 {
		return 0
	}
	sh := s.shape(shape)
	s.adoptMu.RLock()
	defer s.adoptMu.RUnlock()
	if !s.Running() {
		for _, item := range items {
			s.finish(item, ErrShutdown)
		}
		return 0
	}
	s.transferred.Add(int64(len(items)))
	s.mu.Lock()
	sh.free -= len(items)
	s.mu.Unlock()
	for _, item := range items {
		sh.work <- queued[I]{item, claimed} // room for every processing row: never blocks
	}
	s.claimed.Add(uint64(len(items)))
	s.adopted.Add(uint64(len(items)))
	return len(items)
}

// shape returns the shape named name.
func (s *Scheduler[I]) shape(name string) *shapeSlots[I] {
	for _, sh := range s.shapes {
		if sh.Name == name {
			return sh
		}
	}
	panic(fmt.Sprintf("scheduler: no shape %q", name))
}

// take reserves up to granted (the limiter's grant) of sh's places, at
// most free, and gives the limiter back what it could not reserve. A claim
// turn reads a shape's free places before the limiter admits, and a
// finisher's items may take places in between (Adopt), so the count is
// taken again under the lock.
func (s *Scheduler[I]) take(sh *shapeSlots[I], granted, free int) int {
	s.mu.Lock()
	got := max(min(granted, free, sh.free), 0)
	sh.free -= got
	s.mu.Unlock()
	if got < granted {
		s.limiter.Release(granted - got)
	}
	return got
}

// Stats returns the counters.
func (s *Scheduler[I]) Stats() Stats {
	return Stats{
		ClaimTurns: s.turns.Load(), Claims: s.claims.Load(), Claimed: s.claimed.Load(),
		StaleOnlyClaims: s.staleOnly.Load(), LimiterDenials: s.denied.Load(), ContendedClaims: s.contended.Load(), Finished: s.finished.Load(),
		FinishErrors: s.finishErrs.Load(), Panics: s.panics.Load(), Abandoned: s.abandoned.Load(),
		AbandonedRunning: s.abandonedRunning.Load(), GaveUp: s.gaveUp.Load(),
		HeartbeatFailures: s.heartbeatFailures.Load(), MaxConcurrentClaims: s.maxInClaim.Load(),
		AheadRenewals: s.aheadRenewals.Load(), AheadReleased: s.aheadReleased.Load(), Adopted: s.adopted.Load(),
		Cancelled: s.cancelled.Load(),
	}
}

// FreeSlots returns the free slots per shape name (diagnostics, tests):
// its free places less those it may fill ahead, so a shape with nothing
// reserved, waiting or running has all its executors free.
func (s *Scheduler[I]) FreeSlots() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for _, sh := range s.shapes {
		out[sh.Name] = sh.free - sh.ahead
	}
	return out
}

// gather waits, up to ClaimGather of wall time, until every place of the
// hungry shapes (those a continuation turn claims for: their slots and the
// items they may hold ahead) is free and the budget covers them, or the
// scheduler stops.
func (s *Scheduler[I]) gather() {
	if s.cfg.ClaimGather <= 0 {
		return
	}
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		free, slots := 0, 0
		for _, sh := range s.shapes {
			if sh.hungry {
				free, slots = free+sh.free, slots+sh.Executors+sh.ahead
			}
		}
		s.mu.Unlock()
		if min(free, s.limiter.Available()) >= slots {
			return
		}
		if timeout == nil {
			t := time.NewTimer(s.cfg.ClaimGather)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-s.freed:
		case <-timeout:
			return
		case <-s.ctx.Done():
			return
		}
	}
}

// capacityFreed tells a gathering turn and the controller that a slot or
// budget row came back.
func (s *Scheduler[I]) capacityFreed() {
	select {
	case s.freed <- struct{}{}:
	default:
	}
	s.cfg.OnCapacityFreed()
}

// releaseSlot returns a slot whose handler returned after handled of wall
// time (negative: the item never ran) and resizes the shape's ahead
// allowance to its handlers' recent time.
func (s *Scheduler[I]) releaseSlot(sh *shapeSlots[I], handled time.Duration) {
	s.mu.Lock()
	sh.free++
	if handled >= 0 && sh.maxAhead > 0 {
		if sh.handled == 0 {
			sh.handled = max(handled, time.Nanosecond)
		} else {
			sh.handled += (handled - sh.handled) / 4
			sh.handled = max(sh.handled, time.Nanosecond)
		}
		ahead := sh.maxAhead
		if want := int64(s.cfg.ClaimAheadWait) * int64(sh.Executors) / int64(sh.handled); want < int64(ahead) {
			ahead = int(want)
		}
		sh.free += ahead - sh.ahead
		sh.ahead = ahead
	}
	s.mu.Unlock()
	s.capacityFreed()
}

// releaseBudget returns the budget row of an item whose outcome committed
// (or failed for good).
func (s *Scheduler[I]) releaseBudget() {
	for {
		n := s.transferred.Load()
		if n <= 0 {
			break
		}
		if s.transferred.CompareAndSwap(n, n-1) {
			return // an adopted item holds this row now
		}
	}
	s.limiter.Release(1)
	s.capacityFreed()
}
