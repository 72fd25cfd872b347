package ingress

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
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
	// Backstop is how often an idle class loop looks for receipts it was
	// not woken for: ones accepted by another process (default 15s). In
	// this process, Accept wakes the loops at once, and a backoff or an
	// abandoned lease arms an exact timer.
	Backstop time.Duration
	// Wakes, when set, subscribes the router to the scope on this wake
	// hub: a process whose Inbox announces accepts to its own hub
	// (Inbox.AnnounceTo) wakes this router within milliseconds. While the
	// subscription is healthy the loops look on their own only every
	// QuietBackstop; a look that finds receipts no wake announced (an
	// accepting process that does not announce) drops back to Backstop
	// until the next wake arrives.
	Wakes *wake.Hub
	// QuietBackstop replaces Backstop while wakes are healthy (default 20m).
	QuietBackstop time.Duration
	// MissedWakeGrace is how long after a quiet look found receipts a wake
	// may still arrive and explain them (a look can read between another
	// process's accept and its datagram) before the look counts a missed
	// wake (default 1s, as controller.DefaultMissedWakeGrace; negative
	// judges at once).
	MissedWakeGrace time.Duration
	// Logger receives database errors the loops retry past, and missed
	// wakes (never a body); nil: slog.Default().
	Logger *slog.Logger
	// Clock runs the loops' timers (sleeps, backoffs, the backstop, the
	// missed-wake grace), as the controller's do. Default clock.Real().
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

// turnBackoff paces a loop's turns after failed turns (a database error):
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
	MissedWakes  int64 // looks on its own that found receipts no wake announced
	// ExplainedLooks counts looks of its own, after a quiet sleep, that
	// found receipts and that a wake then explained (it arrived during the
	// look or within MissedWakeGrace after it).
	ExplainedLooks int64
	Quiet          bool // wakes are healthy: the loops look every QuietBackstop
}

// Router claims due receipts of one scope and materializes them.
type Router struct {
	in  *Inbox
	qu  *workqueue.Queue
	q   *gen.Queries
	cfg RouterConfig

	wake map[string]chan struct{} // per class, buffered 1
	rank map[string]int           // a class's place in Classes
	prio *priority

	floorMu sync.Mutex
	floor   map[string]time.Time // per class: where its pending scan starts (see ReceiptCandidates)

	turns, claimed, reclaimed, materialized, events, transactions atomic.Int64
	retried, failed, leaseLost, errs, wakes, missedWakes          atomic.Int64
	explainedLooks                                                atomic.Int64

	// Cross-process wakes (RouterConfig.Wakes): healthy is the
	// subscription's health; trusted is cleared by a missed wake and set
	// again by the next wake. Quiet while both hold. trustMu orders a wake
	// (wakes and trusted) against a look deciding it found a missed wake:
	// a wake landing between that look's check and its clearing trusted
	// would otherwise be undone, and no later wake may come to set it.
	healthy, trusted atomic.Bool
	trustMu          sync.Mutex

	// beforeCommit, when set (tests), runs inside a materializing
	// transaction after its last statement and before its commit.
	beforeCommit func(receiptIDs []int64)
	// idle, when set (tests), runs when a class loop, its turn having
	// found nothing, starts to sleep for d: a test that must know its
	// next receipt is found by a look of the loop's own waits for it.
	idle func(class string, d time.Duration)
}

// NewRouter returns a router that enqueues through qu (whose database is
// the Inbox's). Run starts it.
func (in *Inbox) NewRouter(qu *workqueue.Queue, cfg RouterConfig) (*Router, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &Router{
		in: in, qu: qu, q: in.q, cfg: cfg, wake: map[string]chan struct{}{}, rank: map[string]int{}, floor: map[string]time.Time{},
		prio: newPriority(len(cfg.Classes), max(cfg.BatchTime, 100*time.Millisecond)),
	}
	for i, cl := range cfg.Classes {
		r.wake[cl] = make(chan struct{}, 1)
		r.rank[cl] = i
	}
	return r, nil
}

// Stats returns the router's counters.
func (r *Router) Stats() RouterStats {
	return RouterStats{
		Turns: r.turns.Load(), Claimed: r.claimed.Load(), Reclaimed: r.reclaimed.Load(),
		Materialized: r.materialized.Load(), Events: r.events.Load(), Transactions: r.transactions.Load(),
		Retried: r.retried.Load(), Failed: r.failed.Load(), LeaseLost: r.leaseLost.Load(), Errors: r.errs.Load(),
		Wakes: r.wakes.Load(), MissedWakes: r.missedWakes.Load(), ExplainedLooks: r.explainedLooks.Load(), Quiet: r.quiet(),
	}
}

// Notify wakes the loop of class (every loop when class is empty), as an
// Accept in this process does.
func (r *Router) Notify(class string) {
	for cl, ch := range r.wake {
		if class == "" || cl == class {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// Run routes until ctx ends, one loop per class, and returns ctx's error.
// Database errors do not end it: the loop logs and counts them
// (Stats().Errors) and tries again after a backoff (a claim it could not
// finish is taken over once its lease ends).
func (r *Router) Run(ctx context.Context) error {
	stop := r.in.onAccepted(func(scope, class string) {
		if scope == r.cfg.Scope {
			r.Notify(class)
		}
	})
	defer stop()
	if r.cfg.Wakes != nil {
		r.trusted.Store(true)
		sub, err := r.cfg.Wakes.Subscribe(ctx, r.cfg.Scope, wake.Handlers{
			Wake: func(bool) {
				r.trustMu.Lock()
				r.wakes.Add(1)
				r.trusted.Store(true)
				r.trustMu.Unlock()
				r.Notify("")
			},
			Health: func(healthy bool) { r.healthy.Store(healthy) },
		})
		if err != nil {
			return fmt.Errorf("ingress: subscribe router of %s to wakes: %w", r.cfg.Scope, err)
		}
		defer sub.Close() //nolint:errcheck // best effort: the row expires with its TTL
	}
	var wg sync.WaitGroup
	for _, cl := range r.cfg.Classes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.loop(ctx, cl)
		}()
	}
	wg.Wait()
	return ctx.Err()
}

func (r *Router) loop(ctx context.Context, class string) {
	clk := r.cfg.Clock
	timer := clk.NewTimer()
	defer timer.Stop()
	failures := int32(0)
	// While its turns come back full (a backlog), the class stays ahead of
	// later classes between turns too, not only during them.
	rank, ahead := r.rank[class], false
	defer func() {
		if ahead {
			r.prio.leave(rank)
		}
	}()
	lastFront := clk.Now()
	// lookedAlone: the last sleep was a quiet one and ended at the
	// backstop, not by a wake; wakesAtSleep is the wake count when it
	// began. Its look found a missed wake only if no wake arrived from
	// then to the end of the look (see missedWake).
	lookedAlone, wakesAtSleep := false, int64(0)
	for ctx.Err() == nil {
		if clk.Now().Sub(lastFront) >= r.backstop() {
			// Once per Backstop the scan starts from the front: it finds
			// a receipt that committed later than the straggler window
			// behind one already consumed (however busy the class is).
			r.resetFloor(class)
			lastFront = clk.Now()
		}
		n, err := r.Turn(ctx, class)
		full := n >= r.cfg.BatchReceipts
		if full != ahead {
			if full {
				r.prio.enter(rank)
			} else {
				r.prio.leave(rank)
			}
			ahead = full
		}
		if err != nil && ctx.Err() == nil {
			r.errs.Add(1)
			failures++
			r.cfg.Logger.Warn("ingress: router turn failed; retrying", "scope", r.cfg.Scope, "class", class, "err", err)
			r.sleep(ctx, timer, turnBackoff.Next(int(failures)), class)
			continue
		}
		failures = 0
		if n > 0 && lookedAlone {
			since := wakesAtSleep // the loop moves on and counts again
			judge := func() {
				if r.missedWake(since) {
					r.cfg.Logger.Info("ingress: router found receipts no wake announced; looking every Backstop until the next wake",
						"scope", r.cfg.Scope, "class", class, "backstop", r.cfg.Backstop, "grace", r.cfg.MissedWakeGrace)
				}
			}
			if r.cfg.MissedWakeGrace < 0 {
				judge()
			} else {
				// A wake within the grace may still explain what the
				// look found: judge then, without holding up the loop.
				grace := clk.NewTimer()
				grace.Reset(r.cfg.MissedWakeGrace)
				go func() {
					defer grace.Stop()
					select {
					case <-grace.C():
						judge()
					case <-ctx.Done():
					}
				}()
			}
		}
		lookedAlone = false
		if n > 0 {
			continue // more may be due: a backlog, or a retry whose backoff is over
		}
		quiet := r.quiet()
		backstop := r.backstop()
		wait, err := r.nextDue(ctx, class, backstop)
		if err != nil {
			if ctx.Err() == nil {
				r.errs.Add(1)
				r.cfg.Logger.Warn("ingress: router could not read its next due time; looking again in a second", "scope", r.cfg.Scope, "class", class, "err", err)
			}
			wait = time.Second
		}
		// Counted before the sleep: a wake that arrives as the timer
		// fires (the select may take either) or while the look runs
		// tells that look its receipts may have been announced.
		wakesAtSleep = r.wakes.Load()
		if r.idle != nil {
			r.idle(class, wait)
		}
		// Only a quiet sleep's look can find a missed wake: while not
		// quiet the loop already looks every Backstop (wakes
		// distrusted, or the subscription unhealthy and possibly missing
		// them).
		lookedAlone = !r.sleep(ctx, timer, wait, class) && wait == backstop && quiet
	}
}

// missedWake books a look of the loop's own, after a quiet sleep that
// began at wake count wakesAtSleep, that found receipts: when no wake
// arrived from that sleep's start to the grace's end after the look and
// the router is still quiet, no wake
// announced them (an accepting process does not announce), so the loops
// look every Backstop again until a wake proves the path. A wake that
// arrived meanwhile may have been for what the look found: the look cannot
// tell, and counts nothing; the router stays as that wake left it.
func (r *Router) missedWake(wakesAtSleep int64) bool {
	r.trustMu.Lock()
	defer r.trustMu.Unlock()
	if r.wakes.Load() != wakesAtSleep {
		r.explainedLooks.Add(1)
		return false
	}
	if !r.quiet() {
		return false
	}
	r.missedWakes.Add(1)
	r.trusted.Store(false)
	return true
}

// sleep waits for d, a wake of class (woken), or ctx's end.
func (r *Router) sleep(ctx context.Context, timer clock.Timer, d time.Duration, class string) (woken bool) {
	timer.Reset(d)
	select {
	case <-timer.C():
	case <-r.wake[class]:
		woken = true
	case <-ctx.Done():
		woken = true // not a look of its own
	}
	timer.Stop() // discards a fire not received
	return woken
}

// quiet: wakes from other processes are healthy and trusted.
func (r *Router) quiet() bool { return r.healthy.Load() && r.trusted.Load() }

// backstop is how long an idle loop waits before looking on its own.
func (r *Router) backstop() time.Duration {
	if r.quiet() {
		return r.cfg.QuietBackstop
	}
	return r.cfg.Backstop
}

// nextDue is how long the loop of class may sleep after a turn that found
// nothing: until its earliest retry or live lease's end (measured on the
// database clock), at most Backstop.
func (r *Router) nextDue(ctx context.Context, class string, backstop time.Duration) (time.Duration, error) {
	heads, err := r.q.NextReceiptDue(ctx, gen.NextReceiptDueParams{
		ScopeID: r.cfg.Scope, RouteClass: class, WithinMicros: backstop.Microseconds(),
	})
	if err != nil {
		return 0, fmt.Errorf("ingress: next due receipt of %s/%s: %w", r.cfg.Scope, class, err)
	}
	wait := backstop
	for _, micros := range heads {
		wait = min(wait, max(time.Duration(micros)*time.Microsecond, 0))
	}
	return wait, nil
}

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
// later than this is found at the class's next Backstop, whose scan starts
// from the front.
const StragglerWindow = 2 * time.Second

// scanFrom is the oldest due time class's pending scan reads from: the
// zero floor (a new router, or one reset) reads from the front.
var scanFromFront = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)

func (r *Router) scanFrom(class string) time.Time {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	if f, ok := r.floor[class]; ok {
		return f
	}
	return scanFromFront
}

// consumed moves class's floor to StragglerWindow before the newest due
// time a claim took from the pending range.
func (r *Router) consumed(class string, due time.Time) {
	r.floorMu.Lock()
	defer r.floorMu.Unlock()
	if f := due.Add(-StragglerWindow); f.After(r.floor[class]) {
		r.floor[class] = f
	}
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
