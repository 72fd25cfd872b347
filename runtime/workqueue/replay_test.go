package workqueue_test

import (
	"database/sql"
	"errors"
	"sync"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// dead claims workID (the only claimable "deliver" item) and finishes it
// dead.
func (f *fixture) dead(c *workqueue.Claimer, workID int64) {
	f.t.Helper()
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != workID {
		f.t.Fatalf("claimed %v, want [%d]", ids(got), workID)
	}
	if _, err := f.qu.Dead(f.ctx, got[0].Lease, workqueue.Failure{Class: "broken", Summary: "handler refused"}); err != nil {
		f.t.Fatalf("dead %d: %v", workID, err)
	}
}

type replayFacts struct {
	state                  string
	replayOf               sql.NullInt64
	replayedAt             bool
	depth, attempts, token int64
	eventID                int64
}

func (f *fixture) replayFacts(workID int64) replayFacts {
	f.t.Helper()
	var r replayFacts
	var replayedAt sql.NullTime
	if err := f.db.QueryRow(`SELECT state, replay_of_work_id, replayed_at, replay_depth, attempt_count, lease_token, event_id
		FROM work_item WHERE work_id = ?`, workID).Scan(&r.state, &r.replayOf, &replayedAt, &r.depth, &r.attempts, &r.token, &r.eventID); err != nil {
		f.t.Fatal(err)
	}
	r.replayedAt = replayedAt.Valid
	return r
}

// A replay makes one child for the dead item's event and work type and
// leaves the original terminal; the child runs like any item, and when it
// dies it can be replayed in turn.
func TestReplayCreatesAChildAndNeverReopensTheOriginal(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	id := f.one(workqueue.Work{})
	f.dead(c, id)
	before := f.replayFacts(id)

	got, err := f.qu.Replay(f.ctx, scope, id)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if got.WorkID == id || got.State != workqueue.StatePending {
		t.Fatalf("replay = %+v, want a new pending item", got)
	}
	orig, child := f.replayFacts(id), f.replayFacts(got.WorkID)
	if orig.state != workqueue.StateDead || !orig.replayedAt || orig.token != before.token || orig.attempts != before.attempts {
		t.Fatalf("original after replay: %+v (before %+v): it must stay dead with its token and attempts, replayed_at set", orig, before)
	}
	if child.replayOf.Int64 != id || child.depth != 1 || child.attempts != 0 || child.eventID != orig.eventID || child.replayedAt {
		t.Fatalf("child: %+v, want replay_of %d, depth 1, no attempts, event %d", child, id, orig.eventID)
	}
	// Replaying the original again returns the same child and writes nothing.
	again, err := f.qu.Replay(f.ctx, scope, id)
	if !errors.Is(err, workqueue.ErrAlreadyReplayed) || again.WorkID != got.WorkID {
		t.Fatalf("second replay = %+v, %v; want ErrAlreadyReplayed with child %d", again, err, got.WorkID)
	}
	// The child is claimable; a live item is not replayable.
	if _, err := f.qu.Replay(f.ctx, scope, got.WorkID); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("replay of a pending item: %v, want ErrNotReplayable", err)
	}
	f.dead(c, got.WorkID)
	grand, err := f.qu.Replay(f.ctx, scope, got.WorkID)
	if err != nil {
		t.Fatalf("replay of the dead child: %v", err)
	}
	if g := f.replayFacts(grand.WorkID); g.depth != 2 || g.replayOf.Int64 != got.WorkID {
		t.Fatalf("grandchild: %+v, want depth 2 replaying %d", g, got.WorkID)
	}
	claimed := f.claim(c, workqueue.ClaimRequest{})
	if len(claimed) != 1 || claimed[0].WorkID != grand.WorkID {
		t.Fatalf("claimed %v, want the grandchild %d", ids(claimed), grand.WorkID)
	}
	f.complete(claimed[0])
}

// Replay fails closed, writing nothing, on what it cannot prove safe.
func TestReplayRefusesWhatItCannotProveSafe(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	pending := f.one(workqueue.Work{})
	if _, err := f.qu.Replay(f.ctx, scope, pending); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("pending item: %v, want ErrNotReplayable", err)
	}
	f.dead(c, pending)
	if err := f.qu.EnsureScope(f.ctx, "other-scope", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.qu.Replay(f.ctx, "other-scope", pending); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("item of another scope: %v, want ErrNotReplayable", err)
	}
	if _, err := f.qu.Replay(f.ctx, scope, 424242); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("missing item: %v, want ErrNotReplayable", err)
	}
	if _, err := f.qu.Replay(f.ctx, "absent-scope", pending); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("unknown scope: %v, want ErrUnknownScope", err)
	}
	if err := f.qu.SetGeneration(f.ctx, scope, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := f.qu.Replay(f.ctx, scope, pending); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("item of an old generation: %v, want ErrNotReplayable", err)
	}
	if r := f.replayFacts(pending); r.replayedAt {
		t.Fatalf("a refused replay reserved the item: %+v", r)
	}
	var n int
	if err := f.db.QueryRow("SELECT COUNT(*) FROM work_item WHERE replay_of_work_id IS NOT NULL").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d replay children after refused replays (%v)", n, err)
	}
}

// Concurrent replays of one dead item create exactly one child; every
// other caller gets ErrAlreadyReplayed naming that child. Repeated, with
// every replayer released together by a barrier.
func TestReplayConcurrentOneChild(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	const rounds, replayers = 12, 6
	for round := range rounds {
		id := f.one(workqueue.Work{})
		f.dead(c, id)
		start := make(chan struct{})
		results := make([]workqueue.Replayed, replayers)
		errs := make([]error, replayers)
		var wg sync.WaitGroup
		for i := range replayers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = f.qu.Replay(f.ctx, scope, id)
			}()
		}
		close(start)
		wg.Wait()
		var made int
		var child int64
		for i, err := range errs {
			switch {
			case err == nil:
				made++
				child = results[i].WorkID
			case !errors.Is(err, workqueue.ErrAlreadyReplayed):
				t.Fatalf("round %d replayer %d: %v", round, i, err)
			}
		}
		if made != 1 {
			t.Fatalf("round %d: %d replays succeeded, want 1", round, made)
		}
		for i, r := range results {
			if r.WorkID != child {
				t.Fatalf("round %d replayer %d reported child %d, the child is %d", round, i, r.WorkID, child)
			}
		}
		var n int
		if err := f.db.QueryRow("SELECT COUNT(*) FROM work_item WHERE replay_of_work_id = ?", id).Scan(&n); err != nil || n != 1 {
			t.Fatalf("round %d: %d children of %d (%v), want 1", round, n, id, err)
		}
		// Run the child so the next round's item is the only one claimable.
		got := f.claim(c, workqueue.ClaimRequest{})
		if len(got) != 1 || got[0].WorkID != child {
			t.Fatalf("round %d: claimed %v, want the child %d", round, ids(got), child)
		}
		f.complete(got[0])
	}
}

// A replayed item of a lane joins the lane behind what was admitted before
// it: blocked while a later item of its lane is live, promoted when that
// one finishes; alone in its lane, it is the head at once.
func TestReplayJoinsItsLaneBehindEarlierItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	first := f.one(workqueue.Work{SourceLane: "lane"})
	f.dead(c, first) // the lane moves on to nothing: first was alone
	second := f.one(workqueue.Work{SourceLane: "lane"})
	if s := f.state(second); s != workqueue.StatePending {
		t.Fatalf("second item is %s, want pending (the lane head)", s)
	}
	got, err := f.qu.Replay(f.ctx, scope, first)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != workqueue.StateBlocked || f.state(got.WorkID) != workqueue.StateBlocked {
		t.Fatalf("replay in a lane with a live head: %+v (stored %s), want blocked", got, f.state(got.WorkID))
	}
	claimed := f.claim(c, workqueue.ClaimRequest{})
	if len(claimed) != 1 || claimed[0].WorkID != second {
		t.Fatalf("claimed %v, want the head %d only", ids(claimed), second)
	}
	if fin := f.complete(claimed[0]); fin.Promoted != 1 {
		t.Fatalf("completing the head promoted %d, want the replay", fin.Promoted)
	}
	claimed = f.claim(c, workqueue.ClaimRequest{})
	if len(claimed) != 1 || claimed[0].WorkID != got.WorkID {
		t.Fatalf("claimed %v, want the replay %d", ids(claimed), got.WorkID)
	}
	f.complete(claimed[0])

	alone := f.one(workqueue.Work{SourceLane: "lane-2", TargetLane: "target"})
	f.dead(c, alone)
	got, err = f.qu.Replay(f.ctx, scope, alone)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != workqueue.StatePending || f.state(got.WorkID) != workqueue.StatePending {
		t.Fatalf("replay alone in its lanes: %+v (stored %s), want pending", got, f.state(got.WorkID))
	}
}
