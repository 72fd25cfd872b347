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
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// GroupConfig configures a Group: one process serving many scopes (for
// example one per tenant) with one processing pool, one wake endpoint and
// an idle cost that does not grow with idle scopes.
type GroupConfig struct {
	// Scopes lists the scopes to serve (each must exist).
	Scopes []string
	// ByPrefix serves every scope whose id starts with Prefix ("" is every
	// scope), also scopes created while the group runs: they are found by
	// the idle probe, at most one probe period after they appear.
	ByPrefix bool
	Prefix   string
	// Member configures the worker a scope runs while it has live work
	// (its Scope must be empty; the group sets it). Member.Wake configures
	// the group's one hub (its own, Shared, or Off); Member.Scheduler's
	// Limiter must be nil (the group's pool is every member's limiter).
	Member Config
	// MaxProcessing is the pool: the processing rows (items claimed and not
	// finished) of every scope together in this process. Default: one
	// member's default budget (2 × Member.Scheduler.Executors + its claim
	// ahead).
	MaxProcessing int
	// MaxPerScope caps one scope's share of the pool. Default
	// MaxProcessing: a lone busy scope may use all of it; while another
	// scope waits, the busy one is held to its fair share (see
	// scheduler.Pool).
	MaxPerScope int
	// IdleProbeEvery is how often the group reads the marks of its idle
	// scopes (one statement per workqueue.MaxScopesPerStatement scopes;
	// with ByPrefix it also finds new scopes) while other processes' wakes
	// do not reach it. Default controller.DefaultGenerationProbeEvery (15s).
	IdleProbeEvery time.Duration
	// QuietIdleProbeEvery replaces IdleProbeEvery while the group's wake
	// endpoint is healthy (wakes reach it). Default
	// controller.DefaultQuietProbeEvery (20 minutes).
	QuietIdleProbeEvery time.Duration
	// IdleAfter is how long a scope's member must hold no processing row
	// and hear no wake before the group checks whether the scope has live
	// work left (two statements); without any, the member stops and the
	// scope costs nothing until its mark moves or a wake names it. While
	// the scope still has live work (waiting on another process's lease, a
	// dependency, a retry) the check backs off, doubling up to
	// QuietIdleProbeEvery. Default 10s.
	IdleAfter time.Duration
}

// Group defaults.
const DefaultGroupIdleAfter = 10 * time.Second

// surveyParallel bounds the live-work checks a group runs at once at start
// and for newly found scopes.
const surveyParallel = 4

// Group runs many scopes' work in one process. A scope with live work runs
// a member Worker (controller, scheduler, claimer, maintenance: everything
// a Worker does for one scope), admitted through the group's one
// processing pool (scheduler.Pool: per-scope cap and fair share); a scope
// without live work runs nothing. One wake endpoint (wake.SubscribeScopes)
// serves every scope: a wake naming an idle scope starts its member at
// once. What makes work claimable in an idle scope without a wake reaching
// this process moves the scope's row (workqueue.ScopeMark: every enqueue
// and replay, a generation move, a pause change), and the idle probe reads
// every idle scope's row in one statement per thousand scopes.
//
// So a quiet group whose scopes are all idle sends one statement per
// QuietIdleProbeEvery per thousand scopes, plus its endpoint's renewal
// (one statement per thousand scopes per two hours); BenchmarkManyScopes
// counts it.
type Group struct {
	cfg      GroupConfig
	q        *workqueue.Queue
	handlers map[string]Handler
	pool     *scheduler.Pool
	log      *slog.Logger
	clock    clock.Clock

	mu      sync.Mutex
	scopes  map[string]*groupScope
	healthy bool
	hub     *wake.Hub // while Run has one
	sub     *wake.Subscription
	runCtx  context.Context // Run's, while it runs
	members sync.WaitGroup
	probe   chan struct{} // capacity 1: probe now

	ran                                            atomic.Bool
	activations, deactivations, probes, liveChecks atomic.Uint64
	// described is what the endpoint row says of the process's state
	// (written at registration, when it is not quiet yet).
	described atomic.Pointer[describedState]
}

// groupScope is one served scope; fields under Group.mu.
type groupScope struct {
	id   string
	mark workqueue.ScopeMark // read when the scope was last found idle
	w    *Worker             // its member while it runs
	// woken: a wake named the scope since its member's last idle check (or
	// while the member stopped): the member keeps running, or starts again.
	woken bool
}

// NewGroup checks cfg and builds a Group; handlers maps each work type to
// its handler, for every scope.
func NewGroup(q *workqueue.Queue, cfg GroupConfig, handlers map[string]Handler) (*Group, error) {
	if q == nil {
		return nil, errors.New("worker: nil queue")
	}
	if cfg.Member.Scope != "" {
		return nil, &ConfigError{"Member.Scope", cfg.Member.Scope, "leave it empty: the group sets each member's scope"}
	}
	if len(cfg.Member.Schedules) > 0 {
		return nil, &ConfigError{"Member.Schedules", fmt.Sprint(len(cfg.Member.Schedules)), "a member runs only while its scope has live work: run schedules in a Worker of their scope"}
	}
	if cfg.Member.Scheduler.Limiter != nil {
		return nil, &ConfigError{"Member.Scheduler.Limiter", "set", "leave it nil: the group's pool admits every member's claims"}
	}
	if cfg.ByPrefix {
		if len(cfg.Scopes) > 0 {
			return nil, &ConfigError{"Scopes", fmt.Sprint(cfg.Scopes), "set Scopes or ByPrefix, not both"}
		}
		if err := workqueue.ValidScopePrefix(cfg.Prefix); err != nil {
			return nil, &ConfigError{"Prefix", cfg.Prefix, err.Error()}
		}
	} else {
		if len(cfg.Scopes) == 0 {
			return nil, &ConfigError{"Scopes", "", "list at least one scope, or serve a prefix (ByPrefix)"}
		}
		if cfg.Prefix != "" {
			return nil, &ConfigError{"Prefix", cfg.Prefix, "a prefix needs ByPrefix"}
		}
	}
	seen := map[string]bool{}
	for _, s := range cfg.Scopes {
		if seen[s] {
			return nil, &ConfigError{"Scopes", s, "listed twice"}
		}
		seen[s] = true
	}
	// Every member is built from cfg.Member: check it once, on a scope
	// name of its own (New reads nothing).
	probeCfg := cfg.Member
	probeCfg.Scope = "group-config-check"
	// It never runs, so it registers no metrics (nothing would close them).
	probeCfg.MeterProvider = nil
	if _, err := New(q, probeCfg, handlers); err != nil {
		return nil, err
	}
	sc := cfg.Member.Scheduler
	executors := cfg.Member.Scheduler.Executors
	if executors == 0 {
		executors = scheduler.DefaultExecutors
	}
	if cfg.MaxProcessing == 0 {
		ahead := sc.ClaimAhead
		if ahead == 0 {
			ahead = scheduler.DefaultClaimAheadPerExecutor * executors
		}
		cfg.MaxProcessing = max(2*executors+max(ahead, 0), 1)
	}
	if cfg.MaxPerScope == 0 {
		cfg.MaxPerScope = cfg.MaxProcessing
	}
	pool, err := scheduler.NewPool(cfg.MaxProcessing, cfg.MaxPerScope)
	if err != nil {
		return nil, &ConfigError{"MaxPerScope", fmt.Sprint(cfg.MaxPerScope), err.Error()}
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"IdleProbeEvery", &cfg.IdleProbeEvery, controller.DefaultGenerationProbeEvery},
		{"QuietIdleProbeEvery", &cfg.QuietIdleProbeEvery, controller.DefaultQuietProbeEvery},
		{"IdleAfter", &cfg.IdleAfter, DefaultGroupIdleAfter},
	} {
		if *d.v == 0 {
			*d.v = d.def
		}
		if *d.v < 0 {
			return nil, &ConfigError{d.name, d.v.String(), "want a positive duration"}
		}
	}
	if cfg.Member.Owner == "" {
		cfg.Member.Owner = defaultOwner()
	}
	log := cfg.Member.Logger
	if log == nil {
		log = slog.Default()
	}
	clk := cfg.Member.Controller.Clock
	if clk == nil {
		clk = clock.Real()
	}
	cfg.Member.Controller.Clock, cfg.Member.Logger = clk, log
	g := &Group{cfg: cfg, q: q, handlers: maps.Clone(handlers), pool: pool, log: log.With("group", groupName(cfg)), clock: clk,
		scopes: map[string]*groupScope{}, probe: make(chan struct{}, 1)}
	g.described.Store(&describedState{}) // registration describes a group not quiet yet, with none abandoned
	return g, nil
}

// groupName says what the group serves, for its logs.
func groupName(cfg GroupConfig) string {
	if cfg.ByPrefix {
		return fmt.Sprintf("prefix %q", cfg.Prefix)
	}
	return fmt.Sprintf("%d scopes", len(cfg.Scopes))
}

// GroupStats is what a Group did.
type GroupStats struct {
	Scopes int // scopes served
	Active int // scopes whose member runs now
	// Activations and Deactivations count member starts and stops.
	Activations, Deactivations uint64
	// IdleProbes counts idle probes (each one statement per thousand
	// scopes); LiveChecks the live-work checks (two statements each) at
	// start, for new scopes, and of members that went quiet.
	IdleProbes, LiveChecks uint64
	// Quiet: the group's wake endpoint is healthy, so idle probes run every
	// QuietIdleProbeEvery.
	Quiet bool
	// Processing is the pool's rows held now.
	Processing int
}

// Stats reports the group's counters.
func (g *Group) Stats() GroupStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	st := GroupStats{Scopes: len(g.scopes), Activations: g.activations.Load(), Deactivations: g.deactivations.Load(),
		IdleProbes: g.probes.Load(), LiveChecks: g.liveChecks.Load(), Quiet: g.healthy, Processing: g.pool.Processing()}
	for _, gs := range g.scopes {
		if gs.w != nil {
			st.Active++
		}
	}
	return st
}

// Member returns the running member of scope (nil while the scope is idle
// or not served).
func (g *Group) Member(scope string) *Worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gs := g.scopes[scope]; gs != nil {
		return gs.w
	}
	return nil
}

// Wake tells the group work may be claimable in scope (its member starts
// if it was idle). Writes through the group's Queue announce themselves.
func (g *Group) Wake(scope string) { g.wake(scope, false, false, false) }

// ProbeNow runs an idle probe at once (tests and tools).
func (g *Group) ProbeNow() {
	select {
	case g.probe <- struct{}{}:
	default:
	}
}

// Run serves the scopes until ctx ends; members running then release
// their items, as a Worker's Run does, and the group's wake endpoint is
// removed before it returns (its own hub is closed; a Member.Wake.Shared
// hub keeps serving the others on it). A Group runs once.
func (g *Group) Run(ctx context.Context) error {
	if !g.ran.CompareAndSwap(false, true) {
		return errors.New("worker: Group.Run called twice; build a new Group")
	}
	marks, err := g.readMarks(ctx)
	if err != nil {
		return err
	}
	if !g.cfg.ByPrefix {
		if missing := g.missing(marks); len(missing) > 0 {
			return fmt.Errorf("worker: group: %w: %q", workqueue.ErrUnknownScope, missing)
		}
	}
	g.mu.Lock()
	g.runCtx = ctx
	for _, m := range marks {
		g.scopes[m.Scope] = &groupScope{id: m.Scope}
	}
	g.mu.Unlock()
	stopWakes, err := g.startWakes(ctx, scopeIDs(marks))
	if err != nil {
		return err
	}
	stopListening := g.q.OnAnnounce(func(n workqueue.Announcement) { g.wake(n.Scope, n.LookFar, n.Rewind, false) })
	g.log.Info("group started", "scopes", len(marks), "max_processing", g.cfg.MaxProcessing, "max_per_scope", g.cfg.MaxPerScope)
	g.survey(ctx, scopeIDs(marks))
	err = g.probeLoop(ctx)
	stopListening()
	g.mu.Lock()
	g.runCtx = nil // no member starts from here on: Wait below has every Add before it
	g.mu.Unlock()
	g.members.Wait() // every member saw ctx end and released its items
	stopWakes()
	g.log.Info("group stopped")
	return err
}

func scopeIDs(marks []workqueue.ScopeMark) []string {
	out := make([]string, len(marks))
	for i, m := range marks {
		out[i] = m.Scope
	}
	return out
}

// missing lists the configured scopes without a row.
func (g *Group) missing(marks []workqueue.ScopeMark) []string {
	have := map[string]bool{}
	for _, m := range marks {
		have[m.Scope] = true
	}
	var out []string
	for _, s := range g.cfg.Scopes {
		if !have[s] {
			out = append(out, s)
		}
	}
	return out
}

// readMarks reads the served scopes' marks: one statement per thousand.
func (g *Group) readMarks(ctx context.Context) ([]workqueue.ScopeMark, error) {
	g.probes.Add(1)
	if g.cfg.ByPrefix {
		return g.q.ScopeMarksWithPrefix(ctx, g.cfg.Prefix)
	}
	return g.q.ScopeMarks(ctx, g.cfg.Scopes)
}

// startWakes subscribes every served scope on the group's hub with one
// endpoint; without wakes (Member.Wake.Off, or a failed subscription) the
// group probes on IdleProbeEvery and members on their normal periods. stop
// closes the group's subscription, whenever it was made: here, or by the
// probe loop for the first scope found (a prefix with none at start, or a
// subscription that failed here). A shared hub outlives the group, so
// closing the hub cannot be what removes it.
func (g *Group) startWakes(ctx context.Context, scopes []string) (stop func(), err error) {
	wc := g.cfg.Member.Wake
	if wc.Off || len(scopes) == 0 && !g.cfg.ByPrefix {
		return func() {}, nil
	}
	hub, own, err := wc.open(g.q, g.log, g.clock)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.hub = hub
	g.mu.Unlock()
	stop = func() {
		g.mu.Lock()
		sub := g.sub
		g.hub, g.sub = nil, nil
		g.mu.Unlock()
		if sub != nil {
			if err := sub.Close(); err != nil {
				g.log.Warn("wake endpoint not removed (it expires by itself)", "err", err)
			}
		}
		if own {
			if err := hub.Close(); err != nil {
				g.log.Warn("closing the wake hub", "err", err)
			}
		}
	}
	if len(scopes) == 0 { // a prefix with no scope yet: subscribed once the probe finds one
		return stop, nil
	}
	if err := g.subscribe(ctx, hub, scopes); err != nil {
		g.log.Warn("wake endpoint not registered: other processes cannot wake this group; it probes on the normal period", "err", err)
	}
	return stop, nil
}

// subscribe registers the group's endpoint for scopes.
func (g *Group) subscribe(ctx context.Context, hub *wake.Hub, scopes []string) error {
	sub, err := hub.SubscribeScopes(ctx, scopes, wake.Handlers{
		WakeScope: g.peerWake,
		Health:    g.setHealthy,
		Describe:  g.describe,
	})
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.sub = sub
	g.mu.Unlock()
	return nil
}

// describe is what the group's endpoint rows say about the process.
func (g *Group) describe() workqueue.ProcessInfo {
	g.mu.Lock()
	quiet := g.healthy
	var abandoned int64
	for _, gs := range g.scopes {
		if gs.w != nil {
			abandoned += gs.w.sched.Stats().AbandonedRunning
		}
	}
	g.mu.Unlock()
	host, _ := os.Hostname()
	return workqueue.ProcessInfo{Host: host, PID: os.Getpid(), Owner: g.cfg.Member.Owner, Executors: g.cfg.Member.Scheduler.Executors,
		WorkTypes: sortedKeys(g.handlers), Quiet: quiet, AbandonedHandlers: abandoned}
}

// setHealthy records the endpoint's health and passes it to the members:
// quiet probe periods while wakes reach the process. Called with the
// subscription's lock held: it only stores.
func (g *Group) setHealthy(healthy bool) {
	g.mu.Lock()
	g.healthy = healthy
	var running []*Worker
	for _, gs := range g.scopes {
		if gs.w != nil {
			running = append(running, gs.w)
		}
	}
	g.mu.Unlock()
	for _, w := range running {
		w.ctrl.SetQuiet(healthy)
	}
}

// peerWake is the endpoint's WakeScope: another process's wake.
func (g *Group) peerWake(scope string, lookFar, rewind bool) { g.wake(scope, lookFar, rewind, true) }

// wake handles a wake naming scope: another process's (fromPeer), or an
// in-process announcement or Wake call.
func (g *Group) wake(scope string, lookFar, rewind, fromPeer bool) {
	g.mu.Lock()
	gs := g.scopes[scope]
	if gs == nil || g.runCtx == nil {
		g.mu.Unlock()
		return
	}
	gs.woken = true
	w, healthy := gs.w, g.healthy
	if w == nil {
		g.activateLocked(gs)
		g.mu.Unlock()
		return // a starting member claims at once
	}
	g.mu.Unlock()
	if fromPeer && healthy {
		w.ctrl.SetQuiet(true) // a peer's wake arrived: the path works again (as a Worker's own endpoint says)
	}
	if rewind {
		w.rewind()
	}
	if lookFar {
		w.ctrl.WakeLookFar()
	} else {
		w.ctrl.Wake()
	}
}

// survey checks which of scopes have live work (two statements each, a few
// at once) and starts their members; the others are idle at the mark read.
func (g *Group) survey(ctx context.Context, scopes []string) {
	work := make(chan string)
	var wg sync.WaitGroup
	for range min(surveyParallel, len(scopes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range work {
				g.settle(ctx, s)
			}
		}()
	}
	for _, s := range scopes {
		select {
		case work <- s:
		case <-ctx.Done():
		}
	}
	close(work)
	wg.Wait()
}

// settle checks one scope not running a member: live work starts it; none
// records the mark an idle probe compares with. A failed check starts it
// (its member finds out).
func (g *Group) settle(ctx context.Context, scope string) {
	g.liveChecks.Add(1)
	mark, live, err := g.q.ScopeLive(ctx, scope)
	if err != nil && ctx.Err() == nil {
		g.log.Warn("live-work check failed; starting the scope's member", "scope", scope, "err", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	gs := g.scopes[scope]
	if gs == nil || gs.w != nil || ctx.Err() != nil {
		return
	}
	if live || err != nil {
		g.activateLocked(gs)
		return
	}
	gs.mark = mark
}

// probeLoop reads the idle scopes' marks every probe period until ctx
// ends; a moved mark starts the scope's member, and with ByPrefix a new
// scope is subscribed and surveyed.
func (g *Group) probeLoop(ctx context.Context) error {
	t := g.clock.NewTimer()
	defer t.Stop()
	for {
		g.mu.Lock()
		every := g.cfg.IdleProbeEvery
		if g.healthy {
			every = g.cfg.QuietIdleProbeEvery
		}
		g.mu.Unlock()
		t.Reset(every)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
		case <-g.probe:
		}
		marks, err := g.readMarks(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			g.log.Warn("idle probe failed; trying again next period", "err", err)
			continue
		}
		var found []string
		g.mu.Lock()
		for _, m := range marks {
			gs := g.scopes[m.Scope]
			if gs == nil {
				gs = &groupScope{id: m.Scope}
				g.scopes[m.Scope] = gs
				found = append(found, m.Scope)
				continue
			}
			if gs.w == nil && !m.Equal(gs.mark) {
				g.activateLocked(gs)
			}
		}
		hub, sub := g.hub, g.sub
		g.mu.Unlock()
		if len(found) == 0 {
			continue
		}
		g.log.Info("new scopes found", "count", len(found))
		switch {
		case hub == nil:
		case sub == nil:
			err = g.subscribe(ctx, hub, found)
		default:
			err = sub.Add(ctx, found)
		}
		if err != nil && ctx.Err() == nil {
			g.log.Warn("wake endpoint not registered for new scopes: they are found by the idle probe", "err", err)
		}
		g.survey(ctx, found)
	}
}

// activateLocked starts scope's member; g.mu held.
func (g *Group) activateLocked(gs *groupScope) {
	ctx := g.runCtx
	if ctx == nil || ctx.Err() != nil || gs.w != nil {
		return
	}
	cfg := g.cfg.Member
	cfg.Scope = gs.id
	var built atomic.Pointer[Worker]
	member := g.pool.Join(func() {
		if w := built.Load(); w != nil {
			w.ctrl.CapacityFreed()
		}
	})
	cfg.Scheduler.Limiter = member
	w, err := New(g.q, cfg, g.handlers)
	if err != nil { // NewGroup built one from the same config
		member.Leave()
		g.log.Error("member not built", "scope", gs.id, "err", err)
		return
	}
	w.grouped = g
	built.Store(w)
	gs.w, gs.woken = w, false
	g.activations.Add(1)
	memberCtx, stop := context.WithCancel(ctx)
	g.members.Add(1)
	go g.runMember(memberCtx, stop, gs, w, member)
}

// runMember runs a member until its scope has no live work left (or ctx
// ends), checking after IdleAfter without a processing row or a wake.
func (g *Group) runMember(ctx context.Context, stop context.CancelFunc, gs *groupScope, w *Worker, member *scheduler.Member) {
	defer g.members.Done()
	defer stop()
	ended := make(chan error, 1)
	go func() { ended <- w.Run(ctx) }()
	t := g.clock.NewTimer()
	defer t.Stop()
	every := g.cfg.IdleAfter
	for {
		t.Reset(every)
		select {
		case err := <-ended:
			if err != nil && ctx.Err() == nil {
				g.log.Error("member stopped on an error; the scope starts again at its next wake or idle probe", "scope", gs.id, "err", err)
			}
			// A zero mark: the next idle probe starts it again (not a wake:
			// a member failing at once would spin).
			g.retire(gs, member, workqueue.ScopeMark{}, false)
			return
		case <-t.C():
		}
		g.mu.Lock()
		woken := gs.woken
		gs.woken = false
		g.mu.Unlock()
		if woken || member.Processing() > 0 {
			every = g.cfg.IdleAfter
			continue
		}
		g.liveChecks.Add(1)
		mark, live, err := g.q.ScopeLive(ctx, gs.id)
		if err != nil || live {
			every = min(2*every, g.cfg.QuietIdleProbeEvery)
			continue
		}
		g.mu.Lock()
		if gs.woken { // a wake came during the check: keep running
			g.mu.Unlock()
			every = g.cfg.IdleAfter
			continue
		}
		g.mu.Unlock()
		stop()
		if err := <-ended; err != nil {
			g.log.Warn("member stopped on an error", "scope", gs.id, "err", err)
		}
		g.retire(gs, member, mark, true)
		return
	}
}

// retire records a stopped member: the scope is idle at mark; with
// wakeRestarts a wake that came while it stopped starts it again.
func (g *Group) retire(gs *groupScope, member *scheduler.Member, mark workqueue.ScopeMark, wakeRestarts bool) {
	member.Leave()
	g.mu.Lock()
	defer g.mu.Unlock()
	gs.w, gs.mark = nil, mark
	g.deactivations.Add(1)
	if gs.woken && wakeRestarts {
		g.activateLocked(gs)
	}
}

// Scopes returns the scopes the group serves now, sorted.
func (g *Group) Scopes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Sorted(maps.Keys(g.scopes))
}
