package inspect_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestWhyNotRunning puts one item in each state an operator asks about and
// checks the reason Why gives for it, in fields and in words: due, not due,
// blocked in a source lane behind a running head, blocked in a target lane,
// blocked behind a lane whose first item waits for its other lane, waiting
// for dependency keys, an inactive projection successor, leased, a lease
// that ran out, finished, a due item of a paused class, and an item of a
// generation the scope left.
// (The dependency_registration state lasts one transaction; it is not
// staged here.)
func TestWhyNotRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	enqueue := func(works ...workqueue.Work) []int64 { t.Helper(); return e.enqueue(t, works...) }
	claim := func(qu *workqueue.Queue, workType string) workqueue.Claimed {
		t.Helper()
		cl, err := qu.NewClaimer(scope, "why-"+workType, workqueue.ClaimerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		got, _, err := cl.Claim(e.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{workType}, Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim %s: %d claimed, %v", workType, len(got), err)
		}
		return got[0]
	}

	due := enqueue(workqueue.Work{WorkType: "due"})[0]
	later := enqueue(workqueue.Work{WorkType: "later", Delay: time.Hour})[0]
	lane := enqueue(workqueue.Work{WorkType: "lane", SourceLane: "acct-1"}, workqueue.Work{WorkType: "lane", SourceLane: "acct-1"},
		workqueue.Work{WorkType: "lane", SourceLane: "acct-1"})
	head := claim(e.qu, "lane")
	target := enqueue(workqueue.Work{WorkType: "target", TargetLane: "repo-1"}, workqueue.Work{WorkType: "target", SourceLane: "acct-2", TargetLane: "repo-1"})
	// acct-3's first item waits in repo-2 behind repo-2's head; acct-3's
	// second waits behind it, in a lane with no head.
	headless := enqueue(workqueue.Work{WorkType: "headless", TargetLane: "repo-2"},
		workqueue.Work{WorkType: "headless", SourceLane: "acct-3", TargetLane: "repo-2"}, workqueue.Work{WorkType: "headless", SourceLane: "acct-3"})
	dep := workqueue.Dependency{WakeKey: "order-9", Keys: []string{"order-9/paid", "order-9/waived"}}
	waiting := enqueue(workqueue.Work{WorkType: "dep", WaitFor: &dep})[0]
	if runnable, err := e.qu.Wait(e.ctx, claim(e.qu, "dep"), dep); err != nil || runnable {
		t.Fatalf("dependency wait: runnable %v, %v", runnable, err)
	}
	active := enqueue(workqueue.Work{WorkType: "proj", SourceLane: "doc-1", Projection: true})[0]
	claim(e.qu, "proj")
	successor := enqueue(workqueue.Work{WorkType: "proj", SourceLane: "doc-1", Projection: true})[0]
	done := enqueue(workqueue.Work{WorkType: "done"})[0]
	if _, err := e.qu.Complete(e.ctx, claim(e.qu, "done").Lease); err != nil {
		t.Fatal(err)
	}
	short, err := workqueue.New(e.db, workqueue.Config{Lease: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	expired := enqueue(workqueue.Work{WorkType: "expire"})[0]
	claim(short, "expire")

	for _, tc := range []struct {
		name  string
		id    int64
		kind  string
		check func(inspect.Why) bool
		words []string
	}{
		{"due", due, inspect.WhyDue, nil, []string{"due since", "waiting for a claim", "class default", "runs due"}},
		{"not due", later, inspect.WhyNotDue, func(w inspect.Why) bool { return !w.Until.IsZero() }, []string{"not due until", "a delayed enqueue"}},
		{"source lane", lane[1], inspect.WhySourceLane,
			func(w inspect.Why) bool {
				return w.Lane == "acct-1" && w.Behind == lane[0] && w.BehindState == workqueue.StateProcessing && w.QueuedInLane == 2 && !w.MoreInLane
			},
			[]string{"blocked in source lane acct-1", fmt.Sprintf("behind item %d (processing since", lane[0]), "2 items wait in that lane"}},
		{"target lane", target[1], inspect.WhyTargetLane,
			func(w inspect.Why) bool {
				return w.Lane == "repo-1" && w.Behind == target[0] && w.BehindState == workqueue.StatePending
			},
			[]string{"blocked in target lane repo-1", fmt.Sprintf("behind item %d (pending since", target[0]), "1 item waits in that lane"}},
		{"headless lane", headless[2], inspect.WhySourceLane,
			func(w inspect.Why) bool {
				return w.Lane == "acct-3" && w.Behind == headless[1] && w.BehindState == workqueue.StateBlocked
			},
			[]string{"blocked in source lane acct-3", fmt.Sprintf("behind item %d (blocked since", headless[1]), "itself waiting for its other lane)"}},
		{"dependency", waiting, inspect.WhyDependency,
			func(w inspect.Why) bool {
				return slices.Equal(w.MissingKeys, dep.Keys) && len(w.SatisfiedKeys) == 0
			},
			[]string{"waiting for dependency keys order-9/paid, order-9/waived", "none recorded yet"}},
		{"projection successor", successor, inspect.WhyProjection,
			func(w inspect.Why) bool { return w.Behind == active && w.BehindState == workqueue.StateProcessing },
			[]string{"inactive successor of projection", fmt.Sprintf("active generation, item %d (processing since", active)}},
		{"leased", head.WorkID, inspect.WhyLeased, func(w inspect.Why) bool { return w.Owner != "" && w.Until.After(time.Now().Add(-time.Hour)) },
			[]string{"running: leased by why-lane", "attempt 1"}},
		{"finished", done, inspect.WhyFinished, nil, []string{"completed at"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := e.why(t, tc.id)
			if w.Kind != tc.kind || (tc.check != nil && !tc.check(w)) {
				t.Fatalf("why %+v, want kind %s", w, tc.kind)
			}
			for _, s := range tc.words {
				if !strings.Contains(w.Text, s) {
					t.Errorf("%q does not say %q", w.Text, s)
				}
			}
		})
	}
	if head.WorkID != lane[0] {
		t.Fatalf("claimed %d as acct-1's head, want %d", head.WorkID, lane[0])
	}

	t.Run("lease ran out", func(t *testing.T) {
		var w inspect.Why
		waitfor.Until(t, time.Minute, func() (bool, error) { w = e.why(t, expired); return w.Kind == inspect.WhyLeaseExpired, nil },
			func() string { return fmt.Sprintf("a 50ms lease still reads as %+v", w) })
		if !strings.Contains(w.Text, "the lease of why-expire") || !strings.Contains(w.Text, "takes it over") {
			t.Fatalf("%q", w.Text)
		}
	})

	t.Run("paused class", func(t *testing.T) {
		held := enqueue(workqueue.Work{WorkType: "held", QueueClass: "bulk"})[0]
		if err := e.qu.PauseClass(e.ctx, scope, "bulk"); err != nil {
			t.Fatal(err)
		}
		w := e.why(t, held)
		if w.Kind != inspect.WhyPaused || !strings.Contains(w.Text, "class bulk is paused in this scope") || !strings.Contains(w.Text, "due since") {
			t.Fatalf("%+v", w)
		}
		if w := e.why(t, due); w.Kind != inspect.WhyDue {
			t.Fatalf("an item of an unpaused class: %+v", w)
		}
		if err := e.qu.ResumeClass(e.ctx, scope, "bulk"); err != nil {
			t.Fatal(err)
		}
		if w := e.why(t, held); w.Kind != inspect.WhyDue {
			t.Fatalf("after resume: %+v", w)
		}
	})

	t.Run("old generation", func(t *testing.T) {
		old := enqueue(workqueue.Work{WorkType: "old"})[0]
		if err := e.qu.SetGeneration(e.ctx, scope, 2); err != nil {
			t.Fatal(err)
		}
		w := e.why(t, old)
		if w.Kind != inspect.WhyOldGeneration || !strings.Contains(w.Text, "of generation 1, not the scope's active generation 2: never claimed") {
			t.Fatalf("%+v", w)
		}
	})
}

// TestWhyCountsALongLaneUpToItsCap: a follower with 1,200 items blocked in
// its lane reads "more than 1,000": the count stops at its cap.
func TestWhyCountsALongLaneUpToItsCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var last int64
	for range 3 { // 1,200 in three enqueues
		ids := e.enqueue(t, slices.Repeat([]workqueue.Work{{WorkType: "deliver", SourceLane: "busy"}}, 400)...)
		last = ids[len(ids)-1]
	}
	if w := e.why(t, last); w.Kind != inspect.WhySourceLane || !w.MoreInLane || w.QueuedInLane != 1000 || !strings.Contains(w.Text, "more than 1000 items wait in that lane") {
		t.Fatalf("%+v", w)
	}
}

// why reads item id and why it is not running, and logs the reason.
func (e *env) why(t testing.TB, id int64) inspect.Why {
	t.Helper()
	it, err := e.r.Item(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	w, err := e.r.Why(e.ctx, it)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("item %d (%s): %s", id, it.State, w.Text)
	return w
}

// TestLanePage reads a lane in order: its running head, then its blocked
// items a page at a time through the cursor, each exactly once, and the
// count; a target lane likewise; bad queries and an unknown scope are
// refused.
func TestLanePage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ids := e.enqueue(t, slices.Repeat([]workqueue.Work{{WorkType: "deliver", SourceLane: "acct-1", TargetLane: "repo-1"}}, 8)...)
	if c, _, err := e.cl.Claim(e.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 1}); err != nil || len(c) != 1 || c[0].WorkID != ids[0] {
		t.Fatalf("claimed %v, %v; want the head %d", c, err, ids[0])
	}
	for _, q := range []inspect.LaneQuery{{Source: "acct-1", Limit: 3}, {Target: "repo-1", Limit: 3}} {
		var seen []int64
		p, err := e.r.Lane(e.ctx, scope, q)
		if err != nil {
			t.Fatal(err)
		}
		if p.Head == nil || p.Head.WorkID != ids[0] || p.Head.State != workqueue.StateProcessing || p.Head.LeaseOwner == "" || p.Queued != 7 || p.MoreQueued {
			t.Fatalf("%+v: first page %+v (head %+v)", q, p, p.Head)
		}
		pages := 0
		for {
			pages++
			for _, b := range p.Blocked {
				seen = append(seen, b.WorkID)
			}
			if p.Next == 0 {
				break
			}
			q.After = p.Next
			if p, err = e.r.Lane(e.ctx, scope, q); err != nil {
				t.Fatal(err)
			}
			if p.Head != nil {
				t.Fatalf("a later page repeats the head: %+v", p.Head)
			}
		}
		if !slices.Equal(seen, ids[1:]) || pages != 3 {
			t.Fatalf("%+v: %d pages of %v, want %v in lane order", q, pages, seen, ids[1:])
		}
	}
	for _, q := range []inspect.LaneQuery{{}, {Source: "a", Target: "b"}, {Source: "a", Limit: -1}, {Source: "a", Limit: inspect.MaxPageSize + 1}, {Source: "a", After: -1}} {
		if _, err := e.r.Lane(e.ctx, scope, q); !errors.Is(err, inspect.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", q, err)
		}
	}
	if _, err := e.r.Lane(e.ctx, "no/such", inspect.LaneQuery{Source: "a"}); !errors.Is(err, inspect.ErrUnknownScope) {
		t.Errorf("unknown scope: %v", err)
	}
	if p, err := e.r.Lane(e.ctx, scope, inspect.LaneQuery{Source: "empty"}); err != nil || p.Head != nil || len(p.Blocked) != 0 || p.Queued != 0 {
		t.Errorf("an empty lane: %+v, %v", p, err)
	}
}

// enqueue enqueues one event per work, in one call, and returns their
// items' ids in order.
func (e *env) enqueue(t testing.TB, works ...workqueue.Work) []int64 {
	t.Helper()
	var evs []workqueue.Event
	for _, w := range works {
		e.events++
		evs = append(evs, workqueue.Event{IdempotencyKey: fmt.Sprintf("e-%d", e.events), RouteID: "r", RouteVersion: 1, EventKind: "k",
			SourceKind: "s", SourceID: fmt.Sprintf("src-%d", e.events), Payload: []byte("{}"), Work: []workqueue.Work{w}})
	}
	got, err := e.qu.Enqueue(e.ctx, scope, evs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, ev := range got {
		ids = append(ids, ev.Work[0].WorkID)
	}
	return ids
}
