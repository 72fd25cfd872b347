package workqueue_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/runtime/workqueue"
)

// lockstep holds each claimer's first claim CAS of a turn until every
// claimer reached its own: all of them scanned the same due rows before any
// CAS ran, the interleaving in which claimers of several processes collide.
type lockstep struct {
	mu   sync.Mutex
	wg   *sync.WaitGroup
	seen []*atomic.Bool
}

func (l *lockstep) next(claimers int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.wg = &sync.WaitGroup{}
	l.wg.Add(claimers)
	l.seen = make([]*atomic.Bool, claimers)
	for i := range l.seen {
		l.seen[i] = &atomic.Bool{}
	}
}

func (l *lockstep) arrive(claimer int) {
	l.mu.Lock()
	wg, first := l.wg, l.seen[claimer].CompareAndSwap(false, true)
	l.mu.Unlock()
	if first { // a contended round's CAS in the same turn runs freely
		wg.Done()
		wg.Wait()
	}
}

// TestLockstepClaimersSpreadOut: two claimers on their own connections
// (as two processes) whose turns run in lockstep collide on the first turn
// only: the loser moves to the second block of its window and from then on
// neither loses a candidate, each turn still claims what it asked for, and
// every item is claimed exactly once (none skipped by a cursor).
func TestLockstepClaimersSpreadOut(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const items, perClaim, turns = 100, 5, 8
	enqueued := map[int64]bool{}
	for range items {
		enqueued[f.one(workqueue.Work{})] = true
	}
	var step lockstep
	claimers := make([]*workqueue.Claimer, 2)
	for i := range claimers {
		in := &faultdb.Injector{}
		in.Add(faultdb.Rule{Statement: "ClaimBatchCAS", Times: 1 << 20, Before: func(context.Context) { step.arrive(i) }})
		var err error
		if claimers[i], err = f.queueWithHook(in).NewClaimer(scope, "process", workqueue.ClaimerConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	claimedBy := map[int64]int{}
	record := func(who int, got []workqueue.Claimed) {
		for _, c := range got {
			if prev, twice := claimedBy[c.WorkID]; twice {
				t.Fatalf("work %d claimed by claimer %d and claimer %d", c.WorkID, prev, who)
			}
			claimedBy[c.WorkID] = who
		}
	}
	req := workqueue.ClaimRequest{Max: perClaim}
	for turn := range turns {
		step.next(len(claimers))
		got := make([][]workqueue.Claimed, len(claimers))
		stats := make([]workqueue.ClaimStats, len(claimers))
		errs := make([]error, len(claimers))
		var wg sync.WaitGroup
		for i, c := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], stats[i], errs[i] = claimWith(t, c, f.ctx, req)
			}()
		}
		wg.Wait()
		for i := range claimers {
			if errs[i] != nil {
				t.Fatalf("turn %d, claimer %d: %v", turn, i, errs[i])
			}
			record(i, got[i])
			if turn == 0 {
				continue // the collision that teaches them
			}
			if stats[i].LostCAS != 0 || len(got[i]) != perClaim {
				t.Fatalf("turn %d, claimer %d: won %d of %d, lost %d candidates (spread %d); want no loss after the first turn",
					turn, i, len(got[i]), perClaim, stats[i].LostCAS, claimers[i].Contention().Spread)
			}
		}
	}
	if lost := claimers[0].Contention().LostCAS + claimers[1].Contention().LostCAS; lost == 0 {
		t.Fatal("the first lockstep turn lost no candidate: the test did not make the claimers collide")
	}
	step.next(1) // drain the rest with one claimer, each CAS passing alone
	for {
		got, _, err := claimWith(t, claimers[0], f.ctx, workqueue.ClaimRequest{Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		record(0, got)
		step.next(1)
	}
	if len(claimedBy) != len(enqueued) {
		t.Fatalf("claimed %d distinct items of %d enqueued", len(claimedBy), len(enqueued))
	}
	for id := range claimedBy {
		if !enqueued[id] {
			t.Fatalf("claimed work %d that was never enqueued", id)
		}
	}
}
