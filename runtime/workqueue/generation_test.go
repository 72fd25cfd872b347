package workqueue_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// activeGeneration reads the scope row's generation fence.
func (f *fixture) activeGeneration(scopeID string) int64 {
	f.t.Helper()
	var g int64
	if err := f.db.QueryRow("SELECT active_generation FROM scope WHERE scope_id = ?", scopeID).Scan(&g); err != nil {
		f.t.Fatal(err)
	}
	return g
}

// generation6Work moves the scope to generation 6, enqueues its work (a lane
// head and its blocked follower, a projection) and moves the scope on to 7.
func (f *fixture) generation6Work() (head, follower, projected int64) {
	f.t.Helper()
	if err := f.qu.SetGeneration(f.ctx, scope, 6); err != nil {
		f.t.Fatal(err)
	}
	head = f.one(workqueue.Work{SourceLane: "lane"})
	follower = f.one(workqueue.Work{SourceLane: "lane"})
	projected = f.one(workqueue.Work{SourceLane: "proj", Projection: true})
	if err := f.qu.SetGeneration(f.ctx, scope, 7); err != nil {
		f.t.Fatal(err)
	}
	return head, follower, projected
}

// TestLateSetGenerationIsRefused: a set-generation 6 that arrives after 7
// (a delayed command, a slow deployer) must not move the fence back: it
// would make generation 6's items, lanes and projections claimable again.
// It is refused with a *GenerationError naming both generations, and
// changes nothing.
func TestLateSetGenerationIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	head, follower, projected := f.generation6Work()

	err := f.qu.SetGeneration(f.ctx, scope, 6)
	if err == nil {
		t.Errorf("a late set-generation 6 after 7 was accepted")
	}
	var ge *workqueue.GenerationError
	if !errors.Is(err, workqueue.ErrGenerationNotAhead) || !errors.As(err, &ge) {
		t.Errorf("late 6: err = %v, want a *GenerationError matching ErrGenerationNotAhead", err)
	} else if *ge != (workqueue.GenerationError{Scope: scope, Active: 7, Requested: 6}) {
		t.Errorf("late 6: %+v, want scope %q, active 7, requested 6", *ge, scope)
	}
	if errors.Is(err, workqueue.ErrUnknownScope) {
		t.Errorf("late 6: err = %v matches ErrUnknownScope", err)
	}
	if g := f.activeGeneration(scope); g != 7 {
		t.Errorf("active generation %d after the late 6, want 7", g)
	}
	if got := f.claim(f.claimer("w"), workqueue.ClaimRequest{}); len(got) != 0 {
		t.Errorf("claimed %v of generation 6 (head %d, follower %d, projection %d) after the late 6", ids(got), head, follower, projected)
	}
	// Generation 7 runs as before: its lane is not blocked by generation 6's.
	fresh := f.one(workqueue.Work{SourceLane: "lane"})
	if got := f.claim(f.claimer("w"), workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != fresh {
		t.Errorf("claimed %v, want generation 7's %d", ids(got), fresh)
	}

	// Unknown scopes and bad input stay what they were.
	if err := f.qu.SetGeneration(f.ctx, "no-such-scope", 6); !errors.Is(err, workqueue.ErrUnknownScope) || errors.Is(err, workqueue.ErrGenerationNotAhead) {
		t.Errorf("unknown scope: err = %v, want ErrUnknownScope only", err)
	}
	if err := f.qu.SetGeneration(f.ctx, scope, 0); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("generation 0: err = %v, want ErrInvalid", err)
	}
}

// TestSetGenerationAgainIsANoOp: setting the active generation again (a
// command retried after its reply was lost) succeeds and changes nothing.
func TestSetGenerationAgainIsANoOp(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	if err := f.qu.SetGeneration(f.ctx, scope, 1); err != nil {
		t.Fatalf("the scope's own generation 1: %v", err)
	}
	for i := range 2 {
		if err := f.qu.SetGeneration(f.ctx, scope, 7); err != nil {
			t.Fatalf("set 7, call %d: %v", i+1, err)
		}
	}
	if g := f.activeGeneration(scope); g != 7 {
		t.Fatalf("active generation %d, want 7", g)
	}
	item := f.one(workqueue.Work{SourceLane: "lane"})
	if err := f.qu.SetGeneration(f.ctx, scope, 7); err != nil {
		t.Fatal(err)
	}
	if got := f.claim(f.claimer("w"), workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != item {
		t.Fatalf("claimed %v after setting 7 again, want generation 7's %d", ids(got), item)
	}
}

// TestRollbackGeneration: the deliberate override moves the fence back, and
// generation 6's work is claimable again, lane order and projection
// included; generation 7's is fenced.
func TestRollbackGeneration(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	head, follower, projected := f.generation6Work()
	newer := f.one(workqueue.Work{SourceLane: "other"})

	if err := f.qu.RollbackGeneration(f.ctx, scope, 6); err != nil {
		t.Fatal(err)
	}
	if g := f.activeGeneration(scope); g != 6 {
		t.Fatalf("active generation %d after the rollback, want 6", g)
	}
	c := f.claimer("w")
	got := f.claim(c, workqueue.ClaimRequest{})
	if want := sorted([]int64{head, projected}); fmt.Sprint(sorted(ids(got))) != fmt.Sprint(want) {
		t.Fatalf("claimed %v after the rollback, want generation 6's lane head and projection %v (not follower %d nor generation 7's %d)", ids(got), want, follower, newer)
	}
	for _, cl := range got {
		if cl.WorkID == head {
			if _, err := f.qu.Complete(f.ctx, cl.Lease); err != nil {
				t.Fatal(err)
			}
		}
	}
	if next := f.claim(c, workqueue.ClaimRequest{}); len(next) != 1 || next[0].WorkID != follower {
		t.Fatalf("claimed %v after the head finished, want its follower %d", ids(next), follower)
	}
	// The rolled-back generation is active: setting it again is a no-op,
	// and the ordinary path moves forward again.
	if err := f.qu.SetGeneration(f.ctx, scope, 6); err != nil {
		t.Fatal(err)
	}
	if err := f.qu.SetGeneration(f.ctx, scope, 7); err != nil {
		t.Fatal(err)
	}

	if err := f.qu.RollbackGeneration(f.ctx, "no-such-scope", 6); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("unknown scope: err = %v, want ErrUnknownScope", err)
	}
	if err := f.qu.RollbackGeneration(f.ctx, scope, 0); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("generation 0: err = %v, want ErrInvalid", err)
	}
}

// TestRacingSetGenerationEndsAtTheHighest: set-generation 6 and 7 race from
// two goroutines, in fresh scopes, many rounds. Whatever order the database
// serializes them in, the scope ends at 7: 7 always succeeds, 6 either
// landed first or is refused with the generation it lost to.
func TestRacingSetGenerationEndsAtTheHighest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	refused := 0
	for round := range 30 {
		sc := fmt.Sprintf("race-%d", round)
		if err := f.qu.EnsureScope(f.ctx, sc, 1); err != nil {
			t.Fatal(err)
		}
		var start, done sync.WaitGroup
		start.Add(1)
		errs := make([]error, 2)
		for i, g := range []int64{6, 7} {
			done.Add(1)
			go func() {
				defer done.Done()
				start.Wait()
				errs[i] = f.qu.SetGeneration(f.ctx, sc, g)
			}()
		}
		start.Done()
		done.Wait()
		if errs[1] != nil {
			t.Fatalf("round %d: set 7: %v", round, errs[1])
		}
		var ge *workqueue.GenerationError
		switch {
		case errs[0] == nil:
		case errors.As(errs[0], &ge) && ge.Active == 7 && ge.Requested == 6:
			refused++
		default:
			t.Fatalf("round %d: set 6: %v, want success or a refusal by 7", round, errs[0])
		}
		if g := f.activeGeneration(sc); g != 7 {
			t.Fatalf("round %d: active generation %d, want 7 (6: %v)", round, g, errs[0])
		}
	}
	t.Logf("30 rounds: set 6 refused in %d, first in the others", refused)
}
