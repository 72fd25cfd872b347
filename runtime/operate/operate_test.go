package operate_test

import (
	"context"
	"errors"
	"os"
	"testing"

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
