package scheduler_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

// TestSlotTakesNextItemWhileOutcomeCommits: a slot is free once its
// handler returns, while the outcome commits; the item keeps its budget
// row until the commit, so the budget bounds items running plus items
// committing.
func TestSlotTakesNextItemWhileOutcomeCommits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		budget      int
		secondStart int // items the second turn starts while the first item's outcome commits
	}{
		{"default budget", 0, 1},
		{"budget of one row per slot", 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(classItems("default", 0, 3)...)
			commit := make(chan struct{})
			committing := make(chan int, 3)
			b.beforeFinish = func(it item) { committing <- it.id; <-commit }
			// Nothing claimed ahead: this is about the slot and the commit.
			s := start(t, b, scheduler.Config{Executors: 1, MaxProcessingRows: tc.budget, ClaimAhead: -1})
			var once sync.Once
			unblock := func() { once.Do(func() { close(commit) }) }
			t.Cleanup(unblock) // before Stop: a failed check must not leave Stop waiting on a commit
			claim := func() controller.ClaimBatch {
				t.Helper()
				batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
				if err != nil {
					t.Fatal(err)
				}
				return batch
			}
			if got := claim().Started; got != 1 {
				t.Fatalf("first turn started %d", got)
			}
			if id := <-committing; id != 0 {
				t.Fatalf("item %d committing first", id)
			}
			if tc.secondStart > 0 {
				waitCapacity(t, s, b, 1) // the slot, not the commit
			}
			if got := claim().Started; got != tc.secondStart {
				t.Fatalf("second turn started %d while item 0 commits, want %d", got, tc.secondStart)
			}
			if tc.secondStart > 0 {
				<-committing // item 1 ran and commits beside item 0
				if got := claim().Started; got != 0 {
					t.Fatalf("a third item started with two rows committing on a budget of two: %d", got)
				}
			}
			if n := b.finishedCount(); n != 0 {
				t.Fatalf("%d outcomes recorded before any commit", n)
			}
			unblock()
			waitFinished(t, b, 1+tc.secondStart)
			waitCapacity(t, s, b, 1)
			if got := claim().Started; got != 1 {
				t.Fatalf("after the commits a turn started %d", got)
			}
			waitFinished(t, b, 1)
		})
	}
}

// TestStopWaitsForCommittingOutcomes: Stop returns only after every
// outcome still committing was written.
func TestStopWaitsForCommittingOutcomes(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 3)...)
	commit := make(chan struct{})
	committing := make(chan int, 3)
	b.beforeFinish = func(it item) { committing <- it.id; <-commit }
	s, err := scheduler.New[item](b, scheduler.Config{Executors: 3, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil || batch.Started != 3 {
		t.Fatalf("turn %+v %v", batch, err)
	}
	for range 3 {
		<-committing // every handler returned; every outcome is committing
	}
	stopped := make(chan int)
	go func() {
		s.Stop()
		stopped <- b.finishedCount()
	}()
	close(commit)
	if n := <-stopped; n != 3 {
		t.Fatalf("Stop returned with %d of 3 outcomes written", n)
	}
}

// TestContinuationGathersSlotsComingBack: a continuation turn that finds
// its shape's slots busy waits (up to ClaimGather) for them to come back
// and claims for all of them in one call; without the gather it claims
// for the slots free at its start, here none.
func TestContinuationGathersSlotsComingBack(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gather time.Duration
		want   int
	}{
		{"gather until the slots are back", time.Hour, 3},
		{"gather disabled", -1, 0},
		{"gather window ends first", time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newFakeBackend(classItems("default", 0, 6)...)
			release := make(chan struct{})
			running := make(chan int, 6)
			b.handle = func(_ context.Context, it item) error {
				running <- it.id
				if it.id < 3 {
					<-release
				}
				return nil
			}
			s := start(t, b, scheduler.Config{Executors: 3, ClaimGather: tc.gather})
			first, err := s.ClaimTurn(context.Background(), controller.Turn{})
			if err != nil || first.Started != 3 || !first.More {
				t.Fatalf("first turn %+v %v", first, err)
			}
			for range 3 {
				<-running
			}
			calls := b.calls.Load()
			type result struct {
				batch controller.ClaimBatch
				err   error
			}
			done := make(chan result)
			go func() {
				batch, err := s.ClaimTurn(context.Background(), controller.Turn{Continuation: true})
				done <- result{batch, err}
			}()
			if tc.want == 0 {
				// The handlers stay busy until the turn returned.
				r := <-done
				close(release)
				if r.err != nil || r.batch.Started != 0 {
					t.Fatalf("continuation %+v %v with every slot busy", r.batch, r.err)
				}
				waitFinished(t, b, 3)
				return
			}
			close(release)
			r := <-done
			if r.err != nil || r.batch.Started != tc.want {
				t.Fatalf("continuation %+v %v, want %d started", r.batch, r.err, tc.want)
			}
			if got := b.calls.Load() - calls; got != 1 {
				t.Fatalf("%d backend calls for the continuation turn", got)
			}
			waitFinished(t, b, 6)
		})
	}
}

// TestBudgetDeniedHungryShapeKeepsTheTurnGoing: a turn whose only budget
// row went to a shape without work (the bulk shape here, first in this
// turn's rotation) still reports More for the hungry shapes the budget
// denied, so the controller claims for them once capacity frees instead
// of waiting for the next event.
func TestBudgetDeniedHungryShapeKeepsTheTurnGoing(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 10)...)
	lim, err := scheduler.NewBudgetLimiter(1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, b, scheduler.Config{Executors: 4, Profile: scheduler.ProfileReserved, Limiter: lim})
	// Rotation: latency, shared, then bulk first. Each of the first two
	// turns claims one default item for the shape it starts with.
	for turn, want := range []int{1, 1, 0} {
		waitCapacity(t, s, b, 1)
		batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
		if err != nil || batch.Started != want {
			t.Fatalf("turn %d: %+v %v, want %d started", turn, batch, err, want)
		}
		if !batch.More {
			t.Fatalf("turn %d: no More with hungry shapes denied by the budget: %+v (requests %+v)", turn, batch, b.Requests())
		}
		if turn < 2 {
			waitFinished(t, b, 1)
		}
	}
	if got := b.Requests(); got[len(got)-1].Shape != "bulk" {
		t.Fatalf("the last turn claimed for %+v, want the bulk shape", got[len(got)-1])
	}
}
