package workqueue

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/scanfloor"
	"github.com/laneq/laneq/internal/store"
)

// Claimed is an item this process now owns until its lease ends.
type Claimed struct {
	Scope       string
	WorkID      int64
	EventID     int64
	WorkType    string
	QueueClass  string
	LaneOrdinal int64 // position in the scope's admission order and in its lanes
	Attempt     int32 // attempts including this one
	SafeRetries int32 // consecutive safe retries before this attempt
	Reclaimed   bool  // taken over from an expired lease
	// DueFor is how long the item had been claimable when this claim's
	// scan read it, by the database clock: since its due time, or since
	// its lease ran out for a reclaim. Claims take due order, so a claim's
	// largest is the oldest due age it saw (the dashboard's history).
	DueFor time.Duration
	// Dependency is what the item declared it waits for (at enqueue, or
	// when an earlier attempt waited); nil for none. A worker rechecks it
	// before any work and waits again when none of its keys is satisfied.
	Dependency *Dependency
	// ProjectionKey names the projection whose generation this is (see
	// Work.Projection); empty for per-event work. A projection generation's
	// input is ProjectionInput, not only Event.
	ProjectionKey string
	// RateKey is Work.RateKey: what a rate limit per key counts the item's
	// start under (empty: none).
	RateKey string
	// Event is the item's event, read with the claim (nil when a claim
	// path did not read it: LoadEvent then).
	Event *StoredEvent
	Lease Lease
}

// LogValue names the item in log lines (what an operator needs to find it:
// laneq item show WORK_ID), never its payload.
func (c *Claimed) LogValue() slog.Value {
	attrs := []slog.Attr{slog.Int64("work_id", c.WorkID), slog.String("work_type", c.WorkType),
		slog.String("queue_class", c.QueueClass), slog.Int("attempt", int(c.Attempt))}
	if c.Lease.lanes != nil && c.Lease.lanes.source.Valid {
		attrs = append(attrs, slog.String("source_lane", c.Lease.lanes.source.String))
	}
	if c.Lease.lanes != nil && c.Lease.lanes.target.Valid {
		attrs = append(attrs, slog.String("target_lane", c.Lease.lanes.target.String))
	}
	return slog.GroupValue(attrs...)
}

// Lease is the proof of ownership every lease-fenced call presents.
type Lease struct {
	WorkID int64
	Token  int64
	// lanes is what finishing needs to promote followers, known from the
	// claim; nil (a Lease built by hand) makes finish read it.
	lanes *laneIdentity
}

// laneIdentity places an item in its lanes.
type laneIdentity struct {
	workID         int64
	scope          string
	generation     int64
	ordinal        int64
	source, target sql.NullString
	projection     sql.NullString // the projection's key: its finish hands off to a queued successor
	// chain counts the takes in a row that led to this claim: 0 for a
	// claim turn's, one more than the finished item's for a follower taken
	// on promote (see MaxTakenInARow).
	chain int
}

// ClaimRequest asks for up to Max items.
type ClaimRequest struct {
	// QueueClasses the executor may run; at least one.
	QueueClasses []string
	// Preferred classes (a subset of QueueClasses) are tried first; the rest
	// fill whatever slots remain (work-conserving). Empty keeps plain claim
	// order across all classes.
	Preferred []string
	// WorkTypes the executor can run; at least one.
	WorkTypes []string
	// Max items to claim, at least 1.
	Max int
	// StaleOnly claims only items whose lease expired (pressure mode): it
	// never falls back to fresh work.
	StaleOnly bool
	// StaleClasses are the classes whose expired leases this claim takes
	// over, whatever QueueClasses says: reclaim is how a dead process's items
	// come back, so any executor with a free slot may run them. Default
	// QueueClasses. A worker passes every class it serves.
	StaleClasses []string
}

// ClaimerConfig tunes a Claimer. Zero fields take the defaults.
type ClaimerConfig struct {
	// StaleScanEvery is how often a claim also looks for expired leases when
	// nothing else asks for it (NoteDue, a stale scan cut short by Max, and
	// StaleOnly claims always look). Default Lease/4.
	StaleScanEvery time.Duration
	// ScanWindow is the starting width, in database time, of a class's scan
	// window. Once a scan found rows, the width follows the class's row
	// density: twice the database time the rows a claim wants took in the
	// last scan (a scan that came up short counts as at least one row over
	// its whole width, so it widens), so a statement's range holds about a
	// claim's worth of due rows, a backlog costs one statement per claim and
	// an idle class one. Default 1s.
	ScanWindow time.Duration
	// StragglerWindow is how far before the database time of the scan that
	// set its floor each scan starts (at the floor when that is earlier, as
	// in a backlog). A row whose transition set run_after just before a
	// claimer's scan but committed after it (a finish transaction still
	// committing, a TiDB server whose clock runs behind) sorts up to this
	// much before that scan's time. Default 2s.
	StragglerWindow time.Duration
	// Now is the process clock used only to pace StaleScanEvery; it never
	// decides leases or due times. Default time.Now.
	Now func() time.Time
}

// Claim-scan window bounds.
const (
	minScanWindow = time.Millisecond
	maxScanWindow = time.Hour
)

// Claimer claims for one scope on behalf of one owner, keeping a scan cursor
// per queue class.
//
// Claim order is due order (run_after, then lane ordinal). Every transition
// into pending (enqueue, promotion, release, retry coming due) places the
// row at or after the database's current time, so a row that becomes
// claimable sorts after everything a claimer already consumed. A cursor's
// floor (internal/scanfloor, as the receipt router's) can therefore start
// each scan past the MVCC delete markers of earlier claims without missing
// later work, whichever process made it claimable; the StragglerWindow
// covers transitions still committing when a scan ran, and an enqueue's
// rows are covered by the scope's admitted_at (see ClaimCandidates). A generation change or Rewind restarts every
// cursor from the front of its range. Claim ownership is still decided only
// by the row CAS, so a cursor can delay work, never duplicate or reorder a
// lane.
//
// A Claimer is safe for concurrent use, but one claim scan per scope per
// process is the intended shape (see the scheduler).
type Claimer struct {
	qu    *Queue
	scope string
	owner string
	cfg   ClaimerConfig

	refPrefix string        // owner plus a random tag: claim-turn references
	turns     atomic.Uint64 // claim turns taken, for claim-turn references

	mu         sync.Mutex
	epoch      uint64 // bumped when every cursor restarts
	observed   bool   // a scope row was read
	generation int64  // active generation seen last
	ordinal    int64  // next enqueue ordinal seen last
	admittedAt time.Time
	paused     pausedSet          // the scope's paused classes, as read last
	fresh      map[string]*cursor // queue class -> pending-range cursor
	stale      map[string]*cursor // queue class -> processing-range cursor
	lastStale  time.Time
	staleNow   bool // look for expired leases on the next claim

	// The scope's (queue class, work type) pairs as last read, and the
	// scope's next enqueue ordinal read before them. Rows of a pair exist
	// only once the enqueue that registered it committed, and that enqueue
	// moved the ordinal; pairs are never removed.
	kinds        map[WorkKind]bool
	kindsOrdinal int64
	kindsRead    bool

	// Contention with other claimers (see contention.go).
	spread, block, calm, lossRun int
	lost                         uint64
}

// cursor is where a class's next scan starts and how wide it reaches.
type cursor struct {
	// floor is where the class was consumed through; a pending-range
	// floor records the database time of the scan that set it (see
	// scanfloor.Floor.Start), an expired-lease floor does not.
	floor  scanfloor.Floor
	perRow time.Duration // database time per claimable row past the floor, as last seen; 0 when unknown
	start  time.Duration // the first width, before perRow is known (ClaimerConfig.ScanWindow)
}

// NewClaimer returns a Claimer for scope; owner (at most 96 bytes) names
// this process in lease rows, followed by a claim-turn reference (for
// operators; ownership itself is the token).
func (qu *Queue) NewClaimer(scope, owner string, cfg ClaimerConfig) (*Claimer, error) {
	if err := validScope(scope); err != nil {
		return nil, err
	}
	if owner == "" || len(owner) > 96 {
		return nil, invalidf("owner must be 1..96 bytes, got %d", len(owner))
	}
	tag := make([]byte, 4)
	if _, err := rand.Read(tag); err != nil {
		return nil, fmt.Errorf("workqueue: claimer tag: %w", err)
	}
	if cfg.StaleScanEvery == 0 {
		cfg.StaleScanEvery = qu.cfg.Lease / 4
	}
	if cfg.ScanWindow == 0 {
		cfg.ScanWindow = time.Second
	}
	if cfg.StragglerWindow == 0 {
		cfg.StragglerWindow = scanfloor.DefaultStragglerWindow
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.StaleScanEvery < 0 || cfg.StragglerWindow < 0:
		return nil, invalidf("StaleScanEvery and StragglerWindow must not be negative")
	case cfg.ScanWindow < minScanWindow || cfg.ScanWindow > maxScanWindow:
		return nil, invalidf("ScanWindow must be within [%s, %s], got %s", minScanWindow, maxScanWindow, cfg.ScanWindow)
	}
	return &Claimer{
		qu: qu, scope: scope, owner: owner, cfg: cfg, refPrefix: fmt.Sprintf("%s#%x", owner, tag),
		fresh: map[string]*cursor{}, stale: map[string]*cursor{},
	}, nil
}

// LeasePrefix starts the lease_owner of every lease this claimer takes:
// its owner and random tag, then "#" and the claim turn. Operators count a
// process's leases by it (ProcessInfo.LeasePrefix).
func (c *Claimer) LeasePrefix() string { return c.refPrefix + "#" }

// Rewind makes the next scan of every class start from the front of its
// range: what the reconciliation backstop does, to find anything a cursor
// may have passed (a transition committed later than StragglerWindow after
// it ran, or a TiDB server whose clock ran further behind).
func (c *Claimer) Rewind() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.restartLocked()
}

func (c *Claimer) restartLocked() {
	c.epoch++
	clear(c.fresh)
	clear(c.stale)
	c.staleNow = true
}

// NoteDue says a due time passed (the controller's due timer fired): the
// next claim looks for expired leases whatever StaleScanEvery says.
func (c *Claimer) NoteDue() {
	c.mu.Lock()
	c.staleNow = true
	c.mu.Unlock()
}

// Floor is the database time the next scan of class starts from (before
// StragglerWindow) and whether the class has a floor yet (diagnostics,
// tests).
func (c *Claimer) Floor(class string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.fresh[class]; cur != nil && cur.floor.Known() {
		return cur.floor.At(), true
	}
	return time.Time{}, false
}

func (r ClaimRequest) validate() error {
	if len(r.QueueClasses) == 0 || len(r.WorkTypes) == 0 {
		return invalidf("claim needs at least one queue class and one work type")
	}
	if r.Max < 1 {
		return invalidf("claim Max must be at least 1, got %d", r.Max)
	}
	for _, p := range r.Preferred {
		if !slices.Contains(r.QueueClasses, p) {
			return invalidf("preferred class %q is not among the claimable classes %v", p, r.QueueClasses)
		}
	}
	return nil
}

// staleClasses are the classes whose expired leases the claim takes over.
func (r ClaimRequest) staleClasses() []string {
	if len(r.StaleClasses) == 0 {
		return r.QueueClasses
	}
	return r.StaleClasses
}

// tiers orders the classes: preferred first, then the rest; one tier when
// there is no preference.
func (r ClaimRequest) tiers() [][]string {
	if len(r.Preferred) == 0 {
		return [][]string{r.QueueClasses}
	}
	var rest []string
	for _, c := range r.QueueClasses {
		if !slices.Contains(r.Preferred, c) {
			rest = append(rest, c)
		}
	}
	if len(rest) == 0 {
		return [][]string{r.Preferred}
	}
	return [][]string{r.Preferred, rest}
}

// ClaimStats counts what one Claim call did.
type ClaimStats struct {
	Scanned    int // candidate rows returned by scans
	Statements int // fresh candidate statements run (scan windows)
	StaleScans int // stale candidate statements run (one per class)
	LostCAS    int // candidates another claimer took first
	// ContendedRounds counts the extra scan-and-CAS rounds run because
	// candidates were lost (at most claimRounds-1 per Claim).
	ContendedRounds int
	// KindReads counts reads of the scope's work kinds (see
	// Claimer.tiersWithWork).
	KindReads     int
	Fenced        int // rows won but released unrun: the generation moved during the CAS
	ExpiredToDead int // expired leases sent to dead with their attempt budget spent
	// ExpiredCancelled counts expired leases of cancelled items, ended
	// skipped instead of taken over (see Queue.Cancel).
	ExpiredCancelled int
	Resolved         int // writes whose reply was lost, resolved by reading back
}

// Claim claims up to req.Max items: expired leases first (when a stale scan
// is due, or always with StaleOnly), then fresh due lane heads, preferred
// classes first. Losing a CAS to another claimer is normal and only counted.
// Items won are returned even with an error; an error wrapping
// ErrNothingCommitted changed nothing durable. The compare-and-swap and the
// read-back of what it won run under a context the caller cannot cancel, so
// a cancellation cannot leave rows claimed by nobody.
func (c *Claimer) Claim(ctx context.Context, req ClaimRequest) ([]Claimed, ClaimStats, error) {
	r := c.ClaimMany(ctx, []ClaimRequest{req})[0]
	return r.Items, r.Stats, r.Err
}

// ClaimResult is what ClaimMany won for one request.
type ClaimResult struct {
	Items []Claimed // at most the request's Max; returned even with Err
	// Stats of the claim that served the request. Requests served together
	// share one claim: its stats are on the first of them only.
	Stats ClaimStats
	// Contended: the request came back short while its claim lost
	// candidates to other claimers, so due work remains.
	Contended bool
	Err       error
}

// ClaimMany claims for several requests (a scheduler turn's executor
// shapes, in its order) with one scope read. Requests that would scan the
// same classes (after dropping classes with no work) in the same order,
// for the same work types and stale mode, are served by one claim of their
// summed Max, whose items are handed out in request order: one scan, one
// CAS and one read-back instead of one per request. Each claim otherwise
// behaves as Claim; at most one of them looks for expired leases when a
// stale scan is merely due.
func (c *Claimer) ClaimMany(ctx context.Context, reqs []ClaimRequest) []ClaimResult {
	out := make([]ClaimResult, len(reqs))
	var valid []int
	for i, req := range reqs {
		if out[i].Err = req.validate(); out[i].Err == nil {
			valid = append(valid, i)
		}
	}
	if len(valid) == 0 {
		return out
	}
	// One point read for all: the active generation to scan, the clock
	// that bounds every scan, and the admission state.
	sc, err := c.readScope(ctx)
	if err != nil {
		for _, i := range valid {
			out[i].Err = nothingCommitted(err)
		}
		return out
	}
	var kindStats ClaimStats
	groups := c.groupRequests(ctx, sc, reqs, valid, &kindStats)
	staleDue := c.staleDue()
	for g, grp := range groups {
		stale := grp.req.StaleOnly || staleDue
		staleDue = staleDue && !stale // one stale scan serves the turn
		items, stats, err := c.claimMerged(ctx, sc, grp.req, grp.tiers, stale)
		if g == 0 {
			stats.KindReads += kindStats.KindReads
		}
		contended := err == nil && len(items) < grp.req.Max && stats.LostCAS > 0
		for k, i := range grp.members {
			n := min(len(items), reqs[i].Max)
			out[i] = ClaimResult{Items: items[:n:n], Err: err, Contended: contended && n < reqs[i].Max}
			if k == 0 {
				out[i].Stats = stats
			}
			items = items[n:]
		}
	}
	return out
}

// mergedClaim is requests served by one claim: req with their summed Max.
type mergedClaim struct {
	req     ClaimRequest
	tiers   [][]string // req's tiers without classes that never had work
	members []int      // indexes of the requests served, in order
}

// groupRequests merges the valid requests that one claim can serve: the
// same tiers of classes with work, work types, stale mode and stale
// classes. Groups keep the order of their first request.
func (c *Claimer) groupRequests(ctx context.Context, sc gen.GetScopeRow, reqs []ClaimRequest, valid []int, stats *ClaimStats) []mergedClaim {
	var groups []mergedClaim
	sameClaim := func(a, b ClaimRequest, at, bt [][]string) bool {
		return a.StaleOnly == b.StaleOnly && slices.Equal(a.WorkTypes, b.WorkTypes) &&
			slices.Equal(a.staleClasses(), b.staleClasses()) && slices.EqualFunc(at, bt, slices.Equal)
	}
	paused := c.pausedClasses()
next:
	for _, i := range valid {
		req := reqs[i]
		tiers := paused.dropFromTiers(c.tiersWithWork(ctx, sc, req, stats))
		for g := range groups {
			if sameClaim(groups[g].req, req, groups[g].tiers, tiers) {
				groups[g].req.Max += req.Max
				groups[g].members = append(groups[g].members, i)
				continue next
			}
		}
		groups = append(groups, mergedClaim{req: req, tiers: tiers, members: []int{i}})
	}
	return groups
}

// claimMerged runs one claim under the scope read sc: expired leases first
// when stale, then fresh due lane heads by tiers.
func (c *Claimer) claimMerged(ctx context.Context, sc gen.GetScopeRow, req ClaimRequest, tiers [][]string, stale bool) ([]Claimed, ClaimStats, error) {
	var stats ClaimStats
	var out []Claimed
	if stale {
		got, err := c.reclaim(ctx, sc, c.pausedClasses().drop(req.staleClasses()), req.WorkTypes, req.Max, &stats)
		out = append(out, got...) // items already won are the caller's even on error
		if err != nil || req.StaleOnly {
			return out, stats, err
		}
	}
	// A lost CAS proves the class had due work another claimer took first:
	// the cursor has moved past those rows, so another round reads the next
	// ones. Without it a contended claim would come back short, which the
	// caller takes to mean nothing more is due, and this process would sit
	// idle on a backlog until its next event.
	for round := 0; round < claimRounds && len(out) < req.Max; round++ {
		lost := stats.LostCAS
		for _, tier := range tiers {
			if len(out) >= req.Max {
				break
			}
			got, err := c.claimTier(ctx, sc, tier, req.WorkTypes, req.Max-len(out), &stats)
			out = append(out, got...)
			if err != nil {
				return out, stats, err
			}
		}
		if stats.LostCAS == lost {
			break
		}
		stats.ContendedRounds++
	}
	return out, stats, nil
}

// tiersWithWork drops from req's tiers the classes the scope has never had
// work of (of req.WorkTypes): scanning them would read an empty range, a
// statement each. The pairs are read again (one primary-key prefix read)
// only when a class would be dropped and an enqueue committed since the
// last read, so a class that gets its first work is scanned from the
// first claim that sees that enqueue's ordinal. A failed read drops
// nothing.
func (c *Claimer) tiersWithWork(ctx context.Context, sc gen.GetScopeRow, req ClaimRequest, stats *ClaimStats) [][]string {
	tiers := req.tiers()
	filter := func() (out [][]string, dropped bool) {
		c.mu.Lock()
		defer c.mu.Unlock()
		for _, tier := range tiers {
			var kept []string
			for _, class := range tier {
				if c.hasWorkLocked(class, req.WorkTypes) {
					kept = append(kept, class)
				} else {
					dropped = true
				}
			}
			if len(kept) > 0 {
				out = append(out, kept)
			}
		}
		return out, dropped || !c.kindsRead
	}
	out, dropped := filter()
	c.mu.Lock()
	current := c.kindsRead && c.kindsOrdinal == sc.NextEnqueueOrdinal
	c.mu.Unlock()
	if !dropped || current {
		return out
	}
	kinds, err := c.qu.WorkKinds(ctx, c.scope)
	if err != nil {
		return tiers
	}
	stats.KindReads++
	known := make(map[WorkKind]bool, len(kinds))
	for _, k := range kinds {
		known[k] = true
	}
	c.mu.Lock()
	c.kinds, c.kindsRead, c.kindsOrdinal = known, true, sc.NextEnqueueOrdinal
	c.mu.Unlock()
	out, _ = filter()
	return out
}

func (c *Claimer) hasWorkLocked(class string, workTypes []string) bool {
	for _, t := range workTypes {
		if c.kinds[WorkKind{QueueClass: class, WorkType: t}] {
			return true
		}
	}
	return false
}

// claimRounds bounds the scan-and-CAS rounds of one Claim: the first, and
// more only while candidates keep being lost to other claimers.
const claimRounds = 4

// readScope reads the scope row and folds it into the cursors (observe).
func (c *Claimer) readScope(ctx context.Context) (gen.GetScopeRow, error) {
	sc, err := c.qu.q.GetScope(ctx, c.scope)
	if errors.Is(err, sql.ErrNoRows) {
		return sc, fmt.Errorf("%w: %q", ErrUnknownScope, c.scope)
	}
	if err != nil {
		return sc, fmt.Errorf("workqueue: read scope %q: %w", c.scope, err)
	}
	// A paused_classes value no PauseClass wrote fails the turn loudly
	// rather than claim work an operator may have meant to pause.
	paused, err := ParsePausedClasses(sc.PausedClasses)
	if err != nil {
		return sc, fmt.Errorf("%w (scope %q)", err, c.scope)
	}
	c.observe(sc, paused)
	return sc, nil
}

// observe folds a scope read into the cursors: a new generation restarts
// them; an enqueue committed since the last read (the ordinal moved) lowers
// every fresh floor to the admitted_at seen last. Enqueues take the scope
// lock in turn, so every enqueue this read newly shows took it after the one
// the last read showed had committed: their rows are due no earlier than
// that one's admitted_at, even if a cursor moved past their run_after while
// they were still being written.
func (c *Claimer) observe(sc gen.GetScopeRow, paused []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = newPausedSet(paused)
	switch {
	case !c.observed || sc.ActiveGeneration != c.generation:
		c.restartLocked()
	case sc.NextEnqueueOrdinal != c.ordinal:
		for _, cur := range c.fresh {
			cur.floor.Lower(c.admittedAt)
		}
	}
	c.observed, c.generation, c.ordinal, c.admittedAt = true, sc.ActiveGeneration, sc.NextEnqueueOrdinal, sc.AdmittedAt
}

func (c *Claimer) staleDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if !c.staleNow && now.Sub(c.lastStale) < c.cfg.StaleScanEvery {
		return false
	}
	c.staleNow, c.lastStale = false, now
	return true
}

// cursorFor returns a copy of the cursor of class in m and the epoch it
// belongs to.
func (c *Claimer) cursorFor(m map[string]*cursor, class string) (cursor, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := m[class]
	if cur == nil {
		cur = &cursor{start: c.cfg.ScanWindow}
		m[class] = cur
	}
	return *cur, c.epoch
}

// settle moves the cursor of class after its leading candidates were
// consumed: through the end of a range the scan read to exhaustion when
// every candidate it returned was consumed, else to the first candidate not
// consumed, and takes the row density the scan measured. Nothing moves when every cursor
// restarted since the scan began (epoch).
func (c *Claimer) settle(m map[string]*cursor, class string, epoch uint64, scan classScan, consumed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := m[class]
	if cur == nil || c.epoch != epoch {
		return
	}
	cur.perRow = scan.perRow
	var at time.Time
	switch {
	case consumed == len(scan.rows) && !scan.through.IsZero():
		at = scan.through
	case consumed < len(scan.rows):
		// To the first row not consumed (one left to another claimer's
		// block, or held back), even below the floor: every row before it
		// in the scan was consumed, and the next scan reads it again.
		at = scan.rows[consumed].RunAfter
	case consumed > 0:
		at = scan.rows[consumed-1].RunAfter
	default:
		return
	}
	cur.floor.Set(at, scan.seen)
}

// classScan is what one class's scan returned: candidates in claim order,
// the database time the scan read its range to exhaustion through (zero
// when the limit cut it short), the row density it measured, and the
// database time of the turn's scope read, before the scan began (zero for
// an expired-lease scan, whose floor does not use it).
type classScan struct {
	rows    []scanned
	through time.Time
	perRow  time.Duration
	seen    time.Time
}

// scanned is what claim order and a cursor need of a candidate: the
// columns ClaimCandidates reads off its index.
type scanned struct {
	WorkID      int64
	RunAfter    time.Time
	LaneOrdinal int64
}

type scanFunc func(from, until time.Time, limit int) ([]scanned, error)

// scanWindows reads a class's range from its cursor up to now, at most want
// rows, in at most two statements: the cursor's window first (see
// ClaimerConfig.ScanWindow), and when that window holds fewer than want
// rows short of now, the rest up to now in one more, for the rows still
// wanted. A claim therefore comes back short only when the class has no more
// due rows: the controller claims again only when a claim filled its slots,
// so a short claim with due work left behind the window would strand that
// work until the next event. The window's width follows the row density
// (see cursor.width). A class without a floor is read from the front of its
// range in one statement.
//
// A scan starts where the floor says (scanfloor.Floor.Start): a backlog's
// scans start at the floor, not over the MVCC delete markers that the
// last StragglerWindow of its claims left; an enqueue's rows are covered
// by its admitted_at (see observe).
func (c *Claimer) scanWindows(cur cursor, now time.Time, want int, stats *ClaimStats, scan scanFunc) (res classScan, err error) {
	defer func() { res.seen = now }()
	read := func(from, until time.Time, limit int) ([]scanned, error) {
		stats.Statements++
		return scan(from, until, limit)
	}
	if !cur.floor.Known() {
		rows, err := read(scanfloor.Front, now, want)
		if err != nil {
			return classScan{}, err
		}
		return classScan{rows: rows, through: throughIf(len(rows) < want, now), perRow: cur.perRow}, nil
	}
	from := c.scanStart(cur)
	width := cur.width(want)
	// Whole microseconds, DATETIME(6)'s resolution: the second statement
	// starts one microsecond after the first one's end, so no row is in both.
	until := earliest(cur.floor.At().Add(width), now).Truncate(time.Microsecond)
	if until.Before(from) { // a database clock behind the floor's
		until = from
	}
	rows, err := read(from, until, want)
	if err != nil {
		return classScan{}, err
	}
	perRow := nextPerRow(cur, width, rows, want)
	if len(rows) >= want {
		return classScan{rows: rows, perRow: perRow}, nil
	}
	if until.Before(now) {
		// The first range was read to exhaustion (fewer rows than its
		// limit), rows due at exactly until included.
		rest, err := read(until.Add(time.Microsecond), now, want-len(rows))
		if err != nil {
			return classScan{}, err
		}
		rows = append(rows, rest...)
		until = now
	}
	if len(rows) >= want {
		return classScan{rows: rows, perRow: perRow}, nil
	}
	return classScan{rows: rows, through: until, perRow: perRow}, nil
}

// width is how far past its floor a scan for want rows reads in its first
// statement: twice the width want rows took so far, so that a backlog is
// read in one statement per claim (the rest-of-range statement stays rare)
// while the range, and the live entries the engine reads in it, stays
// proportional to what the claim takes.
func (cur cursor) width(want int) time.Duration {
	w := 2 * cur.perRow * time.Duration(want)
	if cur.perRow == 0 || w/time.Duration(want) != 2*cur.perRow { // unknown, or overflowed
		return cur.start
	}
	return min(max(w, minScanWindow), maxScanWindow)
}

// nextPerRow estimates the database time per claimable row from a first
// statement over [floor, floor+width] that returned rows: when it filled
// want, from the span its rows covered; when it came up short, as if it had
// found at least one row (so an empty range doubles its width or more).
func nextPerRow(cur cursor, width time.Duration, rows []scanned, want int) time.Duration {
	if len(rows) >= want {
		span := rows[len(rows)-1].RunAfter.Sub(cur.floor.At())
		return max(span/time.Duration(len(rows)), time.Microsecond)
	}
	return min(width/time.Duration(max(len(rows), 1)), maxScanWindow)
}

func throughIf(exhausted bool, t time.Time) time.Time {
	if exhausted {
		return t
	}
	return time.Time{}
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

type candidate struct {
	row   scanned
	class string
	stale gen.StaleCandidatesRow // the whole row, for a reclaim's CAS on its token
}

// claimTier scans each class of the tier from its cursor, merges the
// candidates into claim order, and CASes them in one statement.
func (c *Claimer) claimTier(ctx context.Context, sc gen.GetScopeRow, classes, workTypes []string, want int, stats *ClaimStats) ([]Claimed, error) {
	part := c.partition()
	scans := make(map[string]classScan, len(classes))
	var cands []candidate
	var epoch uint64
	for _, class := range classes {
		var cur cursor
		cur, epoch = c.cursorFor(c.fresh, class)
		res, err := c.scanWindows(cur, sc.DbNow, want*part.spread, stats, func(from, until time.Time, limit int) ([]scanned, error) {
			rows, err := c.qu.q.ClaimCandidates(ctx, gen.ClaimCandidatesParams{
				ScopeID: c.scope, Generation: sc.ActiveGeneration, QueueClass: class,
				FromTime: from, UntilTime: until, WorkTypes: workTypes, Limit: int32(limit),
			})
			out := make([]scanned, len(rows))
			for i, r := range rows {
				out[i] = scanned{WorkID: r.WorkID, RunAfter: r.RunAfter, LaneOrdinal: r.LaneOrdinal}
			}
			return out, err
		})
		if err != nil {
			return nil, nothingCommitted(fmt.Errorf("workqueue: claim candidates (scope %q, class %q): %w", c.scope, class, err))
		}
		stats.Scanned += len(res.rows)
		scans[class] = res
		for _, r := range res.rows {
			cands = append(cands, candidate{row: r, class: class})
		}
	}
	slices.SortFunc(cands, claimOrder)
	cands = choose(cands, want, part)
	settle := func() { // every candidate kept is consumed, won or lost
		kept := make(map[int64]bool, len(cands))
		for _, cand := range cands {
			kept[cand.row.WorkID] = true
		}
		for _, class := range classes {
			n := 0 // the class's leading candidates kept: its cursor passes those only
			for _, r := range scans[class].rows {
				if !kept[r.WorkID] {
					break
				}
				n++
			}
			c.settle(c.fresh, class, epoch, scans[class], n)
		}
	}
	if len(cands) == 0 {
		settle()
		return nil, nil
	}
	ids := make([]int64, len(cands))
	for i, cand := range cands {
		ids[i] = cand.row.WorkID
	}
	ref := c.newRef()
	n, casErr := c.claimCAS(ctx, ids, ref, sc.ActiveGeneration)
	if casErr != nil && serverRejected(casErr) {
		return nil, nothingCommitted(fmt.Errorf("workqueue: claim CAS on %d candidates: %w", len(ids), casErr))
	}
	settle()
	if casErr == nil && n == 0 {
		stats.LostCAS += len(ids)
		c.noteLosses(len(ids))
		return nil, nil
	}
	won, fenced, err := c.readBack(ctx, ref, ids, false)
	if err != nil {
		return nil, fmt.Errorf("workqueue: claim CAS on %d candidates (%v): %w", len(ids), casErr, err)
	}
	setDueFor(won, cands, sc.DbNow)
	if casErr != nil {
		stats.Resolved++
	}
	stats.Fenced += fenced
	lost := len(ids) - len(won) - fenced
	stats.LostCAS += lost
	c.noteLosses(lost)
	return won, nil
}

// setDueFor sets each won item's DueFor from its candidate's due time (a
// lease's expiry for a reclaim) and the turn's database clock.
func setDueFor(won []Claimed, cands []candidate, now time.Time) {
	due := make(map[int64]time.Time, len(cands))
	for _, cand := range cands {
		due[cand.row.WorkID] = cand.row.RunAfter
	}
	for i := range won {
		if at, ok := due[won[i].WorkID]; ok {
			won[i].DueFor = max(now.Sub(at), 0)
		}
	}
}

func (c *Claimer) newRef() sql.NullString {
	return store.NullString(fmt.Sprintf("%s#%d", c.refPrefix, c.turns.Add(1)))
}

// claimCAS runs the batch claim CAS under a context the caller cannot
// cancel: once it may be committing, its outcome is learned, not abandoned.
// generation is the one the turn read from the scope row; the read-back
// fences rows of a generation that stopped being active meanwhile.
func (c *Claimer) claimCAS(ctx context.Context, ids []int64, ref sql.NullString, generation int64) (int64, error) {
	ctx, cancel := c.qu.detached(ctx)
	defer cancel()
	return c.qu.q.ClaimBatchCAS(ctx, gen.ClaimBatchCASParams{
		ClaimRef: ref, LeaseMicros: store.Micros(c.qu.cfg.Lease), WorkIDs: paddedIDs(ids), Generation: generation,
	})
}

// readBack reads what the claim-turn reference ref owns among ids, retried
// after transient errors under a context the caller cannot cancel: the read
// is idempotent, and until it succeeds the claim's outcome is unknown. Rows
// of a generation that is no longer active (SetGeneration committed while
// their CAS was in flight), or of a class paused meanwhile, are released
// unrun and counted in fenced.
func (c *Claimer) readBack(ctx context.Context, ref sql.NullString, ids []int64, reclaimed bool) (won []Claimed, fenced int, err error) {
	var rows []gen.ClaimedByRefRow
	err = c.qu.retryWrite(ctx, "read back claimed items", func(ctx context.Context) error {
		var err error
		rows, err = c.qu.q.ClaimedByRef(ctx, gen.ClaimedByRefParams{WorkIDs: paddedIDs(ids), ClaimRef: ref})
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	won = make([]Claimed, 0, len(rows))
	for _, r := range rows {
		claimed := c.claimedFrom(gen.StaleCandidatesRow{
			WorkID: r.WorkID, EventID: r.EventID, WorkType: r.WorkType, QueueClass: r.QueueClass,
			LeaseToken: r.LeaseToken, LaneOrdinal: r.LaneOrdinal, AttemptCount: r.AttemptCount,
			SafeRetryCount: r.SafeRetryCount, Generation: r.Generation, SourceLaneKey: r.SourceLaneKey,
			TargetLaneKey: r.TargetLaneKey, RunAfter: r.RunAfter, ProjectionKey: r.ProjectionKey,
		}, reclaimed)
		claimed.Dependency = dependencyFrom(r.DependencyWakeKey, r.DependencyKeys)
		claimed.RateKey = r.RateKey.String
		ev := storedEvent(r.Event)
		claimed.Event = &ev
		if r.Generation != r.ActiveGeneration || pausedNow(r.PausedClasses, r.QueueClass) {
			// Not handed to anyone. If the release fails too, the row waits
			// for its lease to expire; reclaim of the active generation never
			// takes it (nor a claim of a paused class).
			fenced++
			_ = c.qu.Release(ctx, claimed.Lease)
			continue
		}
		won = append(won, claimed)
	}
	return won, fenced, nil
}

// pausedNow reports whether class is among the paused classes a read-back
// saw on the scope row; a value no PauseClass wrote counts as paused (as a
// claim turn refuses to claim under it).
func pausedNow(pausedClasses []byte, class string) bool {
	paused, err := ParsePausedClasses(pausedClasses)
	return err != nil || slices.Contains(paused, class)
}

// reclaim takes over expired leases of the given classes, oldest expiry
// first across them: one stale scan per class from its stale cursor, then
// one CAS per candidate on the token it saw, all under one claim-turn
// reference that a single read-back resolves. A candidate whose attempt
// budget is spent goes to dead instead (FinishExpired).
func (c *Claimer) reclaim(ctx context.Context, sc gen.GetScopeRow, classes, workTypes []string, want int, stats *ClaimStats) ([]Claimed, error) {
	scans := make(map[string]classScan, len(classes))
	var cands []candidate
	var epoch uint64
	for _, class := range classes {
		var cur cursor
		cur, epoch = c.cursorFor(c.stale, class)
		rows, err := c.qu.q.StaleCandidates(ctx, gen.StaleCandidatesParams{
			ScopeID: c.scope, Generation: sc.ActiveGeneration, QueueClass: class,
			FromTime: c.scanStart(cur), UntilTime: sc.DbNow, WorkTypes: workTypes, Limit: int32(want),
		})
		stats.StaleScans++
		if err != nil {
			return nil, nothingCommitted(fmt.Errorf("workqueue: stale candidates (scope %q, class %q): %w", c.scope, class, err))
		}
		stats.Scanned += len(rows)
		res := classScan{through: throughIf(len(rows) < want, sc.DbNow), perRow: cur.perRow}
		for _, r := range rows {
			row := scanned{WorkID: r.WorkID, RunAfter: r.RunAfter, LaneOrdinal: r.LaneOrdinal}
			res.rows = append(res.rows, row)
			cands = append(cands, candidate{row: row, class: class, stale: r})
		}
		scans[class] = res
	}
	slices.SortFunc(cands, claimOrder)
	more := len(cands) > want
	for _, res := range scans {
		more = more || res.through.IsZero() // a class filled the limit
	}
	if more {
		cands = cands[:min(len(cands), want)]
		c.mu.Lock()
		c.staleNow = true // more expired leases may wait: look again next claim
		c.mu.Unlock()
	}
	ref := c.newRef()
	var tried []int64
	var unknown error
	// consumed counts, per class, the leading candidates handled (won, lost
	// to another claimer, or sent to dead): the stale cursor may pass those
	// only, never one whose CAS TiDB rejected.
	consumed, held := map[string]int{}, map[string]bool{}
	handled := func(class string, ok bool) {
		if !ok {
			held[class] = true
		} else if !held[class] {
			consumed[class]++
		}
	}
	for _, cand := range cands {
		r := cand.stale
		if r.AttemptCount >= c.qu.cfg.MaxAttempts || r.CancelReason.Valid {
			err := c.qu.endExpired(ctx, r)
			switch {
			case err == nil && r.CancelReason.Valid:
				stats.ExpiredCancelled++
			case err == nil:
				stats.ExpiredToDead++
			}
			handled(cand.class, err == nil)
			continue
		}
		n, err := c.reclaimCAS(ctx, r, ref)
		switch {
		case err != nil && serverRejected(err):
			// Rolled back: the row stays expired for the next scan.
			handled(cand.class, false)
			continue
		case err != nil:
			unknown = err
			tried = append(tried, r.WorkID)
		case n == 0:
			stats.LostCAS++
		default:
			tried = append(tried, r.WorkID)
		}
		handled(cand.class, true)
	}
	for class, res := range scans {
		c.settle(c.stale, class, epoch, res, consumed[class])
	}
	if len(tried) == 0 {
		return nil, nil
	}
	won, fenced, err := c.readBack(ctx, ref, tried, true)
	if err != nil {
		return nil, fmt.Errorf("workqueue: reclaim of %d expired leases (%v): %w", len(tried), unknown, err)
	}
	setDueFor(won, cands, sc.DbNow)
	if unknown != nil {
		stats.Resolved++
	}
	stats.Fenced += fenced
	return won, nil
}

func (c *Claimer) reclaimCAS(ctx context.Context, r gen.StaleCandidatesRow, ref sql.NullString) (int64, error) {
	ctx, cancel := c.qu.detached(ctx)
	defer cancel()
	return c.qu.q.ReclaimCAS(ctx, gen.ReclaimCASParams{
		LeaseOwner: ref, LeaseMicros: store.Micros(c.qu.cfg.Lease), WorkID: r.WorkID, LeaseToken: r.LeaseToken,
		MaxAttempts: c.qu.cfg.MaxAttempts, ScopeID: c.scope,
	})
}

// claimedFrom builds the owner's view of a row as it is after its claim CAS.
func (c *Claimer) claimedFrom(r gen.StaleCandidatesRow, reclaimed bool) Claimed {
	return Claimed{
		Scope: c.scope, WorkID: r.WorkID, EventID: r.EventID, WorkType: r.WorkType, QueueClass: r.QueueClass,
		LaneOrdinal: r.LaneOrdinal, Attempt: r.AttemptCount, SafeRetries: r.SafeRetryCount, Reclaimed: reclaimed,
		ProjectionKey: r.ProjectionKey.String,
		Lease: Lease{WorkID: r.WorkID, Token: r.LeaseToken, lanes: &laneIdentity{
			workID: r.WorkID, scope: c.scope, generation: r.Generation, ordinal: r.LaneOrdinal,
			source: r.SourceLaneKey, target: r.TargetLaneKey, projection: r.ProjectionKey,
		}},
	}
}

// Probe returns a value that changes when the scope's admission state
// changes (a new generation, an enqueue), when the first claimable row of
// one of classes changes, or when one of their leases expired. A worker's
// probe calls it: that is how work another process made claimable without
// announcing it (a lost wake datagram, a process that died holding a lease)
// is noticed within one probe period, without a claim turn. One scope read
// plus two LIMIT 1 scans per class from its cursors; the cursors do not
// move. An expired lease makes the next claim look for expired leases.
func (c *Claimer) Probe(ctx context.Context, classes, workTypes []string) (uint64, error) {
	sc, err := c.readScope(ctx)
	if err != nil {
		return 0, err
	}
	h := fnv.New64a()
	// A resume changes the paused list, so the probe reports a change and
	// the worker claims even if the resume's announcement was lost.
	fmt.Fprintf(h, "%d/%d/%s", sc.ActiveGeneration, sc.NextEnqueueOrdinal, sc.PausedClasses)
	for _, class := range c.pausedClasses().drop(classes) {
		cur, _ := c.cursorFor(c.fresh, class)
		rows, err := c.qu.q.ClaimCandidates(ctx, gen.ClaimCandidatesParams{
			ScopeID: c.scope, Generation: sc.ActiveGeneration, QueueClass: class,
			FromTime: c.scanStart(cur), UntilTime: sc.DbNow, WorkTypes: workTypes, Limit: 1,
		})
		if err != nil {
			return 0, fmt.Errorf("workqueue: probe class %q of scope %q: %w", class, c.scope, err)
		}
		for _, r := range rows {
			// A claim and release of the same row moves its run_after to
			// the release's time: the first row changed.
			fmt.Fprintf(h, "/%s:%d:%d", class, r.WorkID, r.RunAfter.UnixMicro())
		}
		stale, _ := c.cursorFor(c.stale, class)
		expired, err := c.qu.q.StaleCandidates(ctx, gen.StaleCandidatesParams{
			ScopeID: c.scope, Generation: sc.ActiveGeneration, QueueClass: class,
			FromTime: c.scanStart(stale), UntilTime: sc.DbNow, WorkTypes: workTypes, Limit: 1,
		})
		if err != nil {
			return 0, fmt.Errorf("workqueue: probe expired leases of class %q of scope %q: %w", class, c.scope, err)
		}
		for _, r := range expired {
			fmt.Fprintf(h, "/%s:expired:%d:%d", class, r.WorkID, r.LeaseToken)
			c.NoteDue()
		}
	}
	return h.Sum64(), nil
}

// scanStart is where a scan from cur starts (scanfloor.Floor.Start).
func (c *Claimer) scanStart(cur cursor) time.Time {
	return cur.floor.Start(c.cfg.StragglerWindow)
}

// pausedClasses is the scope's paused classes as the last scope read saw.
func (c *Claimer) pausedClasses() pausedSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.paused
}

// pausedSet is a scope's paused classes (Queue.PauseClass): a claim turn
// neither scans nor reclaims them. nil pauses nothing.
type pausedSet map[string]bool

func newPausedSet(classes []string) pausedSet {
	if len(classes) == 0 {
		return nil
	}
	s := make(pausedSet, len(classes))
	for _, c := range classes {
		s[c] = true
	}
	return s
}

// drop returns classes without the paused ones.
func (p pausedSet) drop(classes []string) []string {
	if len(p) == 0 {
		return classes
	}
	var out []string
	for _, c := range classes {
		if !p[c] {
			out = append(out, c)
		}
	}
	return out
}

// dropFromTiers drops the paused classes from claim tiers, and tiers left
// empty.
func (p pausedSet) dropFromTiers(tiers [][]string) [][]string {
	if len(p) == 0 {
		return tiers
	}
	var out [][]string
	for _, t := range tiers {
		if kept := p.drop(t); len(kept) > 0 {
			out = append(out, kept)
		}
	}
	return out
}
