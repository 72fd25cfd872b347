package workqueue

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
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

	mu        sync.Mutex
	floors    map[string]int64     // queue class -> lane ordinal to start at
	rescanned map[string]time.Time // queue class -> last scan from 0
	lastStale time.Time
	// dueRewinds are this claimer's retries, rewound once they come due.
	dueRewinds []dueRewind
}

// NewClaimer returns a Claimer for scope; owner names this process in lease
// rows (for operators; ownership itself is the token).
func (qu *Queue) NewClaimer(scope, owner string, cfg ClaimerConfig) (*Claimer, error) {
	if err := validScope(scope); err != nil {
		return nil, err
	}
	if owner == "" || len(owner) > 128 {
		return nil, invalidf("owner must be 1..128 bytes, got %d", len(owner))
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
	if cfg.RescanEvery < 0 || cfg.StaleScanEvery < 0 {
		return nil, invalidf("claimer intervals must not be negative")
	}
	return &Claimer{
		qu: qu, scope: scope, owner: owner, cfg: cfg,
		floors: map[string]int64{}, rescanned: map[string]time.Time{},
	}, nil
}

// Rewind makes the next scan of every class start no later than ordinal
// (0: from the beginning). The runtime calls it for items it knows became
// claimable behind a floor.
func (c *Claimer) Rewind(ordinal int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for class, f := range c.floors {
		if ordinal < f {
			c.floors[class] = ordinal
		}
	}
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
	LostCAS int // candidates another claimer took first
}

// Claim claims up to req.Max items: expired leases first (when a stale scan
// is due, or always with StaleOnly), then fresh due lane heads, preferred
// classes first. Losing a CAS to another claimer is normal and only counted.
func (c *Claimer) Claim(ctx context.Context, req ClaimRequest) ([]Claimed, ClaimStats, error) {
	var stats ClaimStats
	if err := req.validate(); err != nil {
		return nil, stats, err
	}
	c.applyDueRewinds()
	var out []Claimed
	if req.StaleOnly || c.staleScanDue() {
		got, err := c.reclaim(ctx, req, req.Max, &stats)
		if err != nil {
			return out, stats, err
		}
		out = append(out, got...)
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

func (c *Claimer) floor(class string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.cfg.Now()
	if now.Sub(c.rescanned[class]) >= c.cfg.RescanEvery {
		c.rescanned[class] = now
		return 0
	}
	return c.floors[class]
}

func (c *Claimer) advance(class string, ordinal int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ordinal > c.floors[class] {
		c.floors[class] = ordinal
	}
}

type candidate struct {
	row   gen.ClaimCandidatesRow
	class string
}

// claimTier scans each class of the tier from its floor, merges the
// candidates into claim order, and CASes them in that order.
func (c *Claimer) claimTier(ctx context.Context, classes, workTypes []string, want int, stats *ClaimStats) ([]Claimed, error) {
	var cands []candidate
	for _, class := range classes {
		rows, err := c.qu.q.ClaimCandidates(ctx, gen.ClaimCandidatesParams{
			ScopeID:      c.scope,
			QueueClass:   class,
			FloorOrdinal: c.floor(class),
			WorkTypes:    workTypes,
			Limit:        int32(want),
		})
		if err != nil {
			return nil, fmt.Errorf("workqueue: claim candidates (scope %q, class %q): %w", c.scope, class, err)
		}
		stats.Scanned += len(rows)
		for _, r := range rows {
			cands = append(cands, candidate{row: r, class: class})
		}
	}
	// Lane ordinals are unique per scope, so they alone give claim order.
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(a.row.LaneOrdinal, b.row.LaneOrdinal) })

	var out []Claimed
	for _, cand := range cands {
		if len(out) >= want {
			break
		}
		r := cand.row
		n, err := c.qu.q.ClaimCAS(ctx, gen.ClaimCASParams{
			LeaseOwner:  nullString(c.owner),
			LeaseMicros: micros(c.qu.cfg.Lease),
			WorkID:      r.WorkID,
			LeaseToken:  r.LeaseToken,
			ScopeID:     c.scope,
		})
		if err != nil {
			return out, fmt.Errorf("workqueue: claim CAS on work %d: %w", r.WorkID, err)
		}
		// Won or lost, everything up to this ordinal is consumed for this class.
		c.advance(cand.class, r.LaneOrdinal)
		if n == 0 {
			stats.LostCAS++
			continue
		}
		out = append(out, c.claimedFrom(r, false))
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
		return nil, fmt.Errorf("workqueue: stale candidates (scope %q): %w", c.scope, err)
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
		// Both candidate statements select the same columns.
		out = append(out, c.claimedFrom(gen.ClaimCandidatesRow(r), true))
	}
	return out, nil
}

// claimedFrom builds the owner's view after a successful CAS, which
// incremented the token and the attempt count of the row read as candidate.
func (c *Claimer) claimedFrom(r gen.ClaimCandidatesRow, reclaimed bool) Claimed {
	return Claimed{
		WorkID: r.WorkID, EventID: r.EventID, WorkType: r.WorkType, QueueClass: r.QueueClass,
		LaneOrdinal: r.LaneOrdinal, Attempt: r.AttemptCount + 1, SafeRetries: r.SafeRetryCount, Reclaimed: reclaimed,
		Lease: Lease{WorkID: r.WorkID, Token: r.LeaseToken + 1, lanes: &laneIdentity{
			scope: c.scope, generation: r.Generation, ordinal: r.LaneOrdinal,
			source: r.SourceLaneKey, target: r.TargetLaneKey,
		}},
	}
}
