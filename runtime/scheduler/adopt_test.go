package scheduler_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

// Adopted items run on the shape's slots, beyond its free places, and take
// over the budget rows of finishing items instead of being admitted: with
// the budget spent by claims, a finishing item's follower still runs, the
// claim turns meanwhile get nothing more, and once everything finished the
// budget and the places are whole again.
func TestAdoptTakesOverFinishingRows(t *testing.T) {
	b := newFakeBackend(classItems("default", 100, 4)...)
	release := make(chan struct{})
	adopted := make(chan struct{})
	var s *scheduler.Scheduler[item]
	b.handle = func(ctx context.Context, it item) error {
		if it.id < 100 {
			return nil // the adopted item
		}
		<-release
		return nil
	}
	b.beforeFinish = func(it item) {
		if it.id == 100 { // as a completion batch would: adopt its follower before its row is given back
			s.Adopt("shared", []item{{id: 1, class: "default"}}, time.Now())
			close(adopted)
		}
	}
	s = start(t, b, scheduler.Config{Executors: 2, ClaimAhead: -1, MaxProcessingRows: 2})
	full := s.FreeSlots()
	if batch, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil || batch.Started != 2 {
		t.Fatalf("claim turn: %+v %v, want the 2 rows of the budget", batch, err)
	}
	close(release)
	<-adopted
	got := waitFinished(t, b, 3) // 100, 101 and the adopted 1
	slices.Sort(got)
	if got[0] != 1 {
		t.Fatalf("finished %v, want the adopted item among them", got)
	}
	waitCapacity(t, s, b, 2)
	if diff := cmp.Diff(full, s.FreeSlots()); diff != "" {
		t.Fatalf("free slots after everything finished (-before +after):\n%s", diff)
	}
	if st := s.Stats(); st.Adopted != 1 || st.Claimed != 3 {
		t.Fatalf("stats %+v: want 1 adopted of 3 claimed", st)
	}
	// The budget is whole: a turn claims both remaining items.
	if batch, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil || batch.Started != 2 {
		t.Fatalf("claim turn after: %+v %v, want 2", batch, err)
	}
}

// An item adopted after Stop is finished as a shutdown (released), never
// left in a queue nobody reads.
func TestAdoptAfterStopReleases(t *testing.T) {
	b := newFakeBackend()
	s := start(t, b, scheduler.Config{Executors: 4})
	s.Stop()
	if n := s.Adopt("shared", []item{{id: 7, class: "default"}}, time.Now()); n != 0 {
		t.Fatalf("adopted %d after Stop", n)
	}
	waitFinished(t, b, 1)
	if err := b.outcome(7); err != scheduler.ErrShutdown {
		t.Fatalf("outcome %v, want ErrShutdown", err)
	}
}
