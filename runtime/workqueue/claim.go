package workqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/gen"
)

// Claimed is an item this process now owns until its lease ends.
type Claimed struct {
	WorkID      int64
	EventID     int64
	WorkType    string
	QueueClass  string
	LaneOrdinal int64 // position in the scope's admission order and in its lanes
	Attempt     int32 // attempts including this one
	SafeRetries int32 // consecutive safe retries before this attempt
	Reclaimed   bool  // taken over from an expired lease
	Lease       Lease
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
	scope          string
	generation     int64
	ordinal        int64
	source, target sql.NullString
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
}

// ClaimerConfig tunes a Claimer. Zero fields take the defaults.
type ClaimerConfig struct {
	// RescanEvery bounds how long a class scan may start past already
	// consumed keys before it rescans from the beginning of the range, to
	// pick up items that became claimable behind the floor in another
	// process (a retry coming due, a release, a promotion). Default 10s.
	RescanEvery time.Duration
	// StaleScanEvery is how often a fresh claim also looks for expired
	// leases. Default Lease/4. StaleOnly requests always look.
	StaleScanEvery time.Duration
	// ScanWindow bounds each candidate statement to this many lane ordinals
	// past its start, so its range never grows with the backlog; a claim
	// walks further windows while they come back empty. Default 256.
	ScanWindow int64
	// Now is the process clock used only to pace the two intervals above;
	// it never decides leases or due times. Default time.Now.
	Now func() time.Time
}

// Claimer claims for one scope on behalf of one owner. It keeps per-class
// scan floors: a claim leaves an MVCC delete marker at the front of the
// pending range that TiDB must step over until GC (10 minutes by default),
// so scanning from the start after thousands of claims costs more with every
// claim even though rows read stay the same. The floor starts each scan at
// the lane ordinal of the last item it consumed; items that become claimable
// behind it are found by Rewind (this process's own promotions, releases and
// due retries) or by the periodic rescan (RescanEvery). Claim ownership is
// still decided only by the row CAS, so a floor can delay work, never
// duplicate or reorder a lane.
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

	mu        sync.Mutex
	rewinds   uint64               // Rewind calls; a scan that saw one does not advance
	floors    map[string]int64     // queue class -> lane ordinal to start at
	rescanned map[string]time.Time // queue class -> last scan from 0
	lastStale time.Time
	// dueRewinds are this claimer's retries, rewound once they come due.
	dueRewinds []dueRewind
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
	if cfg.RescanEvery == 0 {
		cfg.RescanEvery = 10 * time.Second
	}
	if cfg.StaleScanEvery == 0 {
		cfg.StaleScanEvery = qu.cfg.Lease / 4
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ScanWindow == 0 {
		cfg.ScanWindow = 256
	}
	if cfg.RescanEvery < 0 || cfg.StaleScanEvery < 0 || cfg.ScanWindow < 0 {
		return nil, invalidf("claimer intervals and scan window must not be negative")
	}
	return &Claimer{
		qu: qu, scope: scope, owner: owner, cfg: cfg, refPrefix: fmt.Sprintf("%s#%x", owner, tag),
		floors: map[string]int64{}, rescanned: map[string]time.Time{},
	}, nil
}

// Rewind makes the next scan of every class start no later than ordinal
// (0: from the beginning). The runtime calls it for items it knows became
// claimable behind a floor.
func (c *Claimer) Rewind(ordinal int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rewinds++
	for class, f := range c.floors {
		if ordinal < f {
			c.floors[class] = ordinal
		}
	}
}

// Floor is the lane ordinal the next scan of class starts at (for
// diagnostics and benchmarks).
func (c *Claimer) Floor(class string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.floors[class]
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
	Scanned int // candidate rows returned by scans
	Windows int // candidate statements run (one per scan window)
	LostCAS int // candidates another claimer took first
}

// Claim claims up to req.Max items: expired leases first (when a stale scan
// is due, or always with StaleOnly), then fresh due lane heads, preferred
// classes first. Losing a CAS to another claimer is normal and only counted.
// Items won are returned even with an error; an error wrapping
// ErrNothingCommitted came from a read before any write of its step.
func (c *Claimer) Claim(ctx context.Context, req ClaimRequest) ([]Claimed, ClaimStats, error) {
	var stats ClaimStats
	if err := req.validate(); err != nil {
		return nil, stats, err
	}
	c.applyDueRewinds()
	var out []Claimed
	if req.StaleOnly || c.staleScanDue() {
		got, err := c.reclaim(ctx, req, req.Max, &stats)
		out = append(out, got...) // items already won are the caller's even on error
		if err != nil {
			return out, stats, err
		}
	}
	if req.StaleOnly {
		return out, stats, nil
	}
	for _, tier := range req.tiers() {
		if len(out) >= req.Max {
			break
		}
		got, err := c.claimTier(ctx, tier, req.WorkTypes, req.Max-len(out), &stats)
		out = append(out, got...)
		if err != nil {
			return out, stats, err
		}
	}
	return out, stats, nil
}

func (c *Claimer) staleScanDue() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if now.Sub(c.lastStale) < c.cfg.StaleScanEvery {
		return false
	}
	c.lastStale = now
	return true
}

// floor returns where the next scan of class starts (0 when a periodic
// rescan is due) and the rewind count the scan's advance must match.
func (c *Claimer) floor(class string) (int64, uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if now.Sub(c.rescanned[class]) >= c.cfg.RescanEvery {
		c.rescanned[class] = now
		return 0, c.rewinds
	}
	return c.floors[class], c.rewinds
}

// advance moves the floor of class up to ordinal, unless a Rewind arrived
// since the scan began (the rewound item may sit below ordinal).
func (c *Claimer) advance(class string, ordinal int64, seenRewinds uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rewinds == seenRewinds && ordinal > c.floors[class] {
		c.floors[class] = ordinal
	}
}

// scanClass returns up to want candidates of one class from its floor,
// walking windows of ScanWindow ordinals until one yields candidates or the
// scope's next enqueue ordinal is reached. Empty windows (rows not due yet,
// of other work types, or already consumed) never move the floor: they are
// read again on the next claim, one bounded statement each. A periodic
// rescan from the front is a single statement over the whole range instead,
// so it never walks the scope's history window by window.
func (c *Claimer) scanClass(ctx context.Context, sc gen.Scope, class string, workTypes []string, want int, stats *ClaimStats) ([]gen.ClaimCandidatesRow, uint64, error) {
	from, rewinds := c.floor(class)
	window := c.cfg.ScanWindow
	if from == 0 {
		window = sc.NextEnqueueOrdinal
	}
	for ; from < sc.NextEnqueueOrdinal; from += window {
		rows, err := c.qu.q.ClaimCandidates(ctx, gen.ClaimCandidatesParams{
			ScopeID:        c.scope,
			Generation:     sc.ActiveGeneration,
			QueueClass:     class,
			FloorOrdinal:   from,
			CeilingOrdinal: from + window,
			WorkTypes:      workTypes,
			Limit:          int32(want),
		})
		if err != nil {
			return nil, rewinds, nothingCommitted(fmt.Errorf("workqueue: claim candidates (scope %q, class %q): %w", c.scope, class, err))
		}
		stats.Scanned += len(rows)
		stats.Windows++
		if len(rows) > 0 {
			return rows, rewinds, nil
		}
	}
	return nil, rewinds, nil
}

type candidate struct {
	row     gen.ClaimCandidatesRow
	class   string
	rewinds uint64 // Rewind count when its scan began
}

// claimTier scans each class of the tier from its floor, merges the
// candidates into claim order, and CASes them in that order.
func (c *Claimer) claimTier(ctx context.Context, classes, workTypes []string, want int, stats *ClaimStats) ([]Claimed, error) {
	// One point read per claim turn: the active generation to scan and the
	// next enqueue ordinal, where window walks stop.
	sc, err := c.qu.q.GetScope(ctx, c.scope)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nothingCommitted(fmt.Errorf("%w: %q", ErrUnknownScope, c.scope))
	}
	if err != nil {
		return nil, nothingCommitted(fmt.Errorf("workqueue: read scope %q: %w", c.scope, err))
	}
	var cands []candidate
	for _, class := range classes {
		rows, rewinds, err := c.scanClass(ctx, sc, class, workTypes, want, stats)
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			cands = append(cands, candidate{row: r, class: class, rewinds: rewinds})
		}
	}
	// Lane ordinals are unique per scope, so they alone give claim order.
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.row.LaneOrdinal, b.row.LaneOrdinal) })
	if len(cands) > want {
		cands = cands[:want]
	}
	if len(cands) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(cands))
	for i, cand := range cands {
		ids[i] = cand.row.WorkID
	}
	ref := nullString(fmt.Sprintf("%s#%d", c.refPrefix, c.turns.Add(1)))
	n, err := c.qu.q.ClaimBatchCAS(ctx, gen.ClaimBatchCASParams{
		ClaimRef: ref, LeaseMicros: micros(c.qu.cfg.Lease), WorkIDs: ids, ScopeID: c.scope,
	})
	if err != nil {
		return nil, fmt.Errorf("workqueue: claim CAS on %d candidates: %w", len(ids), err)
	}
	// Won or lost, every candidate is consumed: the floor may pass it.
	for _, cand := range cands {
		c.advance(cand.class, cand.row.LaneOrdinal, cand.rewinds)
	}
	stats.LostCAS += len(ids) - int(n)
	if n == 0 {
		return nil, nil
	}
	won, err := c.qu.q.ClaimedByRef(ctx, gen.ClaimedByRefParams{WorkIDs: ids, ClaimRef: ref})
	if err != nil {
		// The rows are claimed but unknown to us: they come back through
		// stale reclaim when their lease expires.
		return nil, fmt.Errorf("workqueue: read back %d claimed items: %w", n, err)
	}
	out := make([]Claimed, 0, len(won))
	for _, r := range won {
		out = append(out, c.claimedFrom(gen.ClaimCandidatesRow(r), false))
	}
	return out, nil
}

func (c *Claimer) reclaim(ctx context.Context, req ClaimRequest, want int, stats *ClaimStats) ([]Claimed, error) {
	rows, err := c.qu.q.StaleCandidates(ctx, gen.StaleCandidatesParams{
		ScopeID:      c.scope,
		QueueClasses: req.QueueClasses,
		WorkTypes:    req.WorkTypes,
		Limit:        int32(want),
	})
	if err != nil {
		return nil, nothingCommitted(fmt.Errorf("workqueue: stale candidates (scope %q): %w", c.scope, err))
	}
	stats.Scanned += len(rows)
	var out []Claimed
	for _, r := range rows {
		n, err := c.qu.q.ReclaimCAS(ctx, gen.ReclaimCASParams{
			LeaseOwner:  nullString(c.owner),
			LeaseMicros: micros(c.qu.cfg.Lease),
			WorkID:      r.WorkID,
			LeaseToken:  r.LeaseToken,
			ScopeID:     c.scope,
		})
		if err != nil {
			return out, fmt.Errorf("workqueue: reclaim CAS on work %d: %w", r.WorkID, err)
		}
		if n == 0 {
			stats.LostCAS++
			continue
		}
		// The CAS incremented the token and the attempt count it matched.
		r.LeaseToken++
		r.AttemptCount++
		out = append(out, c.claimedFrom(gen.ClaimCandidatesRow(r), true))
	}
	return out, nil
}

// claimedFrom builds the owner's view of a row as it is after its claim CAS.
// (Every candidate statement selects the same columns, so their row types
// convert to gen.ClaimCandidatesRow.)
func (c *Claimer) claimedFrom(r gen.ClaimCandidatesRow, reclaimed bool) Claimed {
	return Claimed{
		WorkID: r.WorkID, EventID: r.EventID, WorkType: r.WorkType, QueueClass: r.QueueClass,
		LaneOrdinal: r.LaneOrdinal, Attempt: r.AttemptCount, SafeRetries: r.SafeRetryCount, Reclaimed: reclaimed,
		Lease: Lease{WorkID: r.WorkID, Token: r.LeaseToken, lanes: &laneIdentity{
			scope: c.scope, generation: r.Generation, ordinal: r.LaneOrdinal,
			source: r.SourceLaneKey, target: r.TargetLaneKey,
		}},
	}
}
