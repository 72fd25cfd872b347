package workqueue_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// adversarialEvents is a batch whose values a tab-separated load could get
// wrong: every byte the load format escapes, bytes that are not UTF-8 in a
// payload, a literal \N, keys that differ by a trailing space, multi-byte
// characters at the column limits, empty and NULL-able fields, lanes,
// delays, classes and dependencies. Each event has at most three work
// items, so enqueued one by one they take the per-row path.
func adversarialEvents() []workqueue.Event {
	payloads := [][]byte{
		[]byte("tab\there\nnewline\\backslash\x00nul\r\x1actrlz"),
		{0xff, 0xfe, 0x00, 0x80, '\\', 'N'},
		[]byte(`\N`),
		nil,
		[]byte(`{"json": "\t"}`),
	}
	keys := []string{"k", "k ", `\N`, "tab\tkey", "日本語のキー", strings.Repeat("é", 255), "back\\slash", "line\nkey"}
	var evs []workqueue.Event
	for i, key := range keys {
		ev := workqueue.Event{
			IdempotencyKey:   key,
			ReceiptID:        int64(i % 2 * (i + 100)),
			RouteID:          []string{"", "route\t1", strings.Repeat("ß", 128)}[i%3],
			RouteVersion:     int64(i),
			EventKind:        "kind",
			SourceKind:       "src",
			SourceID:         fmt.Sprintf("source-%d", i%3),
			DeliverySequence: int64(-i),
			Payload:          payloads[i%len(payloads)],
		}
		switch i % 4 {
		case 0:
			ev.Work = []workqueue.Work{{WorkType: "deliver"}}
		case 1:
			ev.Work = []workqueue.Work{
				{WorkType: "deliver", SourceLane: "lane ", TargetLane: "target\t"},
				{WorkType: "audit", QueueClass: "bulk", Delay: 90 * time.Second, Priority: -3},
			}
		case 2:
			ev.Work = []workqueue.Work{
				{WorkType: "deliver", SourceLane: "lane"},
				{WorkType: "notify", SourceLane: "lane ", WaitFor: &workqueue.Dependency{WakeKey: "wake\n", Keys: []string{"a", "a ", `\N`}}},
				{WorkType: "audit", TargetLane: strings.Repeat("ü", 255)},
			}
		case 3: // an event without work still takes its ordinal
		}
		evs = append(evs, ev)
	}
	return evs
}

// eventFacts and workFacts are the stored rows without ids and timestamps.
type eventFacts struct {
	ReceiptID                                            sql.NullInt64
	Scope, RouteID, EventKind, SourceKind, SourceID, Key string
	Generation, RouteVersion, DeliverySequence, Ordinal  int64
	PayloadHash, Payload                                 []byte
}

type workFacts struct {
	EventKey, Scope, WorkType, QueueClass, State string
	// DelaySeconds is rounded to 30s (the test's delays are 0 and 90s): on
	// a busy server created_at and run_after can come from statements
	// seconds apart, and both paths must carry the delay, not the clock.
	Generation, LaneOrdinal, DelaySeconds           int64
	Priority                                        int32
	SourceLane, TargetLane, WakeKey, DependencyKeys sql.NullString
	ProjectionKey                                   sql.NullString
}

func storedEvents(t *testing.T, db *sql.DB, scope string) []eventFacts {
	t.Helper()
	rows, err := db.Query(`SELECT receipt_id, scope_id, route_id, event_kind, source_kind, source_id, idempotency_key,
		generation, route_version, delivery_sequence, enqueue_ordinal, payload_hash, payload
		FROM event WHERE scope_id = ? ORDER BY enqueue_ordinal`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []eventFacts
	for rows.Next() {
		var e eventFacts
		if err := rows.Scan(&e.ReceiptID, &e.Scope, &e.RouteID, &e.EventKind, &e.SourceKind, &e.SourceID, &e.Key,
			&e.Generation, &e.RouteVersion, &e.DeliverySequence, &e.Ordinal, &e.PayloadHash, &e.Payload); err != nil {
			t.Fatal(err)
		}
		e.Scope = ""
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func storedWork(t *testing.T, db *sql.DB, scope string) []workFacts {
	t.Helper()
	rows, err := db.Query(`SELECT e.idempotency_key, w.scope_id, w.work_type, w.queue_class, w.state,
		w.generation, w.lane_ordinal, 30 * ROUND(TIMESTAMPDIFF(MICROSECOND, w.created_at, w.run_after) / 30000000), w.priority,
		w.source_lane_key, w.target_lane_key, w.dependency_wake_key, CAST(w.dependency_keys AS CHAR), w.projection_key
		FROM work_item w JOIN event e ON e.event_id = w.event_id
		WHERE w.scope_id = ? ORDER BY w.lane_ordinal`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []workFacts
	for rows.Next() {
		var w workFacts
		if err := rows.Scan(&w.EventKey, &w.Scope, &w.WorkType, &w.QueueClass, &w.State,
			&w.Generation, &w.LaneOrdinal, &w.DelaySeconds, &w.Priority,
			&w.SourceLane, &w.TargetLane, &w.WakeKey, &w.DependencyKeys, &w.ProjectionKey); err != nil {
			t.Fatal(err)
		}
		w.Scope = ""
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// A batch written by the loads stores exactly what the same events store
// when enqueued one by one through per-row inserts, byte for byte, and
// Enqueue reports the ids the rows got.
func TestEnqueueBatchLoadMatchesPerRowInserts(t *testing.T) {
	t.Parallel()
	const loaded, perRow = "scope-loaded", "scope-per-row"
	qu, db, _ := queuetest.New(t, workqueue.Config{}, loaded)
	ctx := context.Background()
	if err := qu.EnsureScope(ctx, perRow, 1); err != nil {
		t.Fatal(err)
	}
	evs := adversarialEvents()
	got, err := qu.Enqueue(ctx, loaded, evs)
	if err != nil {
		t.Fatalf("batch enqueue: %v", err)
	}
	for _, ev := range evs {
		if _, err := qu.Enqueue(ctx, perRow, []workqueue.Event{ev}); err != nil {
			t.Fatalf("per-row enqueue of %q: %v", ev.IdempotencyKey, err)
		}
	}
	loadedEvents, perRowEvents := storedEvents(t, db, loaded), storedEvents(t, db, perRow)
	if len(loadedEvents) != len(evs) {
		t.Fatalf("batch stored %d events, want %d", len(loadedEvents), len(evs))
	}
	if d := cmp.Diff(perRowEvents, loadedEvents); d != "" {
		t.Fatalf("events: per-row (-) vs loaded (+):\n%s", d)
	}
	for i, e := range loadedEvents {
		want := evs[i].Payload
		if want == nil {
			want = []byte{}
		}
		if e.Key != evs[i].IdempotencyKey || !bytes.Equal(e.Payload, want) {
			t.Fatalf("event %d stored key %q payload %q, want %q %q", i, e.Key, e.Payload, evs[i].IdempotencyKey, want)
		}
	}
	loadedWork, perRowWork := storedWork(t, db, loaded), storedWork(t, db, perRow)
	if d := cmp.Diff(perRowWork, loadedWork); d != "" {
		t.Fatalf("work items: per-row (-) vs loaded (+):\n%s", d)
	}
	var items int
	for i, ev := range got {
		items += len(ev.Work)
		var id int64
		if err := db.QueryRow(`SELECT event_id FROM event WHERE scope_id = ? AND idempotency_key = ?`, loaded, evs[i].IdempotencyKey).Scan(&id); err != nil || id != ev.EventID {
			t.Fatalf("event %d: reported id %d, stored %d (%v)", i, ev.EventID, id, err)
		}
		for _, w := range ev.Work {
			var workType, state string
			if err := db.QueryRow(`SELECT work_type, state FROM work_item WHERE work_id = ? AND event_id = ?`, w.WorkID, ev.EventID).Scan(&workType, &state); err != nil {
				t.Fatalf("event %d: reported work id %d: %v", i, w.WorkID, err)
			}
			if workType != w.WorkType || state != w.State || !w.Created {
				t.Fatalf("event %d: reported %+v, stored type %s state %s", i, w, workType, state)
			}
		}
	}
	if items != len(loadedWork) {
		t.Fatalf("reported %d work items, stored %d", items, len(loadedWork))
	}
	// Enqueued again, the batch is all duplicates and writes nothing.
	again, err := qu.Enqueue(ctx, loaded, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range again {
		if !ev.Duplicate || ev.EventID != got[i].EventID {
			t.Fatalf("re-enqueued event %d: %+v, want the duplicate of %d", i, ev, got[i].EventID)
		}
	}
	if n := len(storedWork(t, db, loaded)); n != len(loadedWork) {
		t.Fatalf("re-enqueue left %d work items, want %d", n, len(loadedWork))
	}
	// Enqueued again with a work type each lacks: no new event, and the
	// missing items, one per event, are loaded for the existing events.
	for i := range evs {
		evs[i].Work = append(evs[i].Work, workqueue.Work{WorkType: "late"})
	}
	late, err := qu.Enqueue(ctx, loaded, evs)
	if err != nil {
		t.Fatal(err)
	}
	for i, ev := range late {
		w := ev.Work[len(ev.Work)-1]
		if !ev.Duplicate || w.WorkType != "late" || !w.Created {
			t.Fatalf("event %d with a late work type: %+v", i, ev)
		}
		var eventID int64
		if err := db.QueryRow(`SELECT event_id FROM work_item WHERE work_id = ? AND work_type = 'late'`, w.WorkID).Scan(&eventID); err != nil || eventID != got[i].EventID {
			t.Fatalf("event %d: late item %d stored for event %d (%v), want %d", i, w.WorkID, eventID, err, got[i].EventID)
		}
	}
	if n := len(storedWork(t, db, loaded)); n != len(loadedWork)+len(evs) {
		t.Fatalf("%d work items after the late types, want %d", n, len(loadedWork)+len(evs))
	}
}

// A large batch costs the same statements as a small one: the loads write
// any number of rows with one statement each.
func TestEnqueueBatchStatementsDoNotGrowWithTheBatch(t *testing.T) {
	t.Parallel()
	_, _, dsn := queuetest.New(t, workqueue.Config{}, scope)
	qu, counter := queuetest.Counted(t, dsn, workqueue.Config{MaxEnqueueBatch: 5000})
	ctx := context.Background()
	batch := func(prefix string, n int) []workqueue.Event {
		evs := make([]workqueue.Event, n)
		for i := range evs {
			evs[i] = workqueue.Event{IdempotencyKey: fmt.Sprintf("%s-%d", prefix, i), Payload: []byte("{}"), Work: []workqueue.Work{
				{WorkType: "deliver", SourceLane: fmt.Sprintf("%s-lane-%d", prefix, i%(n/4))},
				{WorkType: "audit"},
			}}
		}
		return evs
	}
	// Warm up: the first enqueue registers the work kinds.
	if _, err := qu.Enqueue(ctx, scope, batch("warm", 8)); err != nil {
		t.Fatal(err)
	}
	var counts []int64
	for _, n := range []int{8, 2000} {
		before := counter.Executed()
		if _, err := qu.Enqueue(ctx, scope, batch(fmt.Sprint("b", n), n)); err != nil {
			t.Fatalf("enqueue %d: %v", n, err)
		}
		counts = append(counts, counter.Executed()-before)
	}
	t.Logf("statements per enqueue: %d for 8 events, %d for 2,000 (each with 2 work items, one in a lane)", counts[0], counts[1])
	if counts[1] != counts[0] {
		t.Fatalf("a 2,000-event enqueue ran %d statements, an 8-event one %d: the count grows with the batch", counts[1], counts[0])
	}
}
