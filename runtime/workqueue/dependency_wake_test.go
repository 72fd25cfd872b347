package workqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A producer's transaction that satisfies a key and commits long after
// (here: past the claimer's straggler window, while the claimer's floor
// moved on) still wakes the waiter where the claimer scans: the wake runs
// after the commit, so the woken row's due time is the database time of
// its own short statement. When the wake ran inside the producer's
// transaction, the row kept the due time of that statement, older than its
// commit, below the floor: claims skipped it until a rewind.
func TestSatisfyInALongTransactionWakesWhereClaimersScan(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const straggler = 100 * time.Millisecond
	c, err := f.qu.NewClaimer(scope, "claimer", workqueue.ClaimerConfig{StragglerWindow: straggler})
	if err != nil {
		t.Fatal(err)
	}
	dep := workqueue.Dependency{WakeKey: "wake", Keys: []string{"key"}}
	f.one(workqueue.Work{})
	got := f.claim(c, workqueue.ClaimRequest{Max: 1})
	if len(got) != 1 {
		t.Fatalf("claimed %d", len(got))
	}
	if runnable, err := f.qu.Wait(f.ctx, got[0], dep); err != nil || runnable {
		t.Fatalf("wait: %v %v", runnable, err)
	}
	waiter := got[0].WorkID

	tx, err := f.qu.BeginTx(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Satisfy(f.ctx, scope, dep.WakeKey, dep.Keys[0]); err != nil {
		t.Fatal(err)
	}
	// While the producer's transaction is open, the claimer consumes work
	// due later than the straggler window past the satisfy's statement.
	time.Sleep(3 * straggler) // the producer's business in its transaction
	later := f.one(workqueue.Work{})
	if got := f.claim(c, workqueue.ClaimRequest{Max: 1}); len(got) != 1 || got[0].WorkID != later {
		t.Fatalf("claimed %v, want [%d]", ids(got), later)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := f.claim(c, workqueue.ClaimRequest{Max: 1}); len(got) != 1 || got[0].WorkID != waiter {
		t.Fatalf("after the commit claimed %v, want the woken waiter %d without a rewind", ids(got), waiter)
	}
}

// One wake key with 10,000 waiters: Satisfy wakes them in pages of
// DependencyWakePage, each its own short statement (none of the
// producer's statements locks them all), and every one of them is woken.
// A wake cut short after its first page (its context ends) leaves the
// rest to the safety pass, which wakes every one of them: the remainder is
// never lost.
func TestSatisfyPagesTenThousandWaiters(t *testing.T) {
	t.Parallel()
	const waiters = 10_000
	f := newFixture(t, workqueue.Config{MaxEnqueueBatch: 5000})
	plant := func(prefix, wakeKey, key string) {
		t.Helper()
		for start := 0; start < waiters; start += 5000 {
			evs := make([]workqueue.Event, 5000)
			for i := range evs {
				evs[i] = workqueue.Event{IdempotencyKey: fmt.Sprintf("%s-%d", prefix, start+i), Payload: []byte("{}"),
					Work: []workqueue.Work{{WorkType: "deliver"}}}
			}
			if _, err := f.qu.Enqueue(f.ctx, scope, evs); err != nil {
				t.Fatal(err)
			}
		}
		// Parked as Queue.Wait parks them (planted in one statement: 10,000
		// claims and waits would only slow the test down).
		f.exec(`UPDATE work_item SET state = 'waiting_dependency', dependency_wake_key = ?, dependency_keys = JSON_ARRAY(?)
			WHERE scope_id = ? AND state = 'pending'`, wakeKey, key, scope)
	}
	count := func(state string) int {
		t.Helper()
		var n int
		if err := f.db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND state = ?", scope, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	plant("all", "hot", "hot-key")
	counted, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	before := counter.Executed()
	start := time.Now()
	woken, err := counted.Satisfy(f.ctx, scope, "hot", "hot-key")
	if err != nil || woken != waiters {
		t.Fatalf("woke %d (%v), want %d", woken, err, waiters)
	}
	statements := counter.Executed() - before
	t.Logf("Satisfy woke %d waiters of one wake key in %s with %d statements", waiters, time.Since(start).Round(time.Millisecond), statements)
	if want := int64(1 + waiters/workqueue.DependencyWakePage + 1); statements != want {
		t.Fatalf("%d statements, want %d (the key, then pages of %d until a short one)", statements, want, workqueue.DependencyWakePage)
	}
	if n := count(workqueue.StatePending); n != waiters {
		t.Fatalf("%d pending, want %d", n, waiters)
	}

	// Cut short: the context ends once the first page committed.
	f.exec("DELETE FROM work_item WHERE scope_id = ?", scope)
	plant("cut", "cut", "cut-key")
	ctx, cancel := context.WithCancel(f.ctx)
	stop := f.qu.OnAnnounce(func(workqueue.Announcement) { cancel() }) // after the first page's commit
	woken, err = f.qu.Satisfy(ctx, scope, "cut", "cut-key")
	stop()
	if err == nil || woken != workqueue.DependencyWakePage {
		t.Fatalf("a wake cut short after its first page woke %d (%v), want %d and an error", woken, err, workqueue.DependencyWakePage)
	}
	left := count(workqueue.StateWaitingDependency)
	if left != waiters-workqueue.DependencyWakePage {
		t.Fatalf("%d waiting after the cut, want %d", left, waiters-workqueue.DependencyWakePage)
	}
	// A budget no pass outlasts, even beside busy neighbours: a read cut
	// off at the budget fails the pass, and the number of passes is not
	// what this test is about.
	sweep, err := f.qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{TimeBudget: 10 * time.Minute, ProbeBudget: waiters})
	if err != nil {
		t.Fatal(err)
	}
	var swept int
	for passes := 0; count(workqueue.StateWaitingDependency) > 0; passes++ {
		if passes > 100 {
			t.Fatalf("%d still waiting after 100 safety passes", count(workqueue.StateWaitingDependency))
		}
		st, err := sweep.Pass(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		swept += st.Woken
	}
	if swept != left || count(workqueue.StatePending) != waiters {
		t.Fatalf("the safety pass woke %d of the %d left; %d pending", swept, left, count(workqueue.StatePending))
	}
}

// A write whose commit comes LateCommit or more after it began (here a
// release held up by another transaction's lock on its row) announces a
// rewind: the due time it set may lie behind a claimer's floor by more
// than its straggler window, so listeners scan from the front. A prompt
// write does not.
func TestLateCommitAnnouncesARewind(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("holder")
	f.one(workqueue.Work{})
	f.one(workqueue.Work{})
	held := f.claim(c, workqueue.ClaimRequest{Max: 2})
	if len(held) != 2 {
		t.Fatalf("claimed %d", len(held))
	}
	heard := make(chan workqueue.Announcement, 4)
	stop := f.qu.OnAnnounce(func(a workqueue.Announcement) { heard <- a })
	defer stop()

	began := time.Now()
	if err := f.qu.Release(f.ctx, held[0].Lease); err != nil {
		t.Fatal(err)
	}
	// Prompt unless a loaded machine made it late: then a rewind is right.
	if a, took := <-heard, time.Since(began); a.Rewind && took < workqueue.LateCommit {
		t.Fatalf("a release that took %s asked for a rewind: %+v", took, a)
	}

	blocker, err := f.db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.ExecContext(f.ctx, "SELECT work_id FROM work_item WHERE work_id = ? FOR UPDATE", held[1].WorkID); err != nil {
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() { released <- f.qu.Release(f.ctx, held[1].Lease) }()
	time.Sleep(workqueue.LateCommit + 200*time.Millisecond) // the lock holder's own work
	if err := blocker.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	if a := <-heard; !a.Rewind || a.Scope != scope {
		t.Fatalf("a release that committed %s late announced %+v, want a rewind", workqueue.LateCommit, a)
	}
}
