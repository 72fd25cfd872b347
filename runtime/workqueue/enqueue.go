package workqueue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// Event is one immutable fact to enqueue together with the work it asks for.
type Event struct {
	// IdempotencyKey identifies the fact within its scope: enqueueing the
	// same key again is a duplicate delivery and changes nothing.
	IdempotencyKey   string
	ReceiptID        int64 // the ingress receipt it came from; 0 for none
	RouteID          string
	RouteVersion     int64
	EventKind        string
	SourceKind       string
	SourceID         string
	DeliverySequence int64
	Payload          []byte
	Work             []Work
}

// Work is one work item to create for an event; each WorkType at most once.
type Work struct {
	WorkType   string
	QueueClass string // default "default"
	// SourceLane and TargetLane serialize items (empty: no such lane). An
	// item runs only once every earlier item of both its lanes finished.
	SourceLane string
	TargetLane string
	// Delay postpones the first attempt; due = database NOW(6) + Delay.
	Delay time.Duration
	// Priority is stored for operators and for schedulers to come; claim
	// order does not use it yet (it is lane ordinal, then due time).
	Priority int32
}

// EnqueuedEvent reports what Enqueue did for one input event.
type EnqueuedEvent struct {
	EventID   int64
	Duplicate bool // the idempotency key already existed; the event was not written again
	Work      []EnqueuedWork
}

// EnqueuedWork reports one work item of an enqueued event.
type EnqueuedWork struct {
	WorkID   int64
	WorkType string
	State    string // pending (lane head) or blocked (behind an earlier item), or the existing state
	Created  bool   // false when the item already existed
}

// Enqueue writes events and their work items in one transaction and returns
// their ids in input order. It is idempotent: an event whose idempotency key
// exists is not written again and its existing work items are returned; a
// work type missing from an existing event is created.
//
// The transaction first locks the scope row, which serializes admission per
// scope and hands out enqueue ordinals in commit order; it then finds
// duplicates with locking (current) reads, so an event committed by another
// enqueuer while this one waited is seen instead of failing on a duplicate
// key. Lock order: scope, events, work items, lane rows.
func (qu *Queue) Enqueue(ctx context.Context, scope string, events []Event) ([]EnqueuedEvent, error) {
	if err := qu.validateEnqueue(scope, events); err != nil {
		return nil, err
	}
	var out []EnqueuedEvent
	err := qu.inTx(ctx, "enqueue", nil, func(q *gen.Queries) error {
		var err error
		out, err = enqueueTx(ctx, q, scope, events)
		return err
	})
	if mysqlErrno(err) == errDuplicateEntry {
		// Enqueue's own duplicates are found under the scope lock before any
		// insert; a duplicate key here means another writer bypassed it.
		return nil, fmt.Errorf("%w: %w", ErrConflict, err)
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

func enqueueTx(ctx context.Context, q *gen.Queries, scope string, events []Event) ([]EnqueuedEvent, error) {
	head, err := q.LockScopeForEnqueue(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return nil, fmt.Errorf("lock scope: %w", err)
	}
	keys := make([]string, len(events))
	for i, ev := range events {
		keys[i] = ev.IdempotencyKey
	}
	existing, err := q.LockEventsByIdempotencyKeys(ctx, gen.LockEventsByIdempotencyKeysParams{ScopeID: scope, IdempotencyKeys: keys})
	if err != nil {
		return nil, fmt.Errorf("find duplicate events: %w", err)
	}
	eventByKey := make(map[string]int64, len(existing))
	eventIDs := make([]int64, 0, len(existing))
	for _, e := range existing {
		eventByKey[e.IdempotencyKey] = e.EventID
		eventIDs = append(eventIDs, e.EventID)
	}
	type workKey struct {
		eventID  int64
		workType string
	}
	existingWork := map[workKey]gen.LockWorkItemsByEventsRow{}
	if len(eventIDs) > 0 {
		rows, err := q.LockWorkItemsByEvents(ctx, eventIDs)
		if err != nil {
			return nil, fmt.Errorf("find existing work items: %w", err)
		}
		for _, r := range rows {
			existingWork[workKey{r.EventID, r.WorkType}] = r
		}
	}

	w := laneWriter{q: q, scope: scope, generation: head.ActiveGeneration, next: head.NextEnqueueOrdinal}
	out := make([]EnqueuedEvent, len(events))
	for i, ev := range events {
		res := EnqueuedEvent{}
		if id, dup := eventByKey[ev.IdempotencyKey]; dup {
			res.EventID, res.Duplicate = id, true
		} else {
			payload := ev.Payload
			if payload == nil {
				payload = []byte{} // an empty payload, not SQL NULL
			}
			sum := sha256.Sum256(payload)
			id, err := q.InsertEvent(ctx, gen.InsertEventParams{
				ReceiptID:        sql.NullInt64{Int64: ev.ReceiptID, Valid: ev.ReceiptID != 0},
				ScopeID:          scope,
				Generation:       head.ActiveGeneration,
				RouteID:          ev.RouteID,
				RouteVersion:     ev.RouteVersion,
				EventKind:        ev.EventKind,
				SourceKind:       ev.SourceKind,
				SourceID:         ev.SourceID,
				DeliverySequence: ev.DeliverySequence,
				EnqueueOrdinal:   w.next,
				IdempotencyKey:   ev.IdempotencyKey,
				PayloadHash:      sum[:],
				Payload:          payload,
			})
			if err != nil {
				return nil, fmt.Errorf("insert event %q: %w", ev.IdempotencyKey, err)
			}
			res.EventID = id
			if len(ev.Work) == 0 { // an event without work still takes its place in the order
				w.next++
			}
		}
		for _, work := range ev.Work {
			if got, ok := existingWork[workKey{res.EventID, work.WorkType}]; ok {
				res.Work = append(res.Work, EnqueuedWork{WorkID: got.WorkID, WorkType: got.WorkType, State: got.State})
				continue
			}
			created, err := w.insert(ctx, res.EventID, work)
			if err != nil {
				return nil, fmt.Errorf("event %q: %w", ev.IdempotencyKey, err)
			}
			res.Work = append(res.Work, created)
		}
		out[i] = res
	}
	if reserved := w.next - head.NextEnqueueOrdinal; reserved > 0 {
		if err := q.AdvanceEnqueueOrdinal(ctx, gen.AdvanceEnqueueOrdinalParams{Reserved: reserved, ScopeID: scope}); err != nil {
			return nil, fmt.Errorf("advance enqueue ordinal: %w", err)
		}
	}
	return out, nil
}

// laneWriter inserts work items at the tail of their lanes. Each item takes
// the next enqueue ordinal of the scope, so lane order is admission order and
// no two items share a position.
type laneWriter struct {
	q          *gen.Queries
	scope      string
	generation int64
	next       int64
}

func (w *laneWriter) insert(ctx context.Context, eventID int64, work Work) (EnqueuedWork, error) {
	ordinal := w.next
	w.next++
	blocked, err := liveBefore(ctx, w.q, w.scope, w.generation, work.SourceLane, work.TargetLane, ordinal, true)
	if err != nil {
		return EnqueuedWork{}, err
	}
	state := StatePending
	if blocked {
		state = StateBlocked
	}
	class := work.QueueClass
	if class == "" {
		class = "default"
	}
	id, err := w.q.InsertWorkItem(ctx, gen.InsertWorkItemParams{
		EventID:       eventID,
		ScopeID:       w.scope,
		Generation:    w.generation,
		WorkType:      work.WorkType,
		QueueClass:    class,
		State:         state,
		DelayMicros:   micros(work.Delay),
		Priority:      work.Priority,
		SourceLaneKey: nullString(work.SourceLane),
		TargetLaneKey: nullString(work.TargetLane),
		LaneOrdinal:   ordinal,
	})
	if err != nil {
		return EnqueuedWork{}, fmt.Errorf("insert work item %q: %w", work.WorkType, err)
	}
	return EnqueuedWork{WorkID: id, WorkType: work.WorkType, State: state, Created: true}, nil
}

// liveBefore reports whether either lane holds a live item ahead of ordinal.
// With locking, the reads lock what they find (enqueue; see
// LockLiveBeforeInSourceLane); without, they are plain reads for the READ
// COMMITTED finish transaction (see LiveBeforeInSourceLane).
func liveBefore(ctx context.Context, q *gen.Queries, scope string, generation int64, sourceLane, targetLane string, ordinal int64, locking bool) (bool, error) {
	probes := []struct {
		lane, kind string
		run        func(gen.LiveBeforeInSourceLaneParams) ([]int64, error)
	}{
		{sourceLane, "source", func(p gen.LiveBeforeInSourceLaneParams) ([]int64, error) {
			if locking {
				return q.LockLiveBeforeInSourceLane(ctx, gen.LockLiveBeforeInSourceLaneParams(p))
			}
			return q.LiveBeforeInSourceLane(ctx, p)
		}},
		{targetLane, "target", func(p gen.LiveBeforeInSourceLaneParams) ([]int64, error) {
			if locking {
				return q.LockLiveBeforeInTargetLane(ctx, gen.LockLiveBeforeInTargetLaneParams(p))
			}
			return q.LiveBeforeInTargetLane(ctx, gen.LiveBeforeInTargetLaneParams(p))
		}},
	}
	for _, probe := range probes {
		if probe.lane == "" {
			continue
		}
		ids, err := probe.run(gen.LiveBeforeInSourceLaneParams{
			ScopeID: scope, Generation: generation, LaneKey: nullString(probe.lane), BeforeOrdinal: ordinal,
		})
		if err != nil {
			return false, fmt.Errorf("probe %s lane: %w", probe.kind, err)
		}
		if len(ids) > 0 {
			return true, nil
		}
	}
	return false, nil
}

func (qu *Queue) validateEnqueue(scope string, events []Event) error {
	if err := validScope(scope); err != nil {
		return err
	}
	if len(events) == 0 || len(events) > qu.cfg.MaxEnqueueBatch {
		return invalidf("enqueue takes 1..%d events, got %d", qu.cfg.MaxEnqueueBatch, len(events))
	}
	keys := make(map[string]bool, len(events))
	for i, ev := range events {
		if err := checkLen("event", i, "IdempotencyKey", ev.IdempotencyKey, 1, 255); err != nil {
			return err
		}
		if keys[ev.IdempotencyKey] {
			return invalidf("event %d: idempotency key %q appears twice in one batch", i, ev.IdempotencyKey)
		}
		keys[ev.IdempotencyKey] = true
		for _, f := range []struct {
			name, v string
			max     int
		}{{"RouteID", ev.RouteID, 128}, {"EventKind", ev.EventKind, 128}, {"SourceKind", ev.SourceKind, 128}, {"SourceID", ev.SourceID, 255}} {
			if err := checkLen("event", i, f.name, f.v, 0, f.max); err != nil {
				return err
			}
		}
		if ev.ReceiptID < 0 {
			return invalidf("event %d: ReceiptID must not be negative", i)
		}
		types := map[string]bool{}
		for j, w := range ev.Work {
			if err := checkASCII(i, j, "WorkType", w.WorkType, 1, 64); err != nil {
				return err
			}
			if err := checkASCII(i, j, "QueueClass", w.QueueClass, 0, 32); err != nil {
				return err
			}
			if types[w.WorkType] {
				return invalidf("event %d: work type %q appears twice", i, w.WorkType)
			}
			types[w.WorkType] = true
			if err := checkLen("event", i, "SourceLane", w.SourceLane, 0, 255); err != nil {
				return err
			}
			if err := checkLen("event", i, "TargetLane", w.TargetLane, 0, 255); err != nil {
				return err
			}
			if w.Delay < 0 {
				return invalidf("event %d work %d: Delay must not be negative, got %s", i, j, w.Delay)
			}
		}
	}
	return nil
}

// checkLen bounds a string in characters, as the VARCHAR columns do.
func checkLen(what string, i int, field, v string, minLen, maxLen int) error {
	if n := len([]rune(v)); n < minLen || n > maxLen {
		return invalidf("%s %d: %s must be %d..%d characters, got %d", what, i, field, minLen, maxLen, n)
	}
	return nil
}

func checkASCII(i, j int, field, v string, minLen, maxLen int) error {
	if len(v) < minLen || len(v) > maxLen {
		return invalidf("event %d work %d: %s must be %d..%d ASCII characters, got %d bytes", i, j, field, minLen, maxLen, len(v))
	}
	for k := 0; k < len(v); k++ {
		if v[k] < 0x21 || v[k] > 0x7e {
			return invalidf("event %d work %d: %s must be printable ASCII without spaces", i, j, field)
		}
	}
	return nil
}
