package inspect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// LaneQuery selects a page of one lane: a source lane or a target lane
// (exactly one of the two keys).
type LaneQuery struct {
	Source, Target string
	// Generation to read; 0: the scope's active generation.
	Generation int64
	// After continues after the page that returned it as Next (0: from the
	// head).
	After int64
	// Limit is how many blocked items a page holds (default
	// DefaultPageSize, at most MaxPageSize).
	Limit int
}

// LaneItem is one live item of a lane.
type LaneItem struct {
	WorkID     int64
	WorkType   string
	QueueClass string
	State      string
	Ordinal    int64 // lane order: the scope's admission order
	SourceLane string
	TargetLane string
	RunAfter   time.Time // the head's due time or lease end (zero for a blocked item)
	LeaseOwner string    // the head's, while it runs
	Since      time.Time // the head's last change, a blocked item's creation
}

// LanePage is a lane in order: its head (nil when the lane has none: its
// first items wait for their other lanes, or it holds nothing live) and a
// page of the items blocked behind it.
type LanePage struct {
	Scope      string
	Generation int64
	Kind       string // "source" or "target"
	Lane       string
	Head       *LaneItem
	Blocked    []LaneItem
	// Queued is how many items are blocked in the lane, counted to 1,000
	// (MoreQueued: more are).
	Queued     int
	MoreQueued bool
	// Next is the cursor of the next page (LaneQuery.After); 0 at the end.
	Next int64
}

// Lane reads a page of one lane: its head, its blocked items in lane order
// after q.After, and how many wait. Each read is bounded: the head's
// state ranges (one entry at most), a page of the blocked range, and the
// blocked count cut at 1,001 (see LaneQueues), however long the lane.
func (r *Reader) Lane(ctx context.Context, scope string, q LaneQuery) (LanePage, error) {
	kind, key := "source", q.Source
	switch {
	case (q.Source == "") == (q.Target == ""):
		return LanePage{}, &InvalidError{Field: "lane", Reason: "name exactly one of a source lane and a target lane"}
	case q.Target != "":
		kind, key = "target", q.Target
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageSize
	case q.Limit < 0 || q.Limit > MaxPageSize:
		return LanePage{}, &InvalidError{Field: "Limit", Reason: fmt.Sprintf("%d out of range 1..%d", q.Limit, MaxPageSize)}
	}
	if q.After < 0 {
		return LanePage{}, &InvalidError{Field: "After", Reason: fmt.Sprintf("%d is not a lane ordinal", q.After)}
	}
	generation, err := r.generation(ctx, scope, q.Generation)
	if err != nil {
		return LanePage{}, err
	}
	p := LanePage{Scope: scope, Generation: generation, Kind: kind, Lane: key}
	lane := store.NullString(key)
	var heads []gen.SourceLaneHeadRow
	var blocked []gen.SourceLaneBlockedPageRow
	counts := gen.LaneQueuesParams{ScopeID: scope, Generation: generation}
	if kind == "source" {
		counts.SourceLaneKey = lane
		heads, err = r.q.SourceLaneHead(ctx, gen.SourceLaneHeadParams{ScopeID: scope, Generation: generation, LaneKey: lane})
		if err == nil {
			blocked, err = r.q.SourceLaneBlockedPage(ctx, gen.SourceLaneBlockedPageParams{ScopeID: scope, Generation: generation, LaneKey: lane,
				AfterOrdinal: q.After, Limit: int32(q.Limit)})
		}
	} else {
		counts.TargetLaneKey = lane
		var th []gen.TargetLaneHeadRow
		var tb []gen.TargetLaneBlockedPageRow
		th, err = r.q.TargetLaneHead(ctx, gen.TargetLaneHeadParams{ScopeID: scope, Generation: generation, LaneKey: lane})
		if err == nil {
			tb, err = r.q.TargetLaneBlockedPage(ctx, gen.TargetLaneBlockedPageParams{ScopeID: scope, Generation: generation, LaneKey: lane,
				AfterOrdinal: q.After, Limit: int32(q.Limit)})
		}
		for _, h := range th {
			heads = append(heads, gen.SourceLaneHeadRow(h))
		}
		for _, b := range tb {
			blocked = append(blocked, gen.SourceLaneBlockedPageRow(b))
		}
	}
	if err != nil {
		return LanePage{}, fmt.Errorf("inspect: %s lane %q of scope %q: %w", kind, key, scope, err)
	}
	if len(heads) > 0 && q.After == 0 {
		h := heads[0]
		p.Head = &LaneItem{WorkID: h.WorkID, WorkType: h.WorkType, QueueClass: h.QueueClass, State: h.State, Ordinal: h.LaneOrdinal,
			RunAfter: h.RunAfter, LeaseOwner: h.LeaseOwner.String, Since: h.UpdatedAt}
		if kind == "source" {
			p.Head.SourceLane = key
		} else {
			p.Head.TargetLane = key
		}
	}
	for _, b := range blocked {
		p.Blocked = append(p.Blocked, LaneItem{WorkID: b.WorkID, WorkType: b.WorkType, QueueClass: b.QueueClass, State: "blocked",
			Ordinal: b.LaneOrdinal, SourceLane: b.SourceLaneKey.String, TargetLane: b.TargetLaneKey.String, Since: b.CreatedAt})
	}
	if len(blocked) == q.Limit {
		p.Next = blocked[len(blocked)-1].LaneOrdinal
	}
	rows, err := r.q.LaneQueues(ctx, counts)
	if err != nil {
		return LanePage{}, fmt.Errorf("inspect: count %s lane %q of scope %q: %w", kind, key, scope, err)
	}
	for _, c := range rows {
		if c.Lane == kind {
			p.Queued, p.MoreQueued = int(min(c.Blocked, maxLaneQueueCount)), c.Blocked > maxLaneQueueCount
		}
	}
	return p, nil
}

// generation is the generation a read names, or the scope's active one
// for 0 (an unknown scope is ErrUnknownScope).
func (r *Reader) generation(ctx context.Context, scope string, generation int64) (int64, error) {
	if generation != 0 {
		return generation, nil
	}
	sc, err := r.q.GetScope(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("inspect: %w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return 0, fmt.Errorf("inspect: read scope %q: %w", scope, err)
	}
	return sc.ActiveGeneration, nil
}
