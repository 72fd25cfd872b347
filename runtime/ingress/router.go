package ingress

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/backoff"
	"github.com/laneq/laneq/internal/scanfloor"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Claimed is a receipt a router holds: what a RouteFunc turns into events.
type Claimed struct {
	Admitted
	Body    []byte
	Attempt int32 // 1 on the first claim; counts claims that died with their router too
	Token   int64 // the claim's fencing token
}

// RouteFunc turns a claimed receipt into the events (and their work) to
// enqueue. It must be deterministic: a receipt whose router died is routed
// again, and events are deduplicated by idempotency key, so the same
// receipt must give the same keys. An event without an IdempotencyKey gets
// "receipt:<receipt id>:<index>"; every event's ReceiptID is set to the
// receipt. Return Terminal(...) for input no retry can mend, Transient(...)
// or any other error to retry after a backoff. No events: the receipt is
// materialized as nothing (a ping). A panic fails the receipt at once with
// class RoutePanicClass (the router logs the stack and keeps running).
type RouteFunc func(ctx context.Context, r Claimed) ([]workqueue.Event, error)

// RouterConfig configures a Router. Zero values take the defaults.
type RouterConfig struct {
	Scope string
	// Classes are the route classes this router claims, each by its own
	// loop from its own index range, in priority order: while a class's
	// loop is in a turn, the loops of the classes after it hold their next
	// transaction back (at most BatchTime), so an interactive class listed
	// before a bulk one waits for at most the one bulk transaction already
	// in flight, however large the bulk backlog. Default: [DefaultClass].
	Classes []string
	Route   RouteFunc
	// Owner names this router in claim_owner; unique per router instance
	// (default host-pid-random). Each class loop claims as Owner/class.
	Owner string
	// Lease is how long a claim holds its receipts before another router
	// may take them over (default 30s).
	Lease time.Duration
	// BatchReceipts bounds the receipts one claim takes (default 32).
	BatchReceipts int
	// BatchEvents bounds the events one materializing transaction writes
	// (default 512); a receipt with more goes alone.
	BatchEvents int
	// BatchTime bounds the time one claim spends in RouteFunc before it
	// materializes what it has routed (default 2s); the rest of the claim
	// is routed in the next transaction.
	BatchTime time.Duration
	// MaxAttempts: a receipt claimed this many times without
	// materializing is failed (default 10).
	MaxAttempts int32
	// Backoff is the wait before a retry after the attempt-th claim failed
	// (default: 1s doubling to 5m, ±20% jitter).
	Backoff func(attempt int32) time.Duration
	// Backstop is how often a class probes for receipts it was not woken
	// for: ones accepted by another process, or committed behind its scan
	// floor (default 15s). A probe is one statement, the heads of the
	// class's claim ranges; only when they changed does a claim turn
	// follow, scanning from the front. In this process, Accept wakes the
	// class at once, and a backoff or an abandoned lease arms an exact
	// timer. At least 10ms.
	Backstop time.Duration
	// Wakes, when set, subscribes the router to the scope on this wake
	// hub: a process whose Inbox announces accepts to its own hub
	// (Inbox.AnnounceTo) wakes this router within milliseconds. While the
	// subscription is healthy the classes probe only every QuietBackstop;
	// a quiet probe whose turn finds receipts no wake announced (an
	// accepting process that does not announce) drops back to Backstop
	// until the next wake arrives.
	Wakes *wake.Hub
	// QuietBackstop replaces Backstop while wakes are healthy (default
	// 20m, at least 10ms).
	QuietBackstop time.Duration
	// MissedWakeGrace is how long after a quiet probe's turn found
	// receipts a wake may still arrive and explain them (a probe can read
	// between another process's accept and its datagram) before it counts
	// a missed wake (default 1s, as controller.DefaultMissedWakeGrace;
	// negative judges at once).
	MissedWakeGrace time.Duration
	// Logger receives database errors the loops retry past, and missed
	// wakes (never a body); nil: slog.Default().
	Logger *slog.Logger
	// Clock runs the classes' controllers (the probe, the exact due timer,
	// the missed-wake grace, the backoff after an error). Default
	// clock.Real().
	Clock clock.Clock
}

// Defaults of RouterConfig.
const (
	DefaultRouterLease    = 30 * time.Second
	DefaultBatchReceipts  = 32
	DefaultBatchEvents    = 512
	DefaultBatchTime      = 2 * time.Second
	DefaultMaxAttempts    = 10
	DefaultRouterBackstop = 15 * time.Second
	DefaultQuietBackstop  = 20 * time.Minute
)

func (c RouterConfig) withDefaults() (RouterConfig, error) {
	if err := checkKey("scope", c.Scope, true, 128, false); err != nil {
		return c, err
	}
	if c.Route == nil {
		return c, &InvalidError{Field: "Route", Reason: "missing"}
	}
	if len(c.Classes) == 0 {
		c.Classes = []string{DefaultClass}
	}
	for _, cl := range c.Classes {
		if err := checkKey("class", cl, true, 64, false); err != nil {
			return c, err
		}
	}
	if sorted := slices.Sorted(slices.Values(c.Classes)); len(slices.Compact(sorted)) != len(c.Classes) {
		return c, &InvalidError{Field: "Classes", Reason: "a class appears twice"}
	}
	if c.Owner == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = crand.Read(b[:])
		c.Owner = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if err := checkKey("owner", c.Owner, true, 128-65, false); err != nil {
		return c, err
	}
	setDefault(&c.Lease, DefaultRouterLease)
	setDefault(&c.BatchReceipts, DefaultBatchReceipts)
	setDefault(&c.BatchEvents, DefaultBatchEvents)
	setDefault(&c.BatchTime, DefaultBatchTime)
	setDefault(&c.MaxAttempts, DefaultMaxAttempts)
	setDefault(&c.Backstop, DefaultRouterBackstop)
	setDefault(&c.QuietBackstop, DefaultQuietBackstop)
	setDefault(&c.MissedWakeGrace, controller.DefaultMissedWakeGrace)
	if c.Backoff == nil {
		c.Backoff = defaultBackoff
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	switch {
	case c.Lease < time.Millisecond:
		return c, &InvalidError{Field: "Lease", Reason: "under a millisecond"}
	case c.BatchReceipts < 1 || c.BatchReceipts > 1024:
		return c, &InvalidError{Field: "BatchReceipts", Reason: "out of range 1..1024"}
	case c.BatchEvents < 1 || c.BatchEvents > 100_000:
		return c, &InvalidError{Field: "BatchEvents", Reason: "out of range 1..100000"}
	case c.BatchTime < 0 || c.Backstop < 0 || c.QuietBackstop < 0 || c.MaxAttempts < 0:
		return c, &InvalidError{Field: "RouterConfig", Reason: "a negative bound"}
	}
	return c, nil
}

func setDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// receiptBackoff is Backoff's default: 1s doubling to 5m, ±20%.
var receiptBackoff = backoff.Policy{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.2}

func defaultBackoff(attempt int32) time.Duration { return receiptBackoff.Next(int(attempt)) }

// turnBackoff paces a class controller's runs after a failed turn (a database error):
// 100ms doubling to 5s, ±20%.
var turnBackoff = backoff.Policy{Initial: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 0.2}

// RouterStats counts what a router did since it started.
type RouterStats struct {
	Turns        int64 // claim turns that found candidates
	Claimed      int64 // receipts claimed (reclaims of abandoned leases included)
	Reclaimed    int64 // claims of a receipt claimed before (a router died, froze or failed)
	Materialized int64 // receipts marked materialized
	Events       int64 // events those receipts became (duplicates included)
	Transactions int64 // materializing transactions committed
	Retried      int64 // transient failures set to retry after a backoff
	Failed       int64 // terminal failures recorded
	LeaseLost    int64 // receipts this router held when another took them over
	Errors       int64 // turns that ended in a database error
	Wakes        int64 // wakes from other processes (Wakes)
	MissedWakes  int64 // quiet probes whose turn found receipts no wake announced (summed over classes)
	// ExplainedLooks counts quiet probes whose turn found receipts that a
	// wake then explained (it arrived during the turn or within
	// MissedWakeGrace after it).
	ExplainedLooks int64
	Quiet          bool // wakes are healthy and trusted: every class probes every QuietBackstop
}

// Router claims due receipts of one scope and materializes them. Each
// route class is a controller.Source driven by its own
// controller.Controller: the same loop, probe, quiet mode and missed-wake
// judgement as a worker's, on RouterConfig.Clock.
type Router struct {
	in  *Inbox
	qu  *workqueue.Queue
	q   *gen.Queries
	cfg RouterConfig

	classes []*classSource // in Classes order
	rank    map[string]int // a class's place in Classes
	prio    *priority
	running atomic.Bool

	floorMu sync.Mutex
	floor   map[string]scanfloor.Floor // per class: where its pending scan starts (see ReceiptCandidates)

	turns, claimed, reclaimed, materialized, events, transactions atomic.Int64
	retried, failed, leaseLost, errs, wakes                       atomic.Int64

	// beforeCommit, when set (tests), runs inside a materializing
	// transaction after its last statement and before its commit.
	beforeCommit func(receiptIDs []int64)
}

// NewRouter returns a router that enqueues through qu (whose database is
// the Inbox's). Run starts it.
func (in *Inbox) NewRouter(qu *workqueue.Queue, cfg RouterConfig) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router{
		in: in, qu: qu, q: in.q, cfg: cfg, rank: map[string]int{}, floor: map[string]scanfloor.Floor{},
		prio: newPriority(len(cfg.Classes), max(cfg.BatchTime, 100*time.Millisecond)),
	}
	for i, cl := range cfg.Classes {
		r.rank[cl] = i
		s := &classSource{r: r, class: cl, rank: i}
		if s.ctrl, err = controller.New(s, controller.Config{
			Clock:                cfg.Clock,
			GenerationProbeEvery: cfg.Backstop,
			QuietProbeEvery:      cfg.QuietBackstop,
			// The probe is the class's only look of its own: a change of
			// the heads it reads makes the next turn scan from the front
			// (see classSource.Generation), which is what a reconciling
			// backstop would do, for one statement when nothing changed.
			ReconcileEvery:     -1,
			QuietBackstopEvery: cfg.QuietBackstop,
			MaintainEvery:      -1,
			MissedWakeGrace:    cfg.MissedWakeGrace,
			Logger:             cfg.Logger,
		}); err != nil {
			return nil, &InvalidError{Field: "RouterConfig", Reason: err.Error()}
		}
		r.classes = append(r.classes, s)
	}
	return r, nil
}

// Stats returns the router's counters.
func (r *Router) Stats() RouterStats {
	st := RouterStats{
		Turns: r.turns.Load(), Claimed: r.claimed.Load(), Reclaimed: r.reclaimed.Load(),
		Materialized: r.materialized.Load(), Events: r.events.Load(), Transactions: r.transactions.Load(),
		Retried: r.retried.Load(), Failed: r.failed.Load(), LeaseLost: r.leaseLost.Load(), Errors: r.errs.Load(),
		Wakes: r.wakes.Load(), Quiet: true,
	}
	for _, s := range r.classes {
		cs := s.ctrl.Stats()
		st.MissedWakes += int64(cs.MissedWakes)
		st.ExplainedLooks += int64(cs.ExplainedProbes)
		st.Quiet = st.Quiet && s.ctrl.Quiet()
	}
	return st
}

// Notify wakes the loop of class (every loop when class is empty), as an
// Accept in this process does.
func (r *Router) Notify(class string) {
	for _, s := range r.classes {
		if class == "" || s.class == class {
			s.ctrl.Wake()
		}
	}
}

// Settle returns once every class loop has handled every wake sent and
// every timer fired before the call (controller.Controller.Settle): a test
// that must know the router is idle, past its first turn, waits for it.
func (r *Router) Settle(ctx context.Context) error {
	for _, s := range r.classes {
		if err := s.ctrl.Settle(ctx); err != nil {
			return fmt.Errorf("ingress: settle router class %s: %w", s.class, err)
		}
	}
	return nil
}

// ErrRouterRunning reports a second concurrent Run of one Router.
var ErrRouterRunning = errors.New("ingress: router already running")

// Run routes until ctx ends, one controller per class, and returns ctx's
// error. Database errors do not end it: a class's controller logs and
// counts them (Stats().Errors) and runs again after a backoff (100ms
// doubling to 5s; a claim it could not finish is taken over once its
// lease ends).
func (r *Router) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return ErrRouterRunning
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := r.in.onAccepted(func(scope, class string) {
		if scope == r.cfg.Scope {
			r.Notify(class)
		}
	})
	defer stop()
	if r.cfg.Wakes != nil {
		var subscription atomic.Pointer[wake.Subscription]
		sub, err := r.cfg.Wakes.Subscribe(ctx, r.cfg.Scope, wake.Handlers{
			Wake: func(bool) {
				r.wakes.Add(1)
				healthy := false
				if s := subscription.Load(); s != nil {
					healthy = s.Healthy()
				}
				for _, s := range r.classes {
					s.ctrl.Wake()
					if healthy {
						s.ctrl.SetQuiet(true) // a wake arrived: the path works again
					}
				}
			},
			Health: func(healthy bool) {
				for _, s := range r.classes {
					s.ctrl.SetQuiet(healthy)
				}
			},
		})
		if err != nil {
			return fmt.Errorf("ingress: subscribe router of %s to wakes: %w", r.cfg.Scope, err)
		}
		subscription.Store(sub)
		defer func() {
			for _, s := range r.classes {
				s.ctrl.SetQuiet(false)
			}
		}()
		defer sub.Close() //nolint:errcheck // best effort: the row expires with its TTL
	}
	var wg sync.WaitGroup
	errs := make([]error, len(r.classes))
	for i, s := range r.classes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.setAhead(false)
			errs[i] = s.ctrl.RunRestarting(ctx, controller.Restart{
				Min: turnBackoff.Initial, Max: turnBackoff.Max, Jitter: turnBackoff.Jitter,
				Restarted: func(err error, after time.Duration) {
					r.cfg.Logger.Warn("ingress: router class stopped on an error; running again", "scope", r.cfg.Scope, "class", s.class, "err", err, "after", after)
				},
			})
			if errs[i] != nil {
				cancel() // cannot happen for a router's sources; end the others rather than run half a router
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ingress: router of %s: %w", r.cfg.Scope, err)
	}
	return ctx.Err()
}

// classSource is one route class as the controller sees it. Its fields
// are touched only by its controller's loop.
type classSource struct {
	r     *Router
	class string
	rank  int
	ctrl  *controller.Controller
	// ahead: the last turn came back full (a backlog), so the class stays
	// ahead of later classes between its turns too, not only during them.
	ahead bool
	// probed is the last probe's value; front asks the next turn to scan
	// from the front because the probe saw the heads change.
	probed uint64
	front  bool
	// turnBegan is when the last turn began (real time: the lookup
	// measures it against the database's).
	turnBegan time.Time
}

// Ready: the Inbox checked the session when it was built, and the probe
// that follows reads the table.
func (s *classSource) Ready(context.Context) error { return nil }

// Reconcile makes the next turn scan from the front: start-up, and a run
// after an error.
func (s *classSource) Reconcile(context.Context) error {
	s.r.resetFloor(s.class)
	return nil
}

// Claim runs one Turn. A failed turn may have claimed receipts, but a
// claim only leases them: the lease ends and a router (this one too)
// takes them over, so the controller stays usable and runs again after a
// backoff.
func (s *classSource) Claim(ctx context.Context, _ controller.Turn) (controller.ClaimBatch, error) {
	if s.front {
		s.front = false
		s.r.resetFloor(s.class)
	}
	s.turnBegan = time.Now()
	n, err := s.r.Turn(ctx, s.class)
	full := n >= s.r.cfg.BatchReceipts
	s.setAhead(full && err == nil)
	if err != nil {
		if ctx.Err() == nil {
			s.r.errs.Add(1)
		}
		return controller.ClaimBatch{Started: n}, fmt.Errorf("%w: %w", controller.ErrSourceOperationRecoverable, err)
	}
	return controller.ClaimBatch{Started: n, More: full}, nil
}

func (s *classSource) setAhead(full bool) {
	if full == s.ahead {
		return
	}
	if full {
		s.r.prio.enter(s.rank)
	} else {
		s.r.prio.leave(s.rank)
	}
	s.ahead = full
}

// NextWorkAt is the class's earliest retry or live lease's end, measured
// on the database clock and placed on the controller's by its delay, no
// further ahead than the probe, which looks again.
//
// For leases it also looks back to when the last turn began, with a slack
// (workqueue.LookBackSince), as the worker's lookup does: a dead router's
// lease that ran out after that turn's scan is claimable now, yet no
// lookup that sees only the future and no announcement would report it,
// so it would wait for a probe (20 minutes in quiet mode). It is reported
// as now. The turn it causes takes it (the lookup and the scan read the
// same class's expired leases), so the next lookup does not see it again.
func (s *classSource) NextWorkAt(ctx context.Context) (time.Time, bool, error) {
	within := s.r.cfg.Backstop
	if s.ctrl.Quiet() {
		within = s.r.cfg.QuietBackstop
	}
	lookBack := workqueue.LookBackSince(s.turnBegan)
	heads, err := s.r.q.NextReceiptDue(ctx, gen.NextReceiptDueParams{
		ScopeID: s.r.cfg.Scope, RouteClass: s.class, WithinMicros: within.Microseconds(),
		LeaseFromMicros: -lookBack.Microseconds(),
	})
	if err != nil {
		s.r.errs.Add(1)
		return time.Time{}, false, fmt.Errorf("ingress: next due receipt of %s/%s: %w", s.r.cfg.Scope, s.class, err)
	}
	if len(heads) == 0 {
		return time.Time{}, false, nil
	}
	wait := time.Duration(slices.Min(heads)) * time.Microsecond
	return s.r.cfg.Clock.Now().Add(max(wait, 0)), true, nil
}

// Generation reads the heads of the class's two claim ranges from the
// front (ReceiptCandidates from the zero floor): the first due pending
// receipt and the expired leases. A change (an accept, a retry come due,
// a router that died, a receipt that committed behind the floor) makes a
// claim turn, which scans from the front.
func (s *classSource) Generation(ctx context.Context) (uint64, error) {
	heads, err := s.r.q.ReceiptCandidates(ctx, gen.ReceiptCandidatesParams{
		ScopeID: s.r.cfg.Scope, RouteClass: s.class, FromTime: scanfloor.Front, Limit: 1,
	})
	if err != nil {
		return 0, fmt.Errorf("ingress: probe receipts of %s/%s: %w", s.r.cfg.Scope, s.class, err)
	}
	h := fnv.New64a()
	for _, c := range heads {
		_, _ = fmt.Fprintf(h, "%d@%d;", c.ReceiptID, c.NextAttemptAt.UnixMicro())
	}
	g := uint64(0)
	if len(heads) > 0 {
		g = h.Sum64() | 1 // never 0, the value of "nothing due"
	}
	if g != s.probed {
		s.probed, s.front = g, true
	}
	return g, nil
}

// Capacity: a turn runs inline, so a class can always take one.
func (s *classSource) Capacity(bool) int { return 1 }

// Turn runs one claim turn for class: claims up to BatchReceipts due
// receipts, routes them and materializes them in bounded transactions,
// and returns how many it claimed (BatchReceipts: more may be due). Run
// calls it in a loop; it is exported for tests and for callers that drive
// routing themselves.
func (r *Router) Turn(ctx context.Context, class string) (claimed int, err error) {
	if _, ok := r.rank[class]; !ok {
		return 0, &InvalidError{Field: "class", Reason: fmt.Sprintf("%q is not one of the router's classes %q", class, r.cfg.Classes)}
	}
	held, err := r.claim(ctx, class)
	if err != nil || len(held) == 0 {
		return 0, err
	}
	r.turns.Add(1)
	claimed = len(held)
	rank := r.rank[class]
	r.prio.enter(rank)
	defer r.prio.leave(rank)
	for len(held) > 0 {
		batch, rest, err := r.routeBatch(ctx, held)
		if err != nil {
			return claimed, err
		}
		r.prio.wait(ctx, rank)
		if err := r.materialize(ctx, batch); err != nil {
			return claimed, err
		}
		held = rest
	}
	return claimed, nil
}

// StragglerWindow is how far behind the newest due time a router consumed
// its next scan starts: an accept or retry whose statement began before
// that receipt's but committed after it is still found. One committing
// later than this is found after the class's next probe, whose turn starts
// from the front. The floor is the worker Claimer's (internal/scanfloor).
const StragglerWindow = scanfloor.DefaultStragglerWindow

// scanFrom is the oldest due time class's pending scan reads from: a class
// without a floor (a new router, or one reset) reads from the front.
func (r *Router) scanFrom(class string) time.Time {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	return r.floor[class].Start(StragglerWindow)
}

// consumed moves class's floor forward to the newest due time a claim
// took from the pending range.
func (r *Router) consumed(class string, due time.Time) {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	f := r.floor[class]
	f.Advance(due)
	r.floor[class] = f
}

func (r *Router) resetFloor(class string) {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	delete(r.floor, class)
}

// claim takes due receipts of class: a scan of the class's two ranges,
// the row CAS, and a read of what the CAS took (ClaimedReceipts).
func (r *Router) claim(ctx context.Context, class string) ([]Claimed, error) {
	cands, err := r.q.ReceiptCandidates(ctx, gen.ReceiptCandidatesParams{
		ScopeID: r.cfg.Scope, RouteClass: class, FromTime: r.scanFrom(class), Limit: int32(r.cfg.BatchReceipts),
	})
	if err != nil {
		return nil, fmt.Errorf("ingress: scan due receipts of %s/%s: %w", r.cfg.Scope, class, err)
	}
	if len(cands) == 0 {
		return nil, nil
	}
	// Two ranges' heads (due pending, abandoned leases): the oldest due first.
	slices.SortFunc(cands, func(a, b gen.ReceiptCandidatesRow) int {
		if c := a.NextAttemptAt.Compare(b.NextAttemptAt); c != 0 {
			return c
		}
		return cmp.Compare(a.ReceiptID, b.ReceiptID)
	})
	cands = cands[:min(len(cands), r.cfg.BatchReceipts)]
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.ReceiptID
	}
	owner := r.cfg.Owner + "/" + class
	n, err := r.q.ClaimReceipts(ctx, gen.ClaimReceiptsParams{ClaimOwner: store.NullString(owner), LeaseMicros: r.cfg.Lease.Microseconds(), ReceiptIDs: ids})
	if err != nil {
		return nil, fmt.Errorf("ingress: claim %d receipts of %s/%s: %w", len(ids), r.cfg.Scope, class, err)
	}
	if n == 0 {
		return nil, nil // other routers took them all
	}
	// Only a claim that took receipts moves the floor: one that failed
	// (or took nothing) leaves its candidates pending, and a floor past
	// them would hide the older ones until the class's next front scan.
	// The newest due time taken sets it: the routing branch's entries
	// (expired leases) lie before now too, and a floor past them changes
	// nothing for that branch, which has none. Candidates other routers
	// took meanwhile are theirs; lying behind the floor hides nothing.
	r.consumed(class, cands[len(cands)-1].NextAttemptAt)
	rows, err := r.q.ClaimedReceipts(ctx, gen.ClaimedReceiptsParams{ReceiptIDs: ids, ClaimOwner: store.NullString(owner)})
	if err != nil {
		// The claims stand; their lease ends and they are taken over.
		return nil, fmt.Errorf("ingress: read %d claimed receipts of %s/%s: %w", n, r.cfg.Scope, class, err)
	}
	out := make([]Claimed, len(rows))
	for i, row := range rows {
		out[i] = Claimed{
			Admitted: Admitted{
				ID: row.ReceiptID, Scope: r.cfg.Scope, DeliveryID: row.DeliveryID, Method: row.HTTPMethod,
				RouteKey: row.RouteKey, ContentType: row.ContentType, EventKind: row.EventKind.String,
				CorrelationID: row.CorrelationID.String, Class: row.RouteClass,
				ReceivedAt: row.ReceivedAt, AcceptedAt: row.AcceptedAt,
			},
			Body: row.Body, Attempt: row.AttemptCount, Token: row.ClaimToken,
		}
		copy(out[i].PayloadHash[:], row.PayloadHash)
		if row.AttemptCount > 1 {
			r.reclaimed.Add(1)
		}
	}
	// In due order (the scan's), not the read's primary-key order: receipts
	// of one class materialize in the order they were accepted.
	rank := make(map[int64]int, len(ids))
	for i, id := range ids {
		rank[id] = i
	}
	slices.SortFunc(out, func(a, b Claimed) int { return cmp.Compare(rank[a.ID], rank[b.ID]) })
	r.claimed.Add(int64(len(out)))
	return out, nil
}

// routed is a receipt with the events its route gave.
type routed struct {
	c      Claimed
	events []workqueue.Event
}

// routeBatch routes claimed receipts from the front until the batch holds
// BatchEvents events (a receipt that would cross the bound, or repeats an
// idempotency key of the batch, starts the next batch; one with more than
// the bound goes alone) or BatchTime has passed, recording the
// failures on the way. It returns the batch and the receipts left.
func (r *Router) routeBatch(ctx context.Context, claimed []Claimed) ([]routed, []Claimed, error) {
	start := r.cfg.Clock.Now()
	var batch []routed
	events := 0
	keys := map[string]bool{}
	for i, c := range claimed {
		if len(batch) > 0 && r.cfg.Clock.Now().Sub(start) >= r.cfg.BatchTime {
			return batch, claimed[i:], nil
		}
		if c.Attempt > r.cfg.MaxAttempts {
			r.fail(ctx, c, "attempts_exhausted", fmt.Sprintf("claimed %d times without materializing (routers died or froze holding it)", c.Attempt-1))
			continue
		}
		evs, err := r.route(ctx, c)
		if err != nil {
			if ctx.Err() != nil {
				return nil, nil, ctx.Err() // not the receipt's fault: its lease ends and it is taken over
			}
			r.routeFailed(ctx, c, err)
			continue
		}
		for k := range evs {
			evs[k].ReceiptID = c.ID
			if evs[k].IdempotencyKey == "" {
				evs[k].IdempotencyKey = "receipt:" + strconv.FormatInt(c.ID, 10) + ":" + strconv.Itoa(k)
			}
		}
		// A receipt that would cross the event bound, or repeats a fact of
		// the batch (one enqueue refuses a key twice), starts the next
		// batch: routed again then, deterministically.
		if len(batch) > 0 && (events+len(evs) > r.cfg.BatchEvents || repeats(keys, evs)) {
			return batch, claimed[i:], nil
		}
		for _, ev := range evs {
			keys[ev.IdempotencyKey] = true
		}
		batch = append(batch, routed{c: c, events: evs})
		events += len(evs)
	}
	return batch, nil, nil
}

// RoutePanicClass is the error class of a receipt whose RouteFunc
// panicked: a bug in the route, which no retry mends, so the receipt fails
// at once (its summary holds the panic value; the log, the stack).
const RoutePanicClass = "route_panic"

// route calls the RouteFunc, turning a panic into a terminal error:
// unrecovered, one bad delivery would end the whole process, and its
// receipt would end it again after every lease until its attempts ran
// out.
func (r *Router) route(ctx context.Context, c Claimed) (evs []workqueue.Event, err error) {
	defer func() {
		if v := recover(); v != nil {
			r.cfg.Logger.Error("ingress: RouteFunc panicked; the receipt fails",
				"scope", r.cfg.Scope, "class", c.Class, "receipt", c.ID, "delivery", c.DeliveryID,
				"error_class", RoutePanicClass, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
			evs, err = nil, Terminal(RoutePanicClass, fmt.Errorf("RouteFunc panicked: %v", v))
		}
	}()
	return r.cfg.Route(ctx, c)
}

func repeats(keys map[string]bool, evs []workqueue.Event) bool {
	for _, ev := range evs {
		if keys[ev.IdempotencyKey] {
			return true
		}
	}
	return false
}

// routeFailed records a RouteFunc failure: terminal at once, transient
// after a backoff until the attempts run out.
func (r *Router) routeFailed(ctx context.Context, c Claimed, err error) {
	class, summary := classOf(err), summarize(err)
	if IsTerminal(err) || c.Attempt >= r.cfg.MaxAttempts {
		if !IsTerminal(err) {
			summary = sanitize(fmt.Sprintf("attempt %d of %d: %s", c.Attempt, r.cfg.MaxAttempts, summary), maxSummary)
		}
		r.fail(ctx, c, class, summary)
		return
	}
	n, werr := r.q.RetryReceipt(ctx, gen.RetryReceiptParams{
		BackoffMicros: r.cfg.Backoff(c.Attempt).Microseconds(), ErrorClass: store.NullString(class),
		ErrorSummary: store.NullString(summary), ReceiptID: c.ID, ClaimToken: c.Token,
	})
	r.count(n, werr, &r.retried)
}

func (r *Router) fail(ctx context.Context, c Claimed, class, summary string) {
	n, err := r.q.FailReceipt(ctx, gen.FailReceiptParams{
		ErrorClass: store.NullString(class), ErrorSummary: store.NullString(sanitize(summary, maxSummary)),
		ReceiptID: c.ID, ClaimToken: c.Token,
	})
	r.count(n, err, &r.failed)
}

// count books a fenced single-receipt write: 1 row is done, 0 rows a lost
// lease; an error leaves the claim to end with its lease.
func (r *Router) count(n int64, err error, done *atomic.Int64) {
	switch {
	case err != nil:
		r.errs.Add(1)
	case n == 0:
		r.leaseLost.Add(1)
	default:
		done.Add(1)
	}
}

// materialize enqueues a batch's events and marks its receipts
// materialized in one transaction. A batch the queue refuses (invalid
// events, a scope that does not exist) is split to find the receipt at
// fault, which alone is retried or failed.
func (r *Router) materialize(ctx context.Context, batch []routed) error {
	if len(batch) == 0 {
		return nil
	}
	err := r.materializeTx(ctx, batch)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, workqueue.ErrCommitUnknown):
		// Committed or not: if not, the leases end and the receipts are
		// taken over; if so, they are materialized. Nothing to undo.
		return err
	case !errors.Is(err, workqueue.ErrInvalid) && !errors.Is(err, workqueue.ErrUnknownScope):
		return err // a database error: the claims end with their leases
	case len(batch) > 1:
		for _, one := range batch {
			if err := r.materialize(ctx, []routed{one}); err != nil {
				return err
			}
		}
		return nil
	case errors.Is(err, workqueue.ErrInvalid):
		r.fail(ctx, batch[0].c, "invalid_events", summarize(err))
		return nil
	default: // unknown scope: it may be about to be created
		r.routeFailed(ctx, batch[0].c, Transient("unknown_scope", err))
		return nil
	}
}

func (r *Router) materializeTx(ctx context.Context, batch []routed) error {
	ids := make([]int64, len(batch))
	for i, b := range batch {
		ids[i] = b.c.ID
	}
	var held []routed
	var events int
	err := r.qu.InTx(ctx, func(ctx context.Context, tx *workqueue.Tx) error {
		q := r.qu.Store().InTx(tx.SQL()) // qu's pool runs the transaction
		locked, err := q.LockReceiptFences(ctx, ids)
		if err != nil {
			return fmt.Errorf("ingress: lock %d receipts: %w", len(ids), err)
		}
		tokens := make(map[int64]int64, len(locked))
		for _, l := range locked {
			if l.RouterStatus == StatusRouting {
				tokens[l.ReceiptID] = l.ClaimToken
			}
		}
		held = held[:0]
		var evs []workqueue.Event
		for _, b := range batch {
			if t, ok := tokens[b.c.ID]; ok && t == b.c.Token {
				held = append(held, b)
				evs = append(evs, b.events...)
			}
		}
		if len(held) == 0 {
			return nil
		}
		var out []workqueue.EnqueuedEvent
		if len(evs) > 0 {
			if out, err = tx.Enqueue(ctx, r.cfg.Scope, evs); err != nil {
				return err
			}
		}
		marks := make(map[string][]int64, len(held))
		heldIDs := make([]int64, len(held))
		var fences []byte
		k := 0
		for i, h := range held {
			heldIDs[i] = h.c.ID
			eventIDs := make([]int64, len(h.events))
			for j := range h.events {
				eventIDs[j] = out[k].EventID
				k++
			}
			marks[strconv.FormatInt(h.c.ID, 10)] = eventIDs
			if i > 0 {
				fences = append(fences, ',')
			}
			fences = strconv.AppendInt(fences, h.c.ID, 10)
			fences = append(fences, ':')
			fences = strconv.AppendInt(fences, h.c.Token, 10)
		}
		byReceipt, err := json.Marshal(marks)
		if err != nil {
			return err
		}
		n, err := q.MarkReceiptsMaterialized(ctx, gen.MarkReceiptsMaterializedParams{
			EventIDsByReceipt: string(byReceipt), ReceiptIDs: heldIDs, Fences: string(fences),
		})
		if err != nil {
			return fmt.Errorf("ingress: mark %d receipts materialized: %w", len(held), err)
		}
		if n != int64(len(held)) { // cannot happen under the row locks; refuse to commit half
			return fmt.Errorf("ingress: marked %d of %d locked receipts materialized", n, len(held))
		}
		events = len(evs)
		if r.beforeCommit != nil {
			r.beforeCommit(heldIDs)
		}
		return nil
	})
	if err != nil {
		return err
	}
	r.leaseLost.Add(int64(len(batch) - len(held)))
	if len(held) > 0 {
		r.transactions.Add(1)
		r.materialized.Add(int64(len(held)))
		r.events.Add(int64(events))
	}
	return nil
}
