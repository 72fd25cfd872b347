package operate_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/operate"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-a/pack-1"

// A bulk replay by filter replays exactly the matching dead letters, in
// batches with progress; running it again creates nothing; the other
// filter's items are untouched.
func TestBulkReplayByFilter(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	in := inspect.NewFromQueue(qu)
	ctx := context.Background()
	sync := queuetest.Dead(t, qu, scope, "sync", "rejected", 250)
	other := queuetest.Dead(t, qu, scope, "mail", "rejected", 30)

	var seen []operate.Progress
	bulk := operate.BulkReplay{Scope: scope, Filter: inspect.DeadLetterQuery{WorkType: "sync"}, Batch: 64}
	p, err := operate.Replay(ctx, qu, in, bulk, func(p operate.Progress) { seen = append(seen, p) })
	if err != nil {
		t.Fatalf("bulk replay: %v", err)
	}
	// 280 dead entries in batches of 64: five batches, the last short.
	if p.Replayed != 250 || p.Matched != 250 || p.Scanned != 280 || p.Batches != 5 || !p.Done || p.AlreadyReplayed != 0 {
		t.Fatalf("progress %+v, want 250 of 280 replayed in 5 batches", p)
	}
	if len(seen) != 5 || seen[0].Scanned != 64 || seen[4] != p {
		t.Fatalf("progress reports %+v, want one per batch ending with the result", seen)
	}
	children := func(ids []int64) int {
		t.Helper()
		n := 0
		for _, id := range ids {
			var c int
			if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE replay_of_work_id = ?", id).Scan(&c); err != nil {
				t.Fatal(err)
			}
			n += c
		}
		return n
	}
	if n := children(sync); n != 250 {
		t.Fatalf("%d children of the 250 sync items, want one each", n)
	}
	if n := children(other); n != 0 {
		t.Fatalf("%d children of items the filter does not match", n)
	}
	again, err := operate.Replay(ctx, qu, in, bulk, nil)
	if err != nil || again.Replayed != 0 || again.AlreadyReplayed != 250 {
		t.Fatalf("second bulk replay = %+v, %v; want nothing replayed, 250 already", again, err)
	}
	if n := children(sync); n != 250 {
		t.Fatalf("%d children after the second run, want still 250", n)
	}
}

func TestBulkReplayRefusesBadInput(t *testing.T) {
	t.Parallel()
	qu, _, _ := queuetest.New(t, workqueue.Config{}, scope)
	in := inspect.NewFromQueue(qu)
	for _, bulk := range []operate.BulkReplay{
		{Scope: scope, Batch: inspect.MaxPageSize + 1},
		{Scope: scope, Batch: -1},
		{Scope: ""},
	} {
		if _, err := operate.Replay(context.Background(), qu, in, bulk, nil); !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("%+v: %v, want inspect.ErrInvalid", bulk, err)
		}
	}
	if _, err := operate.Replay(context.Background(), qu, in, operate.BulkReplay{Scope: "tenant-none"}, nil); err == nil {
		t.Error("a bulk replay of an unknown scope succeeded")
	}
}

// A bulk skip by work type skips the unclaimed items of that type (lane
// followers, lane heads, not-due items, laneless items), hands each lane
// to the next item of another type in lane order, leaves other types and
// held items alone, and skips nothing when run again.
func TestBulkSkipByWorkType(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	in := inspect.NewFromQueue(qu)
	ctx := context.Background()
	works := []workqueue.Work{
		{WorkType: "sync", SourceLane: "a"}, {WorkType: "mail", SourceLane: "a"}, {WorkType: "sync", SourceLane: "a"}, // head, follower, follower
		{WorkType: "sync", SourceLane: "b", Delay: time.Hour}, // a not-due head
		{WorkType: "sync"}, {WorkType: "mail"}, {WorkType: "held"},
	}
	var w []workqueue.EnqueuedWork
	for i, work := range works { // one event each: an event has each work type once
		key := fmt.Sprintf("e%d", i)
		res, err := qu.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s",
			SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{work}}})
		if err != nil {
			t.Fatal(err)
		}
		w = append(w, res[0].Work[0])
	}
	cl, err := qu.NewClaimer(scope, "bulk-skip-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"held"}, Max: 1})
	if err != nil || len(held) != 1 {
		t.Fatalf("claim held: %d, %v", len(held), err)
	}
	for _, bad := range []operate.BulkSkip{{Scope: scope}, {Scope: scope, WorkType: "bad type"}, {Scope: scope, WorkType: "sync", Batch: 501}} {
		if _, err := operate.Skip(ctx, qu, in, bad, nil); !errors.Is(err, inspect.ErrInvalid) && !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%+v: %v, want an invalid-input error", bad, err)
		}
	}
	var reports int
	p, err := operate.Skip(ctx, qu, in, operate.BulkSkip{Scope: scope, WorkType: "sync", Reason: "bad deploy", Batch: 2}, func(operate.SkipProgress) { reports++ })
	if err != nil || p.Skipped != 4 || p.Matched != 4 || p.Refused != 0 || !p.Done || reports != p.Batches {
		t.Fatalf("bulk skip = %+v (%d reports), %v; want 4 skipped", p, reports, err)
	}
	want := map[int64]string{w[0].WorkID: "skipped", w[1].WorkID: "pending", w[2].WorkID: "skipped", w[3].WorkID: "skipped",
		w[4].WorkID: "skipped", w[5].WorkID: "pending", w[6].WorkID: "processing"}
	for id, state := range want {
		if got := queuetest.Item(t, db, id).State; got != state {
			t.Errorf("item %d is %s, want %s", id, got, state)
		}
	}
	again, err := operate.Skip(ctx, qu, in, operate.BulkSkip{Scope: scope, WorkType: "sync"}, nil)
	if err != nil || again.Skipped != 0 || again.Matched != 0 {
		t.Fatalf("second bulk skip = %+v, %v; want nothing", again, err)
	}
}

// A bulk skip by failure class skips only the retries whose last attempt
// failed with it, within the due-time range.
func TestBulkSkipByFailureClass(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: time.Hour}}, scope)
	in := inspect.NewFromQueue(qu)
	ctx := context.Background()
	var events []workqueue.Event
	for i := range 3 {
		key := fmt.Sprintf("e%d", i)
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "sync"}}})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	cl, err := qu.NewClaimer(scope, "bulk-skip-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"sync"}, Max: 3})
	if err != nil || len(got) != 3 {
		t.Fatalf("claimed %d, %v", len(got), err)
	}
	failures := []string{"upstream_5xx", "timeout", "upstream_5xx"}
	for i, c := range got {
		if _, err := qu.Retry(ctx, c, workqueue.Failure{Class: failures[i], Summary: "try later"}); err != nil {
			t.Fatal(err)
		}
	}
	// Due in an hour: a range that ends before then skips nothing.
	none, err := operate.Skip(ctx, qu, in, operate.BulkSkip{Scope: scope, FailureClass: "upstream_5xx", To: time.Now().Add(30 * time.Minute)}, nil)
	if err != nil || none.Skipped != 0 {
		t.Fatalf("bulk skip before their due time = %+v, %v; want nothing", none, err)
	}
	p, err := operate.Skip(ctx, qu, in, operate.BulkSkip{Scope: scope, FailureClass: "upstream_5xx"}, nil)
	if err != nil || p.Skipped != 2 {
		t.Fatalf("bulk skip by failure class = %+v, %v; want 2", p, err)
	}
	for i, c := range got {
		want := map[bool]string{true: "skipped", false: "pending"}[failures[i] == "upstream_5xx"]
		if s := queuetest.Item(t, db, c.WorkID).State; s != want {
			t.Errorf("item %d (%s) is %s, want %s", c.WorkID, failures[i], s, want)
		}
	}
}
