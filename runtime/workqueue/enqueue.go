package workqueue

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
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
	// WaitFor declares a prerequisite the item needs before any work: it is
	// claimed as usual, and a worker checks the keys before running it and
	// parks it (Queue.Wait) while none is satisfied. Nil for none.
	WaitFor *Dependency
	// Projection opts the item into source projection (seed 004's
	// latest_by_source mode): instead of one item per event, the events of
	// one projection (scope, route, route version, event kind, work type
	// and source lane) share a chain of generations, at most one active:
	//   - before it is claimed, the active generation advances to each
	//     newer event (its lane place and due time stay);
	//   - once claimed (running, waiting to retry or for a dependency),
	//     newer events collapse into one inactive queued successor, which
	//     neither runs nor blocks the lane;
	//   - completing, skipping or dead-lettering the claimed generation
	//     activates the successor in the same transaction; a retry keeps it
	//     inactive.
	// The handler reads a generation's whole input with
	// Queue.ProjectionInput: every event after the previous generation's
	// through its own, in admission order. Every event is still stored.
	// Needs a SourceLane (without one the item is per-event work, seed 004
	// step 7) and refuses a TargetLane, a WaitFor, and a second projected
	// work of the same event. A duplicate delivery is acknowledged as
	// covered and changes nothing.
	Projection bool
	// UniqueKey (printable ASCII without spaces, at most 128 bytes; empty
	// for none) makes the item unique while live in its scope and
	// generation: while an item enqueued with the same key is pending,
	// blocked, running, retrying or waiting, this one is not created live
	// and the enqueue reports that item (EnqueuedWork.Refused). The event
	// is still stored, and so is the refused item's record: terminal at
	// once, skipped with failure class FailureUniqueRefused, naming the
	// item that held the key; it never runs. Enqueueing the same event
	// again (its idempotency key) reports the same refusal, even once the
	// key is free: a refused item is never created late. Once the live
	// item is terminal (completed, skipped, dead) the key is free for new
	// events. Keys compare byte for byte. Not with a Projection, which
	// already keeps one live generation. A replay's child (Queue.Replay)
	// holds no key.
	UniqueKey string
	// RateKey (printable ASCII without spaces, at most 128 bytes; empty for
	// none) is the key the item's starts are counted under by a rate limit
	// per key (ratelimit.Limit.PerKey): a customer or an account whose
	// upstream takes N calls per period, whatever the other keys do.
	// Without such a limit it is stored and ignored.
	RateKey string
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
	State    string // pending (lane head), blocked (behind an earlier item), inactive (a queued projection successor), or the existing state
	Created  bool   // false when the item already existed
	// Projection is what happened to a projected work item (Projection*
	// constants); empty for per-event work. WorkID is the generation that
	// selects the event (0 when covered and none does any more).
	Projection string
	// Refused: an item with the same Work.UniqueKey was live when this
	// work was first enqueued (WorkID and State are that item's, its
	// current state; it may have been created earlier in the same batch).
	// No live item was created for this work, only its terminal record
	// (see Work.UniqueKey); a repeat of the event is refused the same way.
	Refused bool
}

// Enqueue writes events and their work items in one transaction and returns
// their ids in input order (Tx.Enqueue does it inside a caller's
// transaction). After the commit it announces the scope when it created
// work (see Announcement). It is idempotent: an event whose idempotency key
// exists is not written again and its existing work items are returned; a
// work type missing from an existing event is created.
//
// The transaction (pessimistic READ COMMITTED: every statement reads the
// latest commit) first locks the scope row, which serializes admission per
// scope and hands out enqueue ordinals in commit order; it then finds
// duplicates with locking reads, writes the events and items, and only then
// settles the lanes (see settleLanes): the lane rows it appends behind are
// locked for the batch's last few statements, so an enqueue into the lane of
// a running item does not hold up that item's lease renewal. Lock order:
// scope, events, work items, lane rows.
func (qu *Queue) Enqueue(ctx context.Context, scope string, events []Event) ([]EnqueuedEvent, error) {
	if err := qu.validateEnqueue(scope, events); err != nil {
		return nil, err
	}
	kinds := qu.newKinds(scope, events)
	var out []EnqueuedEvent
	err := qu.inRawTx(ctx, "enqueue", readCommitted, func(ctx context.Context, tx *sql.Tx, q *gen.Queries) error {
		var err error
		out, err = enqueueTx(ctx, q, tx, scope, events, kinds)
		return err
	})
	if err != nil {
		return nil, enqueueError(err)
	}
	qu.rememberKinds(kinds)
	if createdWork(out) {
		qu.announce(scope, delayed(events))
	}
	return out, nil
}

// workKind is a (queue class, work type) pair of a scope: see
// scope_work_kind.
type workKind struct{ scope, class, workType string }

// newKinds lists the batch's work kinds this Queue has not registered yet.
func (qu *Queue) newKinds(scope string, events []Event) []workKind {
	qu.kindsMu.Lock()
	defer qu.kindsMu.Unlock()
	seen := map[workKind]bool{}
	var out []workKind
	for _, ev := range events {
		for _, w := range ev.Work {
			k := workKind{scope, queueClass(w.QueueClass), w.WorkType}
			if !qu.kinds[k] && !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	return out
}

func (qu *Queue) rememberKinds(kinds []workKind) {
	qu.kindsMu.Lock()
	defer qu.kindsMu.Unlock()
	for _, k := range kinds {
		qu.kinds[k] = true
	}
}

func queueClass(c string) string {
	if c == "" {
		return "default"
	}
	return c
}

// enqueueTx is Enqueue's transaction. raw is the transaction itself, for the
// batch loads (nil: every row is inserted alone).
func enqueueTx(ctx context.Context, q *gen.Queries, raw *sql.Tx, scope string, events []Event, kinds []workKind) ([]EnqueuedEvent, error) {
	head, err := q.LockScopeForEnqueue(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return nil, fmt.Errorf("lock scope: %w", err)
	}
	for _, k := range kinds {
		if err := q.RegisterWorkKind(ctx, gen.RegisterWorkKindParams{ScopeID: k.scope, QueueClass: k.class, WorkType: k.workType}); err != nil {
			return nil, fmt.Errorf("register work kind %s/%s: %w", k.class, k.workType, err)
		}
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
	projectionOf := make(map[int64]bool, len(existing)) // existing events that feed a projection
	eventIDs := make([]int64, 0, len(existing))
	for _, e := range existing {
		eventByKey[e.IdempotencyKey] = e.EventID
		projectionOf[e.EventID] = e.ProjectionKey.Valid
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

	uniq, err := lockLiveUniqueKeys(ctx, q, scope, head.ActiveGeneration, events)
	if err != nil {
		return nil, err
	}
	// A work item refused for its unique key is stored as a record,
	// terminal at once (see Work.UniqueKey), once the item that held the
	// key has its id; a repeat of its event reports the same refusal.
	type refusal struct {
		event, work int // its place in out
		held        *uniqueHolder
		record      gen.InsertWorkItemParams
	}
	var refused []refusal
	var repeatedRefusals []refusal // refusals of an earlier enqueue of a duplicate event

	// Source projections (Work.Projection): each projection selects the
	// batch's newest new event of it (the others are in that generation's
	// input), so it is advanced or created once per batch. Its live
	// generations are locked before anything is written.
	projKey := make([]string, len(events)) // "" when the event feeds no projection
	projIdx := make([]int, len(events))    // index in ev.Work of its projected work
	newest := map[string]int{}             // projection key -> index of its newest new event
	var projKeys []string
	for i, ev := range events {
		j, ok := projected(ev)
		if !ok {
			continue
		}
		projIdx[i] = j
		projKey[i] = projectionKey(scope, head.ActiveGeneration, ev, ev.Work[j])
		if _, dup := eventByKey[ev.IdempotencyKey]; dup {
			continue
		}
		if _, seen := newest[projKey[i]]; !seen {
			projKeys = append(projKeys, projKey[i])
		}
		newest[projKey[i]] = i
	}
	live, err := lockProjections(ctx, q, projKeys)
	if err != nil {
		return nil, err
	}
	var advances []advance
	type workRef struct{ event, work int }
	var collapsed []workRef // results to copy from their projection's selected generation

	// Plan every new row in input order first (its ordinal, its values),
	// then write the events and the work items, each with one load when the
	// batch is large (see insertEvents): the statement count of a large
	// batch does not grow with its size.
	next := head.NextEnqueueOrdinal
	out := make([]EnqueuedEvent, len(events))
	var newEvents []gen.InsertEventParams
	var newEventAt []int // index in events of each of newEvents
	type plannedWork struct {
		event, work int // its place in out
		params      gen.InsertWorkItemParams
	}
	var works []plannedWork
	for i, ev := range events {
		res := &out[i]
		if id, dup := eventByKey[ev.IdempotencyKey]; dup {
			res.EventID, res.Duplicate = id, true
		} else {
			row := eventRow(scope, head.ActiveGeneration, next, ev)
			row.ProjectionKey = store.NullString(projKey[i])
			newEvents = append(newEvents, row)
			newEventAt = append(newEventAt, i)
		}
		made := 0 // work items this event creates
		for j, work := range ev.Work {
			proj := projKey[i] != "" && j == projIdx[i]
			got, exists := existingWork[workKey{res.EventID, work.WorkType}]
			switch {
			case res.Duplicate && exists && got.RefusedByWorkID.Valid:
				// The event's first enqueue was refused this work: the same
				// refusal, even once the key is free (a late item would run
				// work its enqueuer was told was refused).
				res.Work = append(res.Work, EnqueuedWork{WorkID: got.RefusedByWorkID.Int64, WorkType: got.WorkType, Refused: true})
				repeatedRefusals = append(repeatedRefusals, refusal{event: i, work: len(res.Work) - 1})
				continue
			case res.Duplicate && proj && projectionOf[res.EventID]:
				// Coverage (seed 004 step 11): the event is in the input of
				// the generation its first enqueue advanced or created.
				covered := EnqueuedWork{WorkType: work.WorkType, Projection: ProjectionCovered}
				if exists {
					covered.WorkID, covered.State = got.WorkID, got.State
				}
				res.Work = append(res.Work, covered)
				continue
			case res.Duplicate && exists:
				res.Work = append(res.Work, EnqueuedWork{WorkID: got.WorkID, WorkType: got.WorkType, State: got.State})
				continue
			case res.Duplicate && proj:
				return nil, invalidf("event %q exists without a projection: a projection's input is fixed when its event is first enqueued", ev.IdempotencyKey)
			}
			var uniqueKey sql.NullString
			if work.UniqueKey != "" {
				k := uniqueLiveKey(scope, head.ActiveGeneration, work.UniqueKey)
				if held := uniq[k]; held != nil {
					res.Work = append(res.Work, EnqueuedWork{WorkType: work.WorkType, Refused: true})
					refused = append(refused, refusal{event: i, work: len(res.Work) - 1, held: held, record: gen.InsertWorkItemParams{
						EventID:        res.EventID, // 0 for a new event until it is written
						ScopeID:        scope,
						Generation:     head.ActiveGeneration,
						WorkType:       work.WorkType,
						QueueClass:     queueClass(work.QueueClass),
						State:          StateSkipped,
						Priority:       work.Priority,
						LaneOrdinal:    next,
						FailureClass:   store.NullString(FailureUniqueRefused),
						FailureSummary: store.NullString(fmt.Sprintf("refused: unique key %q was held by a live item", work.UniqueKey)),
					}})
					made++
					next++
					continue
				}
				uniq[k] = &uniqueHolder{planned: len(works)}
				uniqueKey = store.NullString(k)
			}
			// An item in a lane is written blocked; settleLanes promotes
			// the lane heads once it has checked, under locks, what is ahead.
			state := StatePending
			if work.SourceLane != "" || work.TargetLane != "" {
				state = StateBlocked
			}
			var projCol, activeKey, queuedKey sql.NullString
			outcome := ""
			if proj {
				key := projKey[i]
				if newest[key] != i {
					res.Work = append(res.Work, EnqueuedWork{WorkType: work.WorkType, Projection: ProjectionCollapsed})
					collapsed = append(collapsed, workRef{i, len(res.Work) - 1})
					continue
				}
				step := live.step(key)
				if step.advance != 0 {
					advances = append(advances, advance{step.advance, i})
					res.Work = append(res.Work, EnqueuedWork{WorkID: step.advance, WorkType: work.WorkType, State: step.state, Projection: step.outcome})
					continue
				}
				projCol, outcome = store.NullString(key), step.outcome
				if step.outcome == ProjectionQueued {
					state, queuedKey = StateInactive, projCol
				} else {
					activeKey = projCol
				}
			}
			var wake sql.NullString
			var depKeys []byte
			if work.WaitFor != nil {
				if wake, depKeys, err = work.WaitFor.columns(); err != nil {
					return nil, err
				}
			}
			works = append(works, plannedWork{event: i, work: len(res.Work), params: gen.InsertWorkItemParams{
				EventID:       res.EventID, // 0 for a new event until it is written
				ScopeID:       scope,
				Generation:    head.ActiveGeneration,
				WorkType:      work.WorkType,
				QueueClass:    queueClass(work.QueueClass),
				State:         state,
				DelayMicros:   store.Micros(work.Delay),
				Priority:      work.Priority,
				SourceLaneKey: store.NullString(work.SourceLane),
				TargetLaneKey: store.NullString(work.TargetLane),
				LaneOrdinal:   next,

				DependencyWakeKey:   wake,
				DependencyKeys:      depKeys,
				ProjectionKey:       projCol,
				ProjectionActiveKey: activeKey,
				ProjectionQueuedKey: queuedKey,
				UniqueLiveKey:       uniqueKey,
				RateKey:             store.NullString(work.RateKey),
			}})
			res.Work = append(res.Work, EnqueuedWork{WorkType: work.WorkType, State: state, Created: true, Projection: outcome})
			made++
			next++
		}
		if !res.Duplicate && made == 0 { // an event without new work still takes its place in the order
			next++
		}
	}
	newIDs, err := insertEvents(ctx, q, raw, newEvents)
	if err != nil {
		return nil, err
	}
	for k, i := range newEventAt {
		out[i].EventID = newIDs[k]
	}
	batchEventIDs := make([]int64, len(out))
	for i := range out {
		batchEventIDs[i] = out[i].EventID
	}
	if err := advanceProjections(ctx, q, advances, batchEventIDs); err != nil {
		return nil, err
	}
	rows := make([]gen.InsertWorkItemParams, len(works))
	for k, w := range works {
		rows[k] = w.params
		rows[k].EventID = out[w.event].EventID
	}
	workIDs, err := insertWorkItems(ctx, q, raw, rows)
	if err != nil {
		return nil, err
	}
	var laned []lanedItem
	for k, w := range works {
		out[w.event].Work[w.work].WorkID = workIDs[k]
		if p := w.params; p.State == StateBlocked {
			laned = append(laned, lanedItem{workID: workIDs[k], source: p.SourceLaneKey.String, target: p.TargetLaneKey.String, event: w.event, work: w.work})
		}
	}
	heads, err := settleLanes(ctx, q, laned)
	if err != nil {
		return nil, err
	}
	for _, it := range heads {
		out[it.event].Work[it.work].State = StatePending
	}
	records := make([]gen.InsertWorkItemParams, len(refused))
	for k, r := range refused {
		held := r.held
		if held.planned >= 0 { // created earlier in this batch
			p := works[held.planned]
			held.workID, held.state = out[p.event].Work[p.work].WorkID, out[p.event].Work[p.work].State
		}
		w := &out[r.event].Work[r.work]
		w.WorkID, w.State = held.workID, held.state
		records[k] = r.record
		records[k].EventID = out[r.event].EventID
		records[k].RefusedByWorkID = sql.NullInt64{Int64: held.workID, Valid: true}
	}
	if _, err := insertWorkItems(ctx, q, raw, records); err != nil {
		return nil, fmt.Errorf("store the records of %d refused items: %w", len(records), err)
	}
	if len(repeatedRefusals) > 0 {
		// A repeated refusal reports the current state of the item that
		// held the key, as the first one did (one batch point get).
		holders := make([]int64, len(repeatedRefusals))
		for k, r := range repeatedRefusals {
			holders[k] = out[r.event].Work[r.work].WorkID
		}
		rows, err := q.LeaseStates(ctx, holders)
		if err != nil {
			return nil, fmt.Errorf("read the state of %d items that held refused unique keys: %w", len(holders), err)
		}
		stateOf := make(map[int64]string, len(rows))
		for _, r := range rows {
			stateOf[r.WorkID] = r.State
		}
		for _, r := range repeatedRefusals {
			w := &out[r.event].Work[r.work]
			w.State = stateOf[w.WorkID]
		}
	}
	for _, c := range collapsed {
		sel := newest[projKey[c.event]]
		j := projIdx[sel]
		w := &out[c.event].Work[c.work]
		w.WorkID, w.State = out[sel].Work[j].WorkID, out[sel].Work[j].State
	}
	if reserved := next - head.NextEnqueueOrdinal; reserved > 0 {
		if err := q.AdvanceEnqueueOrdinal(ctx, gen.AdvanceEnqueueOrdinalParams{Reserved: reserved, ScopeID: scope}); err != nil {
			return nil, fmt.Errorf("advance enqueue ordinal: %w", err)
		}
	}
	return out, nil
}

// MaxUniqueKey bounds Work.UniqueKey.
const MaxUniqueKey = 128

// FailureUniqueRefused is the failure class of a refused item's record: an
// enqueue whose Work.UniqueKey was held by a live item stores the item
// skipped with this class, naming the holder (work_item.refused_by_work_id).
const FailureUniqueRefused = "unique_refused"

// MaxRateKey bounds Work.RateKey (work_item.rate_key).
const MaxRateKey = 128

// uniqueHolder is the live item holding a unique key: an existing one
// (planned -1), or the planned item of this batch at works[planned].
type uniqueHolder struct {
	workID  int64
	state   string
	planned int
}

// uniqueLiveKey is the unique_live_key of key in scope and generation
// (scope ids and keys are printable ASCII: the newlines separate them).
func uniqueLiveKey(scope string, generation int64, key string) string {
	return fmt.Sprintf("%s\n%d\n%s", scope, generation, key)
}

// lockLiveUniqueKeys reads and locks the live items holding the unique
// keys of events' work (one batch point get; none without keys).
func lockLiveUniqueKeys(ctx context.Context, q *gen.Queries, scope string, generation int64, events []Event) (map[string]*uniqueHolder, error) {
	var keys []sql.NullString
	for _, ev := range events {
		for _, w := range ev.Work {
			if w.UniqueKey != "" {
				keys = append(keys, store.NullString(uniqueLiveKey(scope, generation, w.UniqueKey)))
			}
		}
	}
	out := map[string]*uniqueHolder{}
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := q.LockLiveUniqueKeys(ctx, keys)
	if err != nil {
		return nil, fmt.Errorf("find live items of %d unique keys: %w", len(keys), err)
	}
	for _, r := range rows {
		out[r.UniqueLiveKey.String] = &uniqueHolder{workID: r.WorkID, state: r.State, planned: -1}
	}
	return out, nil
}

// eventRow is the row of a new event.
func eventRow(scope string, generation, ordinal int64, ev Event) gen.InsertEventParams {
	payload := ev.Payload
	if payload == nil {
		payload = []byte{} // an empty payload, not SQL NULL
	}
	sum := sha256.Sum256(payload)
	return gen.InsertEventParams{
		ReceiptID:        sql.NullInt64{Int64: ev.ReceiptID, Valid: ev.ReceiptID != 0},
		ScopeID:          scope,
		Generation:       generation,
		RouteID:          ev.RouteID,
		RouteVersion:     ev.RouteVersion,
		EventKind:        ev.EventKind,
		SourceKind:       ev.SourceKind,
		SourceID:         ev.SourceID,
		DeliverySequence: ev.DeliverySequence,
		EnqueueOrdinal:   ordinal,
		IdempotencyKey:   ev.IdempotencyKey,
		PayloadHash:      sum[:],
		Payload:          payload,
	}
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
		projections := 0
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
			if w.WaitFor != nil {
				if err := w.WaitFor.Validate(); err != nil {
					return fmt.Errorf("event %d work %d: %w", i, j, err)
				}
			}
			if err := checkASCII(i, j, "UniqueKey", w.UniqueKey, 0, MaxUniqueKey); err != nil {
				return err
			}
			if err := checkASCII(i, j, "RateKey", w.RateKey, 0, MaxRateKey); err != nil {
				return err
			}
			if w.Projection && w.SourceLane != "" {
				switch {
				case w.UniqueKey != "":
					return invalidf("event %d work %d: a projection takes no UniqueKey (it keeps one live generation already)", i, j)
				case w.TargetLane != "":
					return invalidf("event %d work %d: a projection (it has a source lane) takes no TargetLane (seed 004 step 8)", i, j)
				case w.WaitFor != nil:
					return invalidf("event %d work %d: a projection takes no WaitFor", i, j)
				case projections > 0:
					return invalidf("event %d: more than one projected work item", i)
				}
				projections++
			}
		}
	}
	return nil
}

// checkLen bounds a string in characters, as the VARCHAR columns do, and
// refuses invalid UTF-8 (which an INSERT refuses and a batch load would
// replace with '?').
func checkLen(what string, i int, field, v string, minLen, maxLen int) error {
	if !utf8.ValidString(v) {
		return invalidf("%s %d: %s must be valid UTF-8", what, i, field)
	}
	if n := utf8.RuneCountInString(v); n < minLen || n > maxLen {
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

// ValidWorkType returns an error wrapping ErrInvalid unless s can name a
// work type: 1..64 printable ASCII characters without spaces (Enqueue's
// rule), for callers that register handlers before anything is enqueued.
func ValidWorkType(s string) error {
	if len(s) < 1 || len(s) > 64 {
		return invalidf("work type must be 1..64 ASCII characters, got %d bytes", len(s))
	}
	for k := 0; k < len(s); k++ {
		if s[k] < 0x21 || s[k] > 0x7e {
			return invalidf("work type %q must be printable ASCII without spaces", s)
		}
	}
	return nil
}
