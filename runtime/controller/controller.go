// Package controller is the worker lifecycle controller: it decides when a
// durable queue is read, and it never polls.
//
// After start-up (readiness, one reconciliation, one claim pass, one
// next-work lookup) a Source is read only because of:
//
//   - ClaimBatch.More: the source said more claimable work exists now;
//   - the exact due timer: every NotifyDue time until it fires, and a
//     NextWorkAt that was strictly in the future when it was read (firing at
//     once if that moment passed while the lookup or a claim ran);
//   - a coalesced Wake (new durable work this process knows of);
//   - a generation change seen by the cheap generation probe;
//   - the low-frequency reconciliation backstop, or RequestReconcile;
//
// While another process's wakes are known to reach this one (SetQuiet),
// the probe and the backstop run on the much longer quiet periods;
// maintenance keeps its own period, since it repairs what no wake
// announces. A quiet probe is the same probe as a normal one, so anything
// claimable is found within one quiet probe period even when every wake
// is lost. A quiet probe that sees a change after a whole period without a
// single wake, and whose claim turn then finds work, leaves quiet mode: the
// wake path is presumed broken until the next wake arrives.
//   - a Maintainer's maintenance (Config.MaintainEvery) that reports it may
//     have made work claimable.
//
// Completing an attempt is not one of them: it frees capacity, which lets a
// pending turn run, but it never creates a turn. An already-past next-work
// time after an authoritative empty claim is counted and left disarmed: the
// events above are the bounded recovery paths, never a zero-delay timer.
//
// Claim and Reconcile may change durable state. When either fails, the
// controller becomes unusable unless the error proves that nothing
// committed (ErrSourceOperationNotCommitted); a cancelled context is not
// that proof.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/internal/backoff"
	"github.com/laneq/laneq/runtime/clock"
)

// ErrSourceOperationNotCommitted marks a Claim or Reconcile error after
// which the source guarantees that no durable transition committed. Only
// errors wrapping it leave the controller usable.
var ErrSourceOperationNotCommitted = errors.New("controller: source operation did not commit")

// ErrSourceOperationRecoverable marks a Claim or Reconcile error after
// which something may have committed, but only what recovers by itself: a
// claim lease that ends, after which any claimer (this one included) takes
// the work over. Like ErrSourceOperationNotCommitted it leaves the
// controller usable. The receipt router's claims are such.
var ErrSourceOperationRecoverable = errors.New("controller: source operation may have committed only what recovers by itself")

// ErrUnusable reports a controller that saw a Claim or Reconcile error of
// unknown outcome. Durable ownership may have changed behind it, so it
// refuses to run again; build a new worker (whose stale-lease reclaim
// recovers anything claimed).
var ErrUnusable = errors.New("controller: unusable after a source operation of unknown outcome")

// ErrRunning reports a second concurrent Run.
var ErrRunning = errors.New("controller: already running")

// Turn describes a claim turn to the source.
type Turn struct {
	// Continuation is true when no event arrived since the previous claim:
	// the turn only continues that claim's More, so the source should claim
	// only for whatever asked for more.
	Continuation bool
	// DueFired says the exact due timer fired since the previous claim:
	// something scheduled (a retry, a lease expiry) is due now.
	DueFired bool
}

// ClaimBatch is what one claim turn did.
type ClaimBatch struct {
	// Started is the number of attempts the turn handed to executors.
	Started int
	// More says more claimable work exists now (the batch was cut short by
	// capacity, not by running out of work). Only More, never an attempt's
	// completion, continues claiming without a new event.
	More bool
}

// Source is a durable queue as the controller sees it.
type Source interface {
	// Ready checks that the source can be used (read-only).
	Ready(ctx context.Context) error
	// Reconcile repairs or materializes durable state (it may write).
	Reconcile(ctx context.Context) error
	// Claim claims up to the source's free capacity and starts attempts.
	Claim(ctx context.Context, turn Turn) (ClaimBatch, error)
	// NextWorkAt is the earliest time work becomes claimable that was
	// strictly in the future when the source read it, expressed on the
	// controller's clock (read-only). By the time the controller looks at
	// it, a busy machine may already have passed it: the due timer then
	// fires at once. A time that was not in the future when the call began
	// is a contradiction of the claim just made and is not armed.
	NextWorkAt(ctx context.Context) (at time.Time, ok bool, err error)
	// Generation is a cheap probe of a value that changes whenever another
	// process makes new work (read-only).
	Generation(ctx context.Context) (uint64, error)
	// Capacity is how many attempts a claim turn could start now, without
	// I/O; for a continuation only the capacity that asked for More counts.
	Capacity(continuation bool) int
}

// Maintainer is an optional extension of a Source: bounded maintenance the
// controller runs on its own timer, between claim turns, such as the
// dependency safety pass. claimable asks for a claim turn. Its errors never
// stop the controller (maintenance must leave nothing of unknown outcome
// that a claim turn could not recover): they are logged, and the next run
// comes after a backoff that doubles from MaintainRetryMin up to the period.
type Maintainer interface {
	Maintain(ctx context.Context) (claimable bool, err error)
}

// Defaults of Config's periods.
const (
	DefaultGenerationProbeEvery = 15 * time.Second
	DefaultReconcileEvery       = time.Minute
	DefaultMaintainEvery        = 2 * time.Minute
	DefaultQuietProbeEvery      = 20 * time.Minute
	DefaultQuietBackstopEvery   = 4 * time.Hour
	DefaultMissedWakeGrace      = time.Second
	MaintainRetryMin            = time.Second
)

// Config tunes a Controller. Zero fields take the defaults.
type Config struct {
	// Clock runs the timers. Default clock.Real().
	Clock clock.Clock
	// GenerationProbeEvery is the generation probe period: one cheap read
	// that triggers a claim turn only when the generation changed. Default
	// 15s; negative disables probing.
	GenerationProbeEvery time.Duration
	// ReconcileEvery is the reconciliation backstop period. Default 1m;
	// negative disables it.
	ReconcileEvery time.Duration
	// MaintainEvery is the period of a Maintainer source's maintenance (the
	// first run comes one period after start). Default 2m; negative
	// disables it. Ignored for a source that is not a Maintainer.
	MaintainEvery time.Duration
	// QuietProbeEvery replaces GenerationProbeEvery in quiet mode (see
	// SetQuiet). Default 20m; negative disables probing in quiet mode. A
	// period disabled in normal mode stays disabled in quiet mode.
	QuietProbeEvery time.Duration
	// QuietBackstopEvery replaces ReconcileEvery in quiet mode (a negative
	// ReconcileEvery stays disabled). Maintenance keeps MaintainEvery in
	// quiet mode. Default 4h.
	QuietBackstopEvery time.Duration
	// MissedWakeGrace is how long after a quiet probe's claim turn found
	// work that no wake had announced a wake may still arrive and explain
	// it: a probe can read between another process's commit and its
	// datagram. Only when none arrives does the controller count a missed
	// wake and leave quiet mode. Default 1s; negative judges at once.
	MissedWakeGrace time.Duration
	// Logger receives lifecycle and error records. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.GenerationProbeEvery == 0 {
		c.GenerationProbeEvery = DefaultGenerationProbeEvery
	}
	if c.ReconcileEvery == 0 {
		c.ReconcileEvery = DefaultReconcileEvery
	}
	if c.MaintainEvery == 0 {
		c.MaintainEvery = DefaultMaintainEvery
	}
	if c.QuietProbeEvery == 0 {
		c.QuietProbeEvery = DefaultQuietProbeEvery
	}
	if c.QuietBackstopEvery == 0 {
		c.QuietBackstopEvery = DefaultQuietBackstopEvery
	}
	if c.MissedWakeGrace == 0 {
		c.MissedWakeGrace = DefaultMissedWakeGrace
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	const floor = 10 * time.Millisecond
	for _, p := range []time.Duration{c.GenerationProbeEvery, c.ReconcileEvery, c.MaintainEvery, c.QuietProbeEvery, c.QuietBackstopEvery} {
		if p > 0 && p < floor {
			return c, fmt.Errorf("controller: probe, reconcile, maintain and quiet periods must be at least %s (or negative to disable), got %s, %s, %s, %s and %s",
				floor, c.GenerationProbeEvery, c.ReconcileEvery, c.MaintainEvery, c.QuietProbeEvery, c.QuietBackstopEvery)
		}
	}
	if c.QuietBackstopEvery < 0 {
		return c, fmt.Errorf("controller: the quiet backstop cannot be disabled (got %s): it is the only repair of what no wake announces", c.QuietBackstopEvery)
	}
	return c, nil
}

// Stats counts what a controller did since it was built.
type Stats struct {
	ReadyChecks         uint64
	Reconciles          uint64
	Claims              uint64
	EmptyClaims         uint64 // claims that started no attempt
	NextWorkLookups     uint64
	GenerationProbes    uint64
	GenerationChanges   uint64
	DueTimerFires       uint64
	OverdueSuppressions uint64 // past next-work times left disarmed
	WakesQueued         uint64 // Wake calls that raised the wake signal
	// WakeCoalescings counts raised wake signals that absorbed at least one
	// more Wake before the loop took them (once per signal, not per Wake:
	// counting every absorbed call would put a shared read-modify-write on
	// the path a pending wake must keep to one atomic load).
	WakeCoalescings      uint64
	ReconcilesQueued     uint64 // RequestReconcile calls that raised the reconcile signal
	ReconcileCoalescings uint64 // like WakeCoalescings
	Maintenances         uint64 // Maintainer runs
	MaintenanceErrors    uint64
	MaintenanceClaims    uint64 // runs that asked for a claim turn
	// QuietEntries counts switches into quiet mode; MissedWakes counts
	// quiet probes whose claim turn found work no wake announced, then or
	// within MissedWakeGrace (each one leaves quiet mode). ExplainedProbes
	// counts those a wake explained: it arrived during the turn or within
	// the grace.
	QuietEntries, MissedWakes, ExplainedProbes uint64
	// FarLookups counts next-work lookups that looked as far as the
	// quiet backstop (see LookAhead).
	FarLookups uint64
}

// Controller drives one Source. Its signal methods are safe for concurrent
// use and never block; Run is the single loop that reads the source.
type Controller struct {
	src      Source
	maintain Maintainer // nil when src is not one, or maintenance is disabled
	cfg      Config
	log      *slog.Logger

	notify    chan struct{} // capacity 1: "look at the flags"
	wake      signal
	reconcile signal
	hintsMu   sync.Mutex
	hints     []time.Time // NotifyDue times the loop has not taken yet
	settleReq chan chan struct{}

	running    atomic.Bool
	unusable   atomic.Pointer[error]
	quietWant  atomic.Bool // what SetQuiet asked for last
	lookFarReq atomic.Bool // WakeLookFar asked the next lookup to look far

	// Loop state, touched only by Run's goroutine.
	external         bool // an event arrived since the last claim
	dueFired         bool // the due timer fired since the last claim
	more             bool // the last claim said More
	generation       uint64
	due              clock.Timer
	dueAt            time.Time   // zero when the due timer is disarmed
	scheduled        []time.Time // NotifyDue times not yet due, ascending
	lookedUp         time.Time   // the last next-work lookup's time, zero when none
	timers           loopTimers
	maintainBackoff  time.Duration // the last retry delay after failed maintenance; zero when the last run succeeded
	maintainFailures int           // consecutive failed maintenance runs
	quiet            bool          // the mode the timers and baseline are in
	probeFound       bool          // a quiet probe saw a change, and no wake came in its period
	missSuspected    bool          // that change's claim found work; a wake within the grace explains it
	wokenSinceProbe  bool          // a wake arrived since the last probe
	lookFar          bool          // the next lookup looks as far as the quiet backstop

	readyChecks, reconciles, claims, emptyClaims, nextWork atomic.Uint64
	probes, genChanges, dueFires, overdue                  atomic.Uint64
	maintenances, maintainErrors, maintainClaims           atomic.Uint64
	quietEntries, missedWakes, explained, farLookups       atomic.Uint64
}

// loopTimers are Run's periodic timers.
type loopTimers struct{ probe, backstop, maintain, grace clock.Timer }

// New returns a Controller for src.
func New(src Source, cfg Config) (*Controller, error) {
	if src == nil {
		return nil, errors.New("controller: nil source")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Controller{
		src: src, cfg: cfg, log: cfg.Logger,
		notify: make(chan struct{}, 1), settleReq: make(chan chan struct{}),
	}
	if m, ok := src.(Maintainer); ok && cfg.MaintainEvery > 0 {
		c.maintain = m
	}
	return c, nil
}

// Wake says durable work may be claimable now (an enqueue, a release, a
// promotion in this process). Wakes coalesce: however many arrive before
// the loop looks, they cause one claim turn.
func (c *Controller) Wake() {
	if c.wake.raise() {
		c.poke()
	}
}

// RequestReconcile asks for a reconciliation before the next claim.
// Requests coalesce like wakes.
func (c *Controller) RequestReconcile() {
	if c.reconcile.raise() {
		c.poke()
	}
}

// signal is a coalescing flag the loop handles once however often it was
// raised. Raising one that is already raised and already marked coalesced
// is a single atomic load: wake storms (every enqueue of a busy process
// wakes) must not contend on a shared counter.
type signal struct {
	state               atomic.Uint32 // signalDown, signalRaised or signalCoalesced
	raised, coalescings atomic.Uint64
}

const (
	signalDown uint32 = iota
	signalRaised
	signalCoalesced // raised, and raised again before the loop took it
)

// raise raises the signal and reports whether this call raised it (and
// so must poke the loop).
func (s *signal) raise() bool {
	if s.state.Load() == signalCoalesced { // the storm path: kept inlinable
		return false
	}
	return s.raiseSlow()
}

func (s *signal) raiseSlow() bool {
	switch s.state.Load() {
	case signalCoalesced:
		return false
	case signalRaised:
		if s.state.CompareAndSwap(signalRaised, signalCoalesced) {
			s.coalescings.Add(1)
		}
		return false
	}
	if !s.state.CompareAndSwap(signalDown, signalRaised) {
		return s.raiseSlow() // raised by another caller meanwhile: count it as coalesced
	}
	s.raised.Add(1)
	return true
}

// pending reports whether the signal is raised, without taking it.
func (s *signal) pending() bool { return s.state.Load() != signalDown }

// take lowers the signal and reports whether it was raised.
func (s *signal) take() bool { return s.state.Swap(signalDown) != signalDown }

// set raises or lowers the signal without counting (the loop's own use).
func (s *signal) set(raised bool) {
	if raised {
		s.state.Store(signalRaised)
	} else {
		s.state.Store(signalDown)
	}
}

// SetQuiet says whether other processes' wakes reach this one now (a wake
// hub's health). In quiet mode the probe, backstop and maintenance run on
// the quiet periods. The switch happens in Run's loop: the generation is
// probed once more in the old mode (nothing it would have found is lost)
// and once in the new one for the baseline.
func (c *Controller) SetQuiet(quiet bool) {
	if c.quietWant.Swap(quiet) != quiet {
		c.poke()
	}
}

// Quiet reports whether the loop runs in quiet mode.
func (c *Controller) Quiet() bool { return c.quietWant.Load() }

// WakeLookFar is Wake for work that becomes claimable later (a delayed
// enqueue, another process's retries when it stops): in quiet mode the
// next lookup looks for the next due time as far as the quiet backstop.
func (c *Controller) WakeLookFar() {
	c.lookFarReq.Store(true)
	c.Wake()
}

// LookAhead is how far a next-work lookup must look: to the normal
// reconciliation backstop, which looks again (0, no limit, when it is
// disabled). In quiet mode a lookup looks as far as the quiet backstop
// when entering quiet mode, at the quiet backstop, and after WakeLookFar:
// the other lookups stay short, because the far spans of a scope with a
// large not-due backlog read all of it on the embedded engine, and what
// becomes due later is known by the timers of the process that scheduled
// it or announced by WakeLookFar. A Source calls it from NextWorkAt, on
// Run's loop.
func (c *Controller) LookAhead() time.Duration {
	if c.quiet && c.lookFar && c.cfg.ReconcileEvery > 0 {
		return c.cfg.QuietBackstopEvery
	}
	return max(c.cfg.ReconcileEvery, 0)
}

// CapacityFreed says an attempt finished. It lets a pending turn run; it
// never creates one.
func (c *Controller) CapacityFreed() { c.poke() }

// NotifyDue says work becomes claimable at (a retry this process just
// scheduled). Every such time keeps its own place on the due timer until it
// fires, so two retries due a moment apart cost two claim turns, not one
// turn that comes a moment too early for the second; a time already past
// counts as a due fire at once.
func (c *Controller) NotifyDue(at time.Time) {
	c.hintsMu.Lock()
	c.hints = append(c.hints, at)
	c.hintsMu.Unlock()
	c.poke()
}

func (c *Controller) poke() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// Usable reports whether Run may be called (again).
func (c *Controller) Usable() bool { return c.unusable.Load() == nil }

// Stats returns the counters.
func (c *Controller) Stats() Stats {
	return Stats{
		ReadyChecks: c.readyChecks.Load(), Reconciles: c.reconciles.Load(), Claims: c.claims.Load(),
		EmptyClaims: c.emptyClaims.Load(), NextWorkLookups: c.nextWork.Load(), GenerationProbes: c.probes.Load(),
		GenerationChanges: c.genChanges.Load(), DueTimerFires: c.dueFires.Load(), OverdueSuppressions: c.overdue.Load(),
		WakesQueued: c.wake.raised.Load(), WakeCoalescings: c.wake.coalescings.Load(),
		ReconcilesQueued: c.reconcile.raised.Load(), ReconcileCoalescings: c.reconcile.coalescings.Load(),
		Maintenances: c.maintenances.Load(), MaintenanceErrors: c.maintainErrors.Load(), MaintenanceClaims: c.maintainClaims.Load(),
		QuietEntries: c.quietEntries.Load(), MissedWakes: c.missedWakes.Load(), ExplainedProbes: c.explained.Load(),
		FarLookups: c.farLookups.Load(),
	}
}

// Settle returns once Run has handled every signal sent and every timer
// fired before the call. Tests and benchmarks use it to assert exact call
// budgets without sleeping; it fails with ctx when Run is not looping.
func (c *Controller) Settle(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case c.settleReq <- ack:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Run performs start-up, then reacts to events until ctx ends or a source
// call fails. It returns ctx's error on cancellation; after an error of
// unknown durable outcome it returns one wrapping ErrUnusable, and so does
// every later call.
func (c *Controller) Run(ctx context.Context) error {
	if p := c.unusable.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrUnusable, *p)
	}
	if !c.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer c.running.Store(false)
	c.due = c.cfg.Clock.NewTimer()
	defer c.due.Stop()
	c.dueAt, c.lookedUp = time.Time{}, time.Time{}
	c.timers = loopTimers{probe: c.cfg.Clock.NewTimer(), backstop: c.cfg.Clock.NewTimer(), maintain: c.cfg.Clock.NewTimer(), grace: c.cfg.Clock.NewTimer()}
	defer c.timers.probe.Stop()
	defer c.timers.backstop.Stop()
	defer c.timers.maintain.Stop()
	defer c.timers.grace.Stop()

	c.quiet, c.probeFound, c.missSuspected = false, false, false
	if err := c.startup(ctx); err != nil {
		return err
	}
	c.maintainBackoff, c.maintainFailures = 0, 0
	c.armPeriods()
	c.log.Debug("controller started", "probe_every", c.cfg.GenerationProbeEvery, "reconcile_every", c.cfg.ReconcileEvery,
		"maintain_every", c.cfg.MaintainEvery, "maintainer", c.maintain != nil)

	for {
		if err := c.handleNext(ctx); err != nil {
			return err
		}
	}
}

// handleNext waits for one event, folds it into the loop state and runs
// whatever claim turns it makes runnable.
func (c *Controller) handleNext(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.notify:
	case <-c.due.C():
		c.onDue()
	case <-c.timers.probe.C():
		if err := c.onProbe(ctx); err != nil {
			return err
		}
	case <-c.timers.backstop.C():
		c.onBackstop()
	case <-c.timers.maintain.C():
		c.onMaintain(ctx)
	case <-c.timers.grace.C():
		c.onGrace()
	case ack := <-c.settleReq:
		defer close(ack)
		// Handle everything already pending before acknowledging.
		for {
			if err := c.step(ctx); err != nil {
				return err
			}
			handled, err := c.drainOne(ctx)
			if err != nil || !handled {
				return err
			}
		}
	}
	return c.step(ctx)
}

// onDue handles the due timer's fire: everything due by now is handed to
// the next claim turn, and the timer moves on to what is left.
func (c *Controller) onDue() {
	c.dueAt = time.Time{}
	c.rearm()
}

// onGrace judges a suspected missed wake once its grace passed: no wake
// came, so the wake path is broken (an unreachable address, a lost
// registration). Probe on the normal period until a wake arrives again.
func (c *Controller) onGrace() {
	if !c.missSuspected || !c.quiet {
		return
	}
	c.missSuspected = false
	c.missedWakes.Add(1)
	c.log.Warn("a quiet generation probe found work no wake announced; probing on the normal period until wakes arrive again",
		"grace", c.cfg.MissedWakeGrace, "probe_every", c.cfg.GenerationProbeEvery)
	c.quietWant.Store(false)
}

func (c *Controller) onProbe(ctx context.Context) error {
	c.arm(c.timers.probe, c.periods().probe)
	return c.probe(ctx)
}

func (c *Controller) onBackstop() {
	c.arm(c.timers.backstop, c.periods().reconcile)
	c.reconcile.set(true)
	c.lookFar = c.quiet // the quiet backstop looks again as far as itself
}

// loopPeriods are the periodic timers' periods in one mode.
type loopPeriods struct{ probe, reconcile, maintain time.Duration }

func (c *Controller) periods() loopPeriods {
	if !c.quiet {
		return loopPeriods{c.cfg.GenerationProbeEvery, c.cfg.ReconcileEvery, c.cfg.MaintainEvery}
	}
	// A period disabled in normal mode stays disabled in quiet mode.
	// Maintenance repairs what no wake announces (a key recorded without
	// its wake, a stranded lane row): it keeps its period.
	p := loopPeriods{c.cfg.QuietProbeEvery, c.cfg.QuietBackstopEvery, c.cfg.MaintainEvery}
	if c.cfg.GenerationProbeEvery < 0 {
		p.probe = c.cfg.GenerationProbeEvery
	}
	if c.cfg.ReconcileEvery < 0 {
		p.reconcile = c.cfg.ReconcileEvery
	}
	return p
}

// armPeriods (re)arms the periodic timers for the current mode.
func (c *Controller) armPeriods() {
	p := c.periods()
	for _, t := range []clock.Timer{c.timers.probe, c.timers.backstop, c.timers.maintain} {
		t.Stop()
	}
	c.arm(c.timers.probe, p.probe)
	c.arm(c.timers.backstop, p.reconcile)
	if c.maintain != nil {
		if c.maintainBackoff > 0 {
			c.arm(c.timers.maintain, c.maintainBackoff)
		} else {
			c.arm(c.timers.maintain, p.maintain)
		}
	}
}

// switchMode follows SetQuiet: one probe (a change it finds makes a claim
// turn; what it read is the new mode's baseline, since both modes probe
// alike), then the timers move to the new periods. A separate baseline
// read after the probe would swallow a change committed between the two.
func (c *Controller) switchMode(ctx context.Context) error {
	want := c.quietWant.Load()
	if want == c.quiet {
		return nil
	}
	if c.probing() {
		if err := c.probe(ctx); err != nil {
			return err
		}
	}
	c.quiet, c.probeFound, c.missSuspected = want, false, false
	if want {
		c.quietEntries.Add(1)
	}
	c.armPeriods()
	if want {
		// The last lookup looked only as far as the normal backstop: look
		// to the quiet one, or a retry due later would wait for it.
		c.lookFar = true
		if err := c.refreshDue(ctx); err != nil {
			return err
		}
	}
	c.log.Debug("controller mode changed", "quiet", c.quiet, "probe_every", c.periods().probe)
	return nil
}

// probing reports whether the current mode probes at all.
func (c *Controller) probing() bool { return c.periods().probe > 0 }

// generationNow reads the generation (the same probe in both modes).
func (c *Controller) generationNow(ctx context.Context) (uint64, error) {
	c.probes.Add(1)
	return c.src.Generation(ctx)
}

// onMaintain runs the Maintainer once. A failure is logged and retried
// after a backoff (doubling, at most the period); it never stops the loop.
func (c *Controller) onMaintain(ctx context.Context) {
	c.maintenances.Add(1)
	claimable, err := c.maintain.Maintain(ctx)
	if claimable {
		// Even a failed run may have committed wakes before it failed.
		c.maintainClaims.Add(1)
		c.external = true
	}
	switch {
	case err == nil:
		c.maintainBackoff, c.maintainFailures = 0, 0
		c.arm(c.timers.maintain, c.periods().maintain)
	case ctx.Err() != nil:
		return // shutting down: Run returns on its next look
	default:
		c.maintainErrors.Add(1)
		c.maintainFailures++
		c.maintainBackoff = backoff.Policy{Initial: MaintainRetryMin, Max: c.periods().maintain}.Delay(c.maintainFailures, 0)
		c.log.Warn("maintenance failed; retrying after a backoff", "err", err, "after", c.maintainBackoff)
		c.arm(c.timers.maintain, c.maintainBackoff)
	}
}

// drainReady handles every already-ready event without blocking.
func (c *Controller) drainReady(ctx context.Context) error {
	for {
		handled, err := c.drainOne(ctx)
		if err != nil || !handled {
			return err
		}
	}
}

// drainOne handles one already-ready event without blocking (the same
// cases as handleNext, which must block instead).
func (c *Controller) drainOne(ctx context.Context) (bool, error) {
	select {
	case <-c.notify:
	case <-c.due.C():
		c.onDue()
	case <-c.timers.probe.C():
		return true, c.onProbe(ctx)
	case <-c.timers.backstop.C():
		c.onBackstop()
	case <-c.timers.maintain.C():
		c.onMaintain(ctx)
	case <-c.timers.grace.C():
		c.onGrace()
	default:
		return false, nil
	}
	return true, nil
}

func (c *Controller) arm(t clock.Timer, every time.Duration) {
	if every > 0 {
		t.Reset(every)
	}
}

func (c *Controller) startup(ctx context.Context) error {
	c.readyChecks.Add(1)
	if err := c.src.Ready(ctx); err != nil {
		return fmt.Errorf("controller: source not ready: %w", err)
	}
	if c.probing() {
		g, err := c.generationNow(ctx)
		if err != nil {
			return fmt.Errorf("controller: generation baseline: %w", err)
		}
		c.generation = g
	}
	c.reconcile.set(false)
	if err := c.doReconcile(ctx); err != nil {
		return err
	}
	c.external, c.more = true, false
	return c.step(ctx)
}

// probe reads the generation; only a change makes a claim turn.
func (c *Controller) probe(ctx context.Context) error {
	g, err := c.generationNow(ctx)
	if err != nil {
		return fmt.Errorf("controller: generation probe: %w", err)
	}
	if g != c.generation {
		c.generation = g
		c.genChanges.Add(1)
		c.external = true
		// No wake in a whole quiet period, yet something changed: if the
		// claim it causes finds work, the wake path is broken.
		c.probeFound = c.quiet && !c.wokenSinceProbe
	}
	c.wokenSinceProbe = false
	return nil
}

// step folds the signal flags into the loop state and runs claim turns
// while one is pending and capacity exists. Queued reconcile signals are
// handled before every claim.
func (c *Controller) step(ctx context.Context) error {
	for first := true; ; first = false {
		if !first {
			// Between the turns of a backlog (More), handle the timers
			// that fired meanwhile: a source whose turns run inline (and
			// so never wait for capacity) would otherwise hold the
			// probe, the backstop and maintenance back for as long as
			// its backlog lasts.
			if err := c.drainReady(ctx); err != nil {
				return err
			}
		}
		if err := c.switchMode(ctx); err != nil {
			return err
		}
		if c.reconcile.take() {
			if err := c.doReconcile(ctx); err != nil {
				return err
			}
			c.external = true
		}
		if c.lookFarReq.Swap(false) {
			c.lookFar = true
		}
		if c.wake.take() {
			c.external = true
			if c.missSuspected {
				c.explained.Add(1)
			}
			c.probeFound, c.missSuspected = false, false // a wake explains what the probe saw
			c.wokenSinceProbe = true
		}
		c.takeHints()
		var runnable bool
		switch {
		case c.external:
			runnable = c.src.Capacity(false) > 0
		case c.more:
			runnable = c.src.Capacity(true) > 0
		}
		if !runnable {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := c.claim(ctx); err != nil {
			return err
		}
	}
}

// takeHints moves the NotifyDue times sent since the last look into the
// loop's schedule and re-arms the timer when one of them comes first.
func (c *Controller) takeHints() {
	c.hintsMu.Lock()
	hints := c.hints
	c.hints = nil
	c.hintsMu.Unlock()
	if len(hints) == 0 {
		return
	}
	for _, at := range hints {
		i, _ := slices.BinarySearchFunc(c.scheduled, at, time.Time.Compare)
		c.scheduled = slices.Insert(c.scheduled, i, at)
	}
	c.rearm()
}

// rearm hands everything due by now (scheduled times, the looked-up next
// work time) to the next claim turn as a due fire, and points the timer at
// the earliest time left. Each time is handed over once, so this cannot
// spin.
func (c *Controller) rearm() {
	now := c.cfg.Clock.Now()
	fired := false
	for len(c.scheduled) > 0 && !c.scheduled[0].After(now) {
		c.scheduled, fired = c.scheduled[1:], true
	}
	if !c.lookedUp.IsZero() && !c.lookedUp.After(now) {
		c.lookedUp, fired = time.Time{}, true
	}
	if fired {
		c.dueFires.Add(1)
		c.external, c.dueFired = true, true
	}
	next := c.lookedUp
	if len(c.scheduled) > 0 && (next.IsZero() || c.scheduled[0].Before(next)) {
		next = c.scheduled[0]
	}
	if next.Equal(c.dueAt) {
		return
	}
	c.due.Stop()
	c.dueAt = next
	if !next.IsZero() {
		c.due.Reset(next.Sub(now))
	}
}

func (c *Controller) claim(ctx context.Context) error {
	turn := Turn{Continuation: !c.external, DueFired: c.dueFired}
	c.external, c.dueFired = false, false
	c.claims.Add(1)
	batch, err := c.src.Claim(ctx, turn)
	if batch.Started == 0 {
		c.emptyClaims.Add(1)
	}
	if err != nil {
		// Attempts started prove that something committed, whatever the
		// error claims.
		return c.fail("claim", err, batch.Started == 0)
	}
	if c.probeFound {
		c.probeFound = false
		switch {
		case batch.Started == 0:
		case c.wake.pending():
			// A wake arrived while the turn ran: it may have been for
			// the work the turn found, which cannot tell.
			c.explained.Add(1)
		default:
			// Work a quiet probe found and no wake announced yet: the
			// wake path is broken unless its datagram was still in flight.
			c.missSuspected = true
			if c.cfg.MissedWakeGrace > 0 {
				c.timers.grace.Reset(c.cfg.MissedWakeGrace)
			} else {
				c.onGrace()
			}
		}
	}
	c.more = batch.More
	if c.more {
		return nil
	}
	// A terminal batch, empty or not, refreshes the exact due timer.
	return c.refreshDue(ctx)
}

func (c *Controller) refreshDue(ctx context.Context) error {
	c.nextWork.Add(1)
	// Times that came due while the claim ran may lie past that claim's
	// reads, and the lookup below sees only the future: hand them to the
	// next turn first instead of losing them.
	c.rearm()
	asked := c.cfg.Clock.Now()
	if c.quiet && c.lookFar {
		c.farLookups.Add(1)
	}
	at, ok, err := c.src.NextWorkAt(ctx)
	c.lookFar = false
	if err != nil {
		return fmt.Errorf("controller: next work time: %w", err)
	}
	c.lookedUp = time.Time{}
	switch {
	case !ok:
	case !at.After(asked):
		// Not in the future even when the lookup began: the claim just said
		// nothing is claimable, so trust it, count the contradiction, and
		// leave recovery to wakes, probes and the backstop rather than spin.
		c.overdue.Add(1)
	default:
		// In the future when read. If a busy machine let that moment pass
		// while the lookup returned, rearm fires at once: a source reports
		// each strictly-future time once, so this cannot spin.
		c.lookedUp = at
	}
	c.rearm()
	return nil
}

func (c *Controller) doReconcile(ctx context.Context) error {
	c.reconciles.Add(1)
	if err := c.src.Reconcile(ctx); err != nil {
		return c.fail("reconcile", err, true)
	}
	return nil
}

// fail classifies an error of a mutating source call; mayTrustMarker is
// false when the call's own result contradicts a not-committed marker.
func (c *Controller) fail(op string, err error, mayTrustMarker bool) error {
	if errors.Is(err, ErrSourceOperationRecoverable) || mayTrustMarker && errors.Is(err, ErrSourceOperationNotCommitted) {
		return fmt.Errorf("controller: %s: %w", op, err)
	}
	err = fmt.Errorf("controller: %s: %w", op, err)
	c.unusable.Store(&err)
	c.log.Error("controller unusable: source operation of unknown outcome", "op", op, "err", err)
	return fmt.Errorf("%w: %w", ErrUnusable, err)
}
