package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/laneq/laneq/gen"
)

// StoredEvent is an event as executors read it: the immutable input of its
// work items.
type StoredEvent struct {
	EventID          int64
	ReceiptID        int64
	RouteID          string
	RouteVersion     int64
	EventKind        string
	SourceKind       string
	SourceID         string
	DeliverySequence int64
	// EnqueueOrdinal is the event's place in its scope's admission order.
	EnqueueOrdinal int64
	IdempotencyKey string
	Payload        []byte
	CreatedAt      time.Time
}

// LoadEvent reads an event by id (a primary-key point read).
func (qu *Queue) LoadEvent(ctx context.Context, eventID int64) (StoredEvent, error) {
	e, err := qu.q.GetEvent(ctx, eventID)
	if err != nil {
		return StoredEvent{}, fmt.Errorf("workqueue: load event %d: %w", eventID, err)
	}
	return storedEvent(e), nil
}

// LoadEvents reads events by id in one batch point get, keyed by id; ids
// that name no event are absent from the result.
func (qu *Queue) LoadEvents(ctx context.Context, eventIDs []int64) (map[int64]StoredEvent, error) {
	rows, err := qu.q.GetEvents(ctx, eventIDs)
	if err != nil {
		return nil, fmt.Errorf("workqueue: load %d events: %w", len(eventIDs), err)
	}
	out := make(map[int64]StoredEvent, len(rows))
	for _, e := range rows {
		out[e.EventID] = storedEvent(e)
	}
	return out, nil
}

// storedEvent is the one mapper from an event row to what executors read;
// every statement that reads events reads them whole (sqlc.embed).
func storedEvent(e gen.Event) StoredEvent {
	return StoredEvent{
		EventID: e.EventID, ReceiptID: e.ReceiptID.Int64, RouteID: e.RouteID, RouteVersion: e.RouteVersion,
		EventKind: e.EventKind, SourceKind: e.SourceKind, SourceID: e.SourceID,
		DeliverySequence: e.DeliverySequence, EnqueueOrdinal: e.EnqueueOrdinal, IdempotencyKey: e.IdempotencyKey,
		Payload: e.Payload, CreatedAt: e.CreatedAt,
	}
}

// Generation is a value that changes whenever the scope's admission state
// does: a new active generation or any enqueue (which advances the next
// enqueue ordinal). One primary-key point read; a controller probes it to
// learn about work other processes enqueued without scanning for it.
func (qu *Queue) Generation(ctx context.Context, scope string) (uint64, error) {
	sc, err := qu.q.GetScope(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return 0, fmt.Errorf("workqueue: probe scope %q: %w", scope, err)
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d", sc.ActiveGeneration, sc.NextEnqueueOrdinal)
	return h.Sum64(), nil
}

// WorkKind is a (queue class, work type) pair a scope was given work of.
type WorkKind struct{ QueueClass, WorkType string }

// WorkKinds lists the pairs the scope has ever been given work of (see
// Enqueue): one primary-key prefix read, as small as the number of pairs.
func (qu *Queue) WorkKinds(ctx context.Context, scope string) ([]WorkKind, error) {
	rows, err := qu.q.ListWorkKinds(ctx, scope)
	if err != nil {
		return nil, fmt.Errorf("workqueue: work kinds of scope %q: %w", scope, err)
	}
	out := make([]WorkKind, len(rows))
	for i, r := range rows {
		out[i] = WorkKind{QueueClass: r.QueueClass, WorkType: r.WorkType}
	}
	return out, nil
}
