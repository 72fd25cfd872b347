package workqueue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// StateInactive is a projection's queued successor: a durable generation
// that neither runs nor blocks its lane until the generation ahead of it
// terminalizes (see Work.Projection).
const StateInactive = "inactive"

// What an enqueue did for a projected work item (EnqueuedWork.Projection).
const (
	// ProjectionCreated: the projection had no live generation; a new active
	// one selects this event.
	ProjectionCreated = "created"
	// ProjectionAdvanced: the active generation was not claimed yet; it now
	// selects this event (its input grows, its lane place stays).
	ProjectionAdvanced = "advanced"
	// ProjectionQueued: the active generation is claimed (running, waiting
	// to retry or for a dependency); a new inactive successor selects this
	// event and activates when that generation terminalizes.
	ProjectionQueued = "queued"
	// ProjectionReplaced: a queued successor existed; it now selects this
	// event.
	ProjectionReplaced = "replaced"
	// ProjectionCollapsed: a newer event of the same projection in the same
	// batch is the one selected; this event is in that generation's input.
	ProjectionCollapsed = "collapsed"
	// ProjectionCovered: a duplicate delivery of an event already in a
	// generation's input; nothing was written or advanced.
	ProjectionCovered = "covered"
)

// projectionKey is the stable identity of a projection: the scope and its
// generation (a new generation starts every projection over, so an
// abandoned generation's active row cannot hold the key), the event's
// route, route version and kind, the work type and the source lane. Each
// part is length-prefixed before hashing, so no two tuples share a key.
func projectionKey(scope string, generation int64, ev Event, w Work) string {
	h := sha256.New()
	var n [8]byte
	for _, part := range []string{scope, ev.RouteID, ev.EventKind, w.WorkType, w.SourceLane} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write([]byte(part))
	}
	binary.BigEndian.PutUint64(n[:], uint64(generation))
	h.Write(n[:])
	binary.BigEndian.PutUint64(n[:], uint64(ev.RouteVersion))
	h.Write(n[:])
	return "p1:" + hex.EncodeToString(h.Sum(nil))
}

// projected returns the index of ev's projected work item and whether it
// has one. A projected work without a source lane is per-event work (seed
// 004 step 7).
func projected(ev Event) (int, bool) {
	for j, w := range ev.Work {
		if w.Projection && w.SourceLane != "" {
			return j, true
		}
	}
	return 0, false
}

// liveGenerations are the live generations of a batch's projections, locked.
type liveGenerations struct {
	active map[string]gen.LockActiveProjectionsRow
	queued map[string]gen.LockQueuedProjectionsRow
}

// lockProjections locks the active generations and queued successors of
// keys (two batch point gets), after the scope, the duplicate events and
// their work items, before any lane row: enqueue's lock order.
func lockProjections(ctx context.Context, q *gen.Queries, keys []string) (liveGenerations, error) {
	live := liveGenerations{active: map[string]gen.LockActiveProjectionsRow{}, queued: map[string]gen.LockQueuedProjectionsRow{}}
	if len(keys) == 0 {
		return live, nil
	}
	nullKeys := make([]sql.NullString, len(keys))
	for i, k := range keys {
		nullKeys[i] = store.NullString(k)
	}
	active, err := q.LockActiveProjections(ctx, nullKeys)
	if err != nil {
		return live, fmt.Errorf("lock active projection generations: %w", err)
	}
	for _, r := range active {
		live.active[r.ProjectionActiveKey.String] = r
	}
	queued, err := q.LockQueuedProjections(ctx, nullKeys)
	if err != nil {
		return live, fmt.Errorf("lock queued projection successors: %w", err)
	}
	for _, r := range queued {
		live.queued[r.ProjectionQueuedKey.String] = r
	}
	return live, nil
}

// advanceable reports whether an active generation's selected event may
// still be replaced (seed 004 step 2): it was never claimed (or its only
// claim was given back by a release), and it is not a replay child, which
// must run its dead parent's input as it was. Otherwise (running, waiting to
// retry or for a dependency, or a replay) newer events go to a successor.
func advanceable(r gen.LockActiveProjectionsRow) bool {
	return (r.State == StatePending || r.State == StateBlocked) && r.AttemptCount == 0 && !r.ReplayOfWorkID.Valid
}

// projectionStep is what an enqueue does for the projected work of a
// projection's selected event: advance a live generation (advance is its
// id, state its state), or write a new one.
type projectionStep struct {
	outcome string // a Projection* constant
	advance int64
	state   string
}

// step decides by the projection's live generations (seed 004 steps 2-3):
// a queued successor takes the event (the active generation is claimed);
// else an advanceable active generation does; else a claimed active
// generation gets a new queued successor; else a new active generation
// starts.
func (live liveGenerations) step(key string) projectionStep {
	active, hasActive := live.active[key]
	queued, hasQueued := live.queued[key]
	switch {
	case hasQueued:
		return projectionStep{outcome: ProjectionReplaced, advance: queued.WorkID, state: queued.State}
	case hasActive && advanceable(active):
		return projectionStep{outcome: ProjectionAdvanced, advance: active.WorkID, state: active.State}
	case hasActive:
		return projectionStep{outcome: ProjectionQueued}
	default:
		return projectionStep{outcome: ProjectionCreated}
	}
}

// advance points an unclaimed generation at a newer event.
type advance struct {
	workID int64
	event  int // index in the batch of the event it selects
}

// advanceProjections writes the batch's advances in one statement and
// checks every row matched (each is locked and was read advanceable).
func advanceProjections(ctx context.Context, q *gen.Queries, advances []advance, eventIDs []int64) error {
	if len(advances) == 0 {
		return nil
	}
	ids := make([]int64, len(advances))
	idList := make([]string, len(advances))
	events := make([]string, len(advances))
	for k, a := range advances {
		ids[k] = a.workID
		idList[k], events[k] = strconv.FormatInt(a.workID, 10), strconv.FormatInt(eventIDs[a.event], 10)
	}
	n, err := q.AdvanceProjections(ctx, gen.AdvanceProjectionsParams{WorkIDList: idList, EventIDList: events, WorkIDs: ids})
	if err != nil {
		return fmt.Errorf("advance %d projection generations: %w", len(ids), err)
	}
	if n != int64(len(ids)) {
		return fmt.Errorf("advance %d locked projection generations: %d matched", len(ids), n)
	}
	return nil
}

// handOff is the terminal handoff of projections whose claimed generation
// the caller's transaction just terminalized: their queued successors
// become active, blocked rows of their lanes, for the caller's promotion to
// place (seed 004 step 5). Items outside a projection hand off nothing.
func handOff(ctx context.Context, q *gen.Queries, finished ...*laneIdentity) error {
	var keys []sql.NullString
	for _, l := range finished {
		if l.projection.Valid {
			keys = append(keys, l.projection)
		}
	}
	if len(keys) == 0 {
		return nil
	}
	if _, err := q.ActivateQueuedProjections(ctx, keys); err != nil {
		return fmt.Errorf("activate %d queued projection successors: %w", len(keys), err)
	}
	return nil
}

// projectionInputPage bounds one ProjectionInput statement.
const projectionInputPage = 512

// ProjectionInput returns the input of a claimed projection generation
// (Claimed.ProjectionKey set): every event of its projection after the
// event the previous generation selected, through the one it selected, in
// admission order, including events a newer one replaced before the claim
// (seed 004 invariant 9). It never holds a later successor's events or
// earlier history. A per-event item's input is its own event. Reads are
// paged by 512 events, each page one range of idx_event_projection.
func (qu *Queue) ProjectionInput(ctx context.Context, c Claimed) ([]StoredEvent, error) {
	if c.ProjectionKey == "" {
		ev := c.Event
		if ev == nil {
			loaded, err := qu.LoadEvent(ctx, c.EventID)
			if err != nil {
				return nil, err
			}
			ev = &loaded
		}
		return []StoredEvent{*ev}, nil
	}
	through := int64(-1)
	if c.Event != nil && c.Event.EventID == c.EventID {
		through = c.Event.EnqueueOrdinal
	} else {
		ev, err := qu.LoadEvent(ctx, c.EventID)
		if err != nil {
			return nil, err
		}
		through = ev.EnqueueOrdinal
	}
	prev, err := qu.q.PreviousProjectionEvent(ctx, gen.PreviousProjectionEventParams{
		ProjectionKey: store.NullString(c.ProjectionKey), LaneOrdinal: c.LaneOrdinal, SelectedEventID: c.EventID,
	})
	if err != nil {
		return nil, fmt.Errorf("workqueue: projection input of work %d: previous generation: %w", c.WorkID, err)
	}
	after := int64(-1)
	if len(prev) > 0 {
		if after, err = qu.q.EventOrdinal(ctx, prev[0]); err != nil {
			return nil, fmt.Errorf("workqueue: projection input of work %d: previous generation's event %d: %w", c.WorkID, prev[0], err)
		}
	}
	var out []StoredEvent
	for {
		rows, err := qu.q.ProjectionInput(ctx, gen.ProjectionInputParams{
			ProjectionKey: store.NullString(c.ProjectionKey), AfterOrdinal: after, ThroughOrdinal: through, Limit: projectionInputPage,
		})
		if err != nil {
			return nil, fmt.Errorf("workqueue: projection input of work %d: %w", c.WorkID, err)
		}
		for _, r := range rows {
			out = append(out, storedEvent(r.Event))
			after = r.Event.EnqueueOrdinal
		}
		if len(rows) < projectionInputPage {
			return out, nil
		}
	}
}
