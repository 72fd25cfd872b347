package workqueue_test

import (
	"fmt"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// Rows stranded by a head finished outside laneq (no promotion ran) are
// promoted by the recovery pass, one page at a time from its cursor; rows
// that a live head or an earlier blocked row still holds back are not, and
// a second round promotes nothing more. With pages of one row, and with
// one page holding every row (first and second, stranded in one lane, are
// judged by the same statements at once: second sees first ahead).
func TestRecoverLanesPromotesOnlyStrandedRows(t *testing.T) {
	t.Parallel()
	for _, page := range []int{1, 100} {
		t.Run(fmt.Sprintf("page=%d", page), func(t *testing.T) { testRecoverLanes(t, page) })
	}
}

func testRecoverLanes(t *testing.T, page int) {
	f := newFixture(t, workqueue.Config{})
	held := f.one(workqueue.Work{SourceLane: "held"})
	heldFollower := f.one(workqueue.Work{SourceLane: "held"})
	gone := f.one(workqueue.Work{SourceLane: "stranded", TargetLane: "target"})
	first := f.one(workqueue.Work{SourceLane: "stranded"})
	second := f.one(workqueue.Work{SourceLane: "stranded"})
	viaTarget := f.one(workqueue.Work{TargetLane: "target"})
	for id, want := range map[int64]string{held: "pending", heldFollower: "blocked", gone: "pending", first: "blocked", second: "blocked", viaTarget: "blocked"} {
		if got := f.state(id); got != want {
			t.Fatalf("work %d is %s before, want %s", id, got, want)
		}
	}
	// Finished by hand: its followers in both lanes are never promoted.
	f.exec("UPDATE work_item SET state = 'completed', terminal_at = NOW(6) WHERE work_id = ?", gone)

	var cursor workqueue.LaneCursor
	var promoted, checked, pages int
	for {
		r, err := f.qu.RecoverLanes(f.ctx, scope, cursor, page)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		promoted += r.Promoted
		checked += r.Checked
		cursor = r.Next
		if r.Wrapped {
			break
		}
		if pages > 10 {
			t.Fatal("the pass never wrapped")
		}
	}
	// first heads "stranded" now; viaTarget heads "target" (its only lane);
	// second is behind first, heldFollower behind a live head.
	want := map[int64]string{held: "pending", heldFollower: "blocked", first: "pending", second: "blocked", viaTarget: "pending"}
	for id, w := range want {
		if got := f.state(id); got != w {
			t.Errorf("work %d is %s after recovery, want %s", id, got, w)
		}
	}
	if promoted != 2 || checked != 4 {
		t.Fatalf("promoted %d of %d checked rows in %d pages of %d, want 2 of 4", promoted, checked, pages, page)
	}
	again, err := f.qu.RecoverLanes(f.ctx, scope, workqueue.LaneCursor{}, 100)
	if err != nil || again.Promoted != 0 || again.Checked != 2 || !again.Wrapped {
		t.Fatalf("second round: %+v, %v; want 2 checked, none promoted", again, err)
	}
	// The recovered heads run, and finishing them promotes as usual.
	c := f.claimer("w1")
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 3 {
		t.Fatalf("claimed %v, want held, first and viaTarget", ids(got))
	}
	for _, it := range got {
		f.complete(it)
	}
	if s := f.state(second); s != "pending" {
		t.Fatalf("second is %s after first finished, want pending", s)
	}
	if _, err := f.qu.RecoverLanes(f.ctx, scope, workqueue.LaneCursor{}, 0); err == nil {
		t.Fatal("a page of 0 rows was accepted")
	}
}
