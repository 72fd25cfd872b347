// Package queries_test exercises the generated catalog (../gen) against real
// TiDB. The tests sit next to the SQL they prove.
package queries_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scopeID = "tenant-a/pack-1"

func newEvent(key string, ordinal int64) gen.InsertEventParams {
	payload := []byte(`{"kind":"contact.updated","id":"c-1"}`)
	hash := sha256.Sum256(payload)
	return gen.InsertEventParams{
		ScopeID:          scopeID,
		Generation:       1,
		RouteID:          "route-contacts",
		RouteVersion:     3,
		EventKind:        "contact.updated",
		SourceKind:       "contact",
		SourceID:         "c-1",
		DeliverySequence: 7,
		EnqueueOrdinal:   ordinal,
		IdempotencyKey:   key,
		PayloadHash:      hash[:],
		Payload:          payload,
	}
}

// dbNow reads the server clock; created_at defaults come from it.
func dbNow(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRow("SELECT NOW(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

func requireDuplicateKey(t *testing.T, err error, key string) {
	t.Helper()
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1062 {
		t.Fatalf("err = %v, want MySQL 1062 duplicate entry on %s", err, key)
	}
	if !strings.Contains(me.Message, key) {
		t.Fatalf("duplicate error %q does not name %s", me.Message, key)
	}
}

func TestEventAndWorkItemRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tidbtest.NewDB(t)
	q := gen.New(db)

	if err := q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: scopeID, ActiveGeneration: 1}); err != nil {
		t.Fatal(err)
	}
	before := dbNow(t, db)

	eventIn := newEvent("delivery-1/0", 1)
	eventID, err := q.InsertEvent(ctx, eventIn)
	if err != nil {
		t.Fatalf("insert event: %v", err)
	}
	workIn := gen.InsertWorkItemParams{
		EventID:       eventID,
		ScopeID:       scopeID,
		Generation:    1,
		WorkType:      "deliver",
		QueueClass:    "interactive",
		State:         "pending",
		DelayMicros:   (90 * time.Second).Microseconds(),
		SourceLaneKey: sql.NullString{String: "contact:c-1", Valid: true},
		LaneOrdinal:   1,
	}
	workID, err := q.InsertWorkItem(ctx, workIn)
	if err != nil {
		t.Fatalf("insert work item: %v", err)
	}
	after := dbNow(t, db)

	wantEvent := gen.Event{
		EventID:          eventID,
		ScopeID:          eventIn.ScopeID,
		Generation:       eventIn.Generation,
		RouteID:          eventIn.RouteID,
		RouteVersion:     eventIn.RouteVersion,
		EventKind:        eventIn.EventKind,
		SourceKind:       eventIn.SourceKind,
		SourceID:         eventIn.SourceID,
		DeliverySequence: eventIn.DeliverySequence,
		EnqueueOrdinal:   eventIn.EnqueueOrdinal,
		IdempotencyKey:   eventIn.IdempotencyKey,
		PayloadHash:      eventIn.PayloadHash,
		Payload:          eventIn.Payload,
	}
	// Server-assigned timestamps are checked against the server clock, then
	// ignored in the structural comparison.
	ignoreStamps := cmpopts.IgnoreFields(gen.Event{}, "CreatedAt")
	gotEvent, err := q.GetEvent(ctx, eventID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantEvent, gotEvent, ignoreStamps); diff != "" {
		t.Fatalf("GetEvent (-want +got):\n%s", diff)
	}
	if gotEvent.CreatedAt.Before(before) || gotEvent.CreatedAt.After(after) {
		t.Fatalf("event created_at %s outside [%s, %s]", gotEvent.CreatedAt, before, after)
	}
	byKey, err := q.GetEventByIdempotencyKey(ctx, gen.GetEventByIdempotencyKeyParams{ScopeID: scopeID, IdempotencyKey: "delivery-1/0"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gotEvent, byKey); diff != "" {
		t.Fatalf("GetEventByIdempotencyKey (-GetEvent +byKey):\n%s", diff)
	}

	wantWork := gen.WorkItem{
		WorkID:        workID,
		EventID:       eventID,
		ScopeID:       scopeID,
		Generation:    1,
		WorkType:      "deliver",
		QueueClass:    "interactive",
		State:         "pending",
		SourceLaneKey: sql.NullString{String: "contact:c-1", Valid: true},
		LaneOrdinal:   1,
		// Defaults: no attempts, no lease, token 0, no projection, not terminal.
	}
	gotWork, err := q.GetWorkItem(ctx, workID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantWork, gotWork, cmpopts.IgnoreFields(gen.WorkItem{}, "CreatedAt", "UpdatedAt", "RunAfter")); diff != "" {
		t.Fatalf("GetWorkItem (-want +got):\n%s", diff)
	}
	// run_after is the database clock at insert plus the delay.
	if due := gotWork.RunAfter.Sub(gotWork.CreatedAt); due != 90*time.Second {
		t.Fatalf("run_after - created_at = %s, want the 90s delay", due)
	}
	if gotWork.CreatedAt.Before(before) || gotWork.CreatedAt.After(after) || !gotWork.UpdatedAt.Equal(gotWork.CreatedAt) {
		t.Fatalf("work item stamps created %s updated %s outside [%s, %s]", gotWork.CreatedAt, gotWork.UpdatedAt, before, after)
	}
	byEvent, err := q.GetWorkItemByEventAndType(ctx, gen.GetWorkItemByEventAndTypeParams{ReplayDepth: 0, EventID: eventID, WorkType: "deliver"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(gotWork, byEvent); diff != "" {
		t.Fatalf("GetWorkItemByEventAndType (-GetWorkItem +byEvent):\n%s", diff)
	}
	if _, err := q.GetWorkItem(ctx, workID+1); !errors.Is(err, sql.ErrNoRows) {
		t.Fatalf("GetWorkItem of a missing id: err = %v, want sql.ErrNoRows", err)
	}
}

func TestUniqueness(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tidbtest.NewDB(t)
	q := gen.New(db)

	eventID, err := q.InsertEvent(ctx, newEvent("delivery-2/0", 1))
	if err != nil {
		t.Fatal(err)
	}
	// Same idempotency key in the same scope: the same fact, rejected.
	_, err = q.InsertEvent(ctx, newEvent("delivery-2/0", 2))
	requireDuplicateKey(t, err, "uk_event_idempotency")
	// The same key in another scope is another fact.
	other := newEvent("delivery-2/0", 1)
	other.ScopeID = "tenant-b/pack-1"
	if _, err := q.InsertEvent(ctx, other); err != nil {
		t.Fatalf("same idempotency key in another scope: %v", err)
	}

	work := gen.InsertWorkItemParams{
		EventID: eventID, ScopeID: scopeID, Generation: 1, WorkType: "deliver",
		QueueClass: "default", State: "pending", LaneOrdinal: 1,
	}
	if _, err := q.InsertWorkItem(ctx, work); err != nil {
		t.Fatal(err)
	}
	_, err = q.InsertWorkItem(ctx, work)
	requireDuplicateKey(t, err, "uk_work_item_event_type")

	// Another work type for the same event is distinct work.
	work.WorkType = "audit"
	if _, err := q.InsertWorkItem(ctx, work); err != nil {
		t.Fatalf("second work type for the event: %v", err)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE event_id = ?", eventID).Scan(&n); err != nil || n != 2 {
		t.Fatalf("work items for the event = %d, %v; want 2", n, err)
	}

	// At most one active generation per projection.
	proj := work
	proj.WorkType = "project"
	proj.ProjectionKey = sql.NullString{String: "csp:contact:c-1", Valid: true}
	proj.ProjectionActiveKey = proj.ProjectionKey
	if _, err := q.InsertWorkItem(ctx, proj); err != nil {
		t.Fatal(err)
	}
	successorEvent, err := q.InsertEvent(ctx, newEvent("delivery-3/0", 2))
	if err != nil {
		t.Fatal(err)
	}
	proj.EventID = successorEvent
	_, err = q.InsertWorkItem(ctx, proj)
	requireDuplicateKey(t, err, "uk_work_item_projection_active")
	// A queued successor (projection key set, active key NULL) is allowed.
	proj.ProjectionActiveKey = sql.NullString{}
	if _, err := q.InsertWorkItem(ctx, proj); err != nil {
		t.Fatalf("queued successor: %v", err)
	}
}

func TestEnqueueOrdinalReservation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tidbtest.NewDB(t)
	q := gen.New(db)
	if err := q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: scopeID, ActiveGeneration: 4}); err != nil {
		t.Fatal(err)
	}
	// EnsureScope never resets an existing scope.
	if err := q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: scopeID, ActiveGeneration: 1}); err != nil {
		t.Fatal(err)
	}

	reserve := func(n int64) int64 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		qt := q.WithTx(tx)
		row, err := qt.LockScopeForEnqueue(ctx, scopeID)
		if err != nil {
			t.Fatal(err)
		}
		if row.ActiveGeneration != 4 {
			t.Fatalf("active generation = %d, want 4 (EnsureScope must not overwrite)", row.ActiveGeneration)
		}
		if err := qt.AdvanceEnqueueOrdinal(ctx, gen.AdvanceEnqueueOrdinalParams{Reserved: n, ScopeID: scopeID}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		return row.NextEnqueueOrdinal
	}
	if first, second := reserve(3), reserve(2); first != 1 || second != 4 {
		t.Fatalf("reserved blocks start at %d and %d, want 1 and 4", first, second)
	}
	s, err := q.GetScope(ctx, scopeID)
	if err != nil {
		t.Fatal(err)
	}
	if s.NextEnqueueOrdinal != 6 {
		t.Fatalf("next ordinal = %d, want 6", s.NextEnqueueOrdinal)
	}
}
