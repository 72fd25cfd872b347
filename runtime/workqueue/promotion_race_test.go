package workqueue_test

import (
	"context"
	"database/sql/driver"
	"sync"
	"testing"

	"github.com/laneq/laneq/internal/sqlwrap"
	"github.com/laneq/laneq/runtime/workqueue"
)

// onFirst runs fn once, just before the first statement named name is sent.
type onFirst struct {
	name string
	once sync.Once
	fn   func()
}

func (h *onFirst) Before(_ context.Context, query string, _ []driver.NamedValue) (any, error) {
	if sqlwrap.Name(query) == h.name {
		h.once.Do(h.fn)
	}
	return nil, nil
}

func (h *onFirst) After(_ context.Context, _ string, _ any, err error) error { return err }

// queueWithHook is a Queue on the fixture's database whose statements pass
// through hook.
func (f *fixture) queueWithHook(hook sqlwrap.Hook) *workqueue.Queue {
	f.t.Helper()
	db, err := sqlwrap.Open(f.dsn, hook)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close() })
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	return qu
}

// A finisher decides whether a follower heads its other lane by reading
// that lane (not locked). If the row ahead of the follower there is
// promoted by another finisher between the finisher's read for lane heads
// and its read for blocked rows, the first read saw it blocked and the
// second sees it pending: neither sees it live, and the follower must not
// be promoted beside it. Here x (behind a in lane sa) is ahead of f in lane
// t; f's other predecessor b finishes, and a's finish (promoting x)
// commits exactly between the two reads.
func TestPromotionSeesARowPromotedBetweenItsReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	a := f.one(workqueue.Work{SourceLane: "sa"})
	x := f.one(workqueue.Work{SourceLane: "sa", TargetLane: "t"})
	b := f.one(workqueue.Work{SourceLane: "sb"})
	follower := f.one(workqueue.Work{SourceLane: "sb", TargetLane: "t"})
	got := f.claim(f.claimer("w1"), workqueue.ClaimRequest{})
	leases := map[int64]workqueue.Lease{}
	for _, c := range got {
		leases[c.WorkID] = c.Lease
	}
	if len(got) != 2 || leases[a].WorkID != a || leases[b].WorkID != b {
		t.Fatalf("claimed %v, want the heads %d and %d", ids(got), a, b)
	}
	hooked := f.queueWithHook(&onFirst{name: "FirstBlockedInTargetLanes", fn: func() {
		fin, err := f.qu.Complete(f.ctx, leases[a])
		if err != nil || fin.Promoted != 1 {
			t.Errorf("completing a between the reads: %+v, %v; want x promoted", fin, err)
		}
	}})
	if _, err := hooked.Complete(f.ctx, leases[b]); err != nil {
		t.Fatalf("complete b: %v", err)
	}
	// Only the hook completes a: x is pending only if it ran.
	if s := f.state(x); s != workqueue.StatePending {
		t.Fatalf("x is %s, want pending (a's finish, run between the reads, promoted it)", s)
	}
	if s := f.state(follower); s != workqueue.StateBlocked {
		t.Fatalf("the follower is %s beside x, the head of lane t ahead of it: want blocked", s)
	}
}

// The same race at enqueue: a lane whose only live row x is blocked (it
// waits for its source lane) has no head, so enqueue reads its blocked
// rows next; x's promotion commits between the two reads. The new item
// must still be written blocked behind x.
func TestEnqueueSeesARowPromotedBetweenItsReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	a := f.one(workqueue.Work{SourceLane: "sa"})
	x := f.one(workqueue.Work{SourceLane: "sa", TargetLane: "t"})
	got := f.claim(f.claimer("w1"), workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != a {
		t.Fatalf("claimed %v, want the head %d", ids(got), a)
	}
	hooked := f.queueWithHook(&onFirst{name: "FirstBlockedInTargetLanes", fn: func() {
		fin, err := f.qu.Complete(f.ctx, got[0].Lease)
		if err != nil || fin.Promoted != 1 {
			t.Errorf("completing a between the reads: %+v, %v; want x promoted", fin, err)
		}
	}})
	res, err := hooked.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: "late", Payload: []byte("{}"),
		Work: []workqueue.Work{{WorkType: "deliver", TargetLane: "t"}}}})
	if err != nil {
		t.Fatalf("enqueue: %v", err)
	}
	if s := f.state(x); s != workqueue.StatePending {
		t.Fatalf("x is %s, want pending (a's finish, run between the reads, promoted it)", s)
	}
	late := res[0].Work[0]
	if s := f.state(late.WorkID); s != workqueue.StateBlocked || late.State != workqueue.StateBlocked {
		t.Fatalf("the new item is stored %s, reported %s, beside x, the head of lane t: want blocked", s, late.State)
	}
}
