package workqueue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/workqueue"
)

// TestRateKeyIsReadWithTheClaim: an item's RateKey (what a rate limit per
// key counts its start under) is stored by both enqueue paths (one INSERT
// each for a small batch, LOAD DATA for a large one), comes back on the
// claim, and is kept by a replay's child. Keys that are not printable
// ASCII without spaces, or too long, are refused; a key with a trailing
// space is refused rather than taken for the key without it (the column
// pads with spaces).
func TestRateKeyIsReadWithTheClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	ev := func(n int, rateKey string) workqueue.Event {
		key := fmt.Sprintf("ev-%d", n)
		return workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", RateKey: rateKey}}}
	}
	want := map[int64]string{}
	small := []workqueue.Event{ev(1, "customer-1"), ev(2, "")}
	var large []workqueue.Event
	for i := range 8 { // past loadMinRows: one LOAD DATA
		large = append(large, ev(10+i, fmt.Sprintf("customer-%d", i%3)))
	}
	for _, batch := range [][]workqueue.Event{small, large} {
		res, err := f.qu.Enqueue(f.ctx, scope, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range res {
			want[r.Work[0].WorkID] = batch[i].Work[0].RateKey
		}
	}
	c := f.claimer("w")
	got := map[int64]string{}
	var deadID int64
	for _, it := range f.claim(c, workqueue.ClaimRequest{Max: 20}) {
		got[it.WorkID] = it.RateKey
		if it.RateKey == "customer-1" && deadID == 0 {
			deadID = it.WorkID
			if _, err := f.qu.Dead(f.ctx, it.Lease, workqueue.Failure{Class: "broken", Summary: "for replay"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("rate keys claimed (-enqueued +claimed):\n%s", diff)
	}
	child, err := f.qu.Replay(f.ctx, scope, deadID)
	if err != nil {
		t.Fatal(err)
	}
	again := f.claim(c, workqueue.ClaimRequest{Max: 20})
	if len(again) != 1 || again[0].WorkID != child.WorkID || again[0].RateKey != "customer-1" {
		t.Fatalf("the replay's child claimed as %+v, want item %d with rate key customer-1", again, child.WorkID)
	}
	for name, key := range map[string]string{
		"too long":       string(make([]byte, workqueue.MaxRateKey+1)),
		"space":          "customer 1",
		"trailing space": "customer-1 ",
		"non-ascii":      "клиент",
	} {
		_, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev(100, key)})
		if !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}
