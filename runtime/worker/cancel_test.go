package worker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// enqueueKeyed enqueues one "deliver" item per source id (the handlers
// below act by it), in lane when it is not empty, and returns their ids.
func (f *fixture) enqueueKeyed(lane string, sources ...string) []int64 {
	f.t.Helper()
	var out []int64
	for _, src := range sources {
		f.seq++
		res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{
			IdempotencyKey: fmt.Sprintf("ev-%d", f.seq), RouteID: "r", RouteVersion: 1, EventKind: "k",
			SourceKind: "s", SourceID: src, Payload: []byte("{}"),
			Work: []workqueue.Work{{WorkType: "deliver", SourceLane: lane}},
		}})
		if err != nil {
			f.t.Fatalf("enqueue: %v", err)
		}
		out = append(out, res[0].Work[0].WorkID)
	}
	return out
}

// failure reads an item's failure class and summary.
func (f *fixture) failure(id int64) (class, summary string) {
	f.t.Helper()
	if err := f.db.QueryRow("SELECT COALESCE(failure_class, ''), COALESCE(failure_summary, '') FROM work_item WHERE work_id = ?", id).Scan(&class, &summary); err != nil {
		f.t.Fatal(err)
	}
	return class, summary
}

// TestCancelRunning: items running in a worker whose timers run on a fake
// clock, so that a heartbeat happens only when the test moves the clock.
//   - "honour": the handler returns when its context ends. Cancelled, it
//     sees its context cancelled after one heartbeat, with a cause that
//     wraps workqueue.ErrCancelRequested; it ends skipped with failure
//     class "cancelled" and the operator's reason, and its lane follower
//     runs.
//   - "finish": the handler returns nil after its context ended: the item
//     completes (its work was done).
//   - "ignore": the handler ignores its context: AbandonAfter later its
//     slot is given back, but the item stays processing, its lease held at
//     every heartbeat (HoldLease), until the handler returns; then it ends
//     cancelled.
//   - "fail": cancelled with no heartbeat since, its handler fails; the
//     retry is refused for the cancellation and the item ends cancelled
//     instead of running again.
func TestCancelRunning(t *testing.T) {
	t.Parallel()
	// A long lease: the fake clock moves the heartbeats, the database's
	// clock the lease; the holds are seen in the row's lease expiry.
	f := newFixture(t, workqueue.Config{Lease: 2 * time.Minute})
	ids := f.enqueueKeyed("acct-1", "honour", "follower")
	honour, follower := ids[0], ids[1]
	ids = f.enqueueKeyed("", "finish", "ignore", "fail")
	finish, ignore, fail := ids[0], ids[1], ids[2]

	var mu sync.Mutex
	causes := map[string]error{}
	started := make(chan string, 10)
	failNow, release := make(chan struct{}), make(chan struct{})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	h := func(ctx context.Context, job *worker.Job) error {
		src := job.Event.SourceID
		started <- src
		switch src {
		case "honour", "finish":
			<-ctx.Done()
			mu.Lock()
			causes[src] = context.Cause(ctx)
			mu.Unlock()
			if src == "finish" {
				return nil
			}
			return ctx.Err()
		case "ignore":
			<-release
			return ctx.Err()
		case "fail":
			<-failNow
			return errors.New("boom")
		}
		return nil
	}
	const heartbeat = 5 * time.Second
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clk := clock.NewFake(start)
	cfg := quietCfg(5)
	cfg.Controller.Clock = clk
	cfg.Scheduler.HeartbeatEvery = heartbeat
	outcomes := make(chan worker.Finished, 10)
	cfg.OnFinished = func(fin worker.Finished) { outcomes <- fin }
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": h})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	running := map[string]bool{}
	for len(running) < 4 {
		select {
		case src := <-started:
			running[src] = true
		case <-time.After(time.Minute):
			t.Fatalf("started %v, want honour, finish, ignore and fail running", running)
		}
	}

	// The retry of an item cancelled since its last heartbeat is refused.
	if out, err := f.qu.Cancel(f.ctx, scope, fail, ""); err != nil || !out.Running {
		t.Fatalf("cancel fail = %+v, %v", out, err)
	}
	close(failNow)
	f.waitForState(fail, workqueue.StateSkipped)
	if it := f.item(fail); it.Attempts != 1 {
		t.Fatalf("the failed cancelled item made %d attempts, want 1", it.Attempts)
	}

	for _, id := range []int64{honour, finish, ignore} {
		out, err := f.qu.Cancel(f.ctx, scope, id, "customer asked")
		if err != nil || !out.Running {
			t.Fatalf("cancel %d = %+v, %v; want Running", id, out, err)
		}
	}
	// Nothing is told before a heartbeat: the handlers still run.
	mu.Lock()
	told := len(causes)
	mu.Unlock()
	if told != 0 {
		t.Fatalf("%d handlers saw a cancellation before any heartbeat", told)
	}
	clk.Advance(heartbeat) // one heartbeat
	f.waitForState(honour, workqueue.StateSkipped)
	f.waitForState(finish, workqueue.StateCompleted)
	mu.Lock()
	for _, src := range []string{"honour", "finish"} {
		if !errors.Is(causes[src], workqueue.ErrCancelRequested) {
			t.Errorf("%s: the handler's context cause is %v, want one wrapping workqueue.ErrCancelRequested", src, causes[src])
		}
	}
	mu.Unlock()
	f.waitForState(follower, workqueue.StateCompleted) // the lane moved on

	// The ignoring handler is abandoned AbandonAfter after the heartbeat.
	if f.item(ignore).State != workqueue.StateProcessing {
		t.Fatalf("the ignoring handler's item ended before it was abandoned: %s", f.item(ignore).State)
	}
	if !clk.WaitArmed(start.Add(heartbeat+5*time.Second), time.Minute) {
		t.Fatal("no abandon timer armed after the cancellation")
	}
	clk.Advance(5 * time.Second)
	// Abandoned: its slot is back, its item is not.
	waitfor.Until(t, time.Minute, func() (bool, error) { return w.Stats().Scheduler.AbandonedRunning == 1, nil },
		func() string { return fmt.Sprintf("not abandoned: %+v", w.Stats().Scheduler) })
	leaseUntil := func() (at time.Time) {
		if err := f.db.QueryRow("SELECT run_after FROM work_item WHERE work_id = ? AND state = 'processing'", ignore).Scan(&at); err != nil {
			t.Fatalf("the ignoring handler's item while it runs: %v", err)
		}
		return at
	}
	held := leaseUntil()
	// Heartbeats at 5s (the cancellation, then a hold at once) and 10s (a
	// hold): the next is armed for 15s.
	if !clk.WaitArmed(start.Add(3*heartbeat), time.Minute) {
		t.Fatal("the ignoring handler's next hold is not armed")
	}
	clk.Advance(heartbeat) // a hold
	waitfor.Until(t, time.Minute, func() (bool, error) { return leaseUntil().After(held), nil },
		func() string { return "the ignoring handler's lease was not held at its heartbeat" })
	released = true
	close(release)
	f.waitForState(ignore, workqueue.StateSkipped)

	for _, id := range []int64{honour, ignore, fail} {
		class, summary := f.failure(id)
		wantSummary := "cancelled by an operator: customer asked"
		if id == fail {
			wantSummary = "cancelled by an operator"
		}
		if class != workqueue.FailureCancelled || summary != wantSummary {
			t.Errorf("item %d records %q / %q, want %q / %q", id, class, summary, workqueue.FailureCancelled, wantSummary)
		}
	}
	byItem := map[int64]worker.Outcome{}
	for len(byItem) < 5 {
		select {
		case fin := <-outcomes:
			byItem[fin.Item.WorkID] = fin.Outcome
		case <-time.After(time.Minute):
			t.Fatalf("outcomes %v, want five", byItem)
		}
	}
	want := map[int64]worker.Outcome{honour: worker.OutcomeCancelled, finish: worker.OutcomeCompleted, ignore: worker.OutcomeCancelled,
		fail: worker.OutcomeCancelled, follower: worker.OutcomeCompleted}
	if fmt.Sprint(byItem) != fmt.Sprint(want) {
		t.Errorf("outcomes %v, want %v", byItem, want)
	}
	st := w.Stats().Scheduler
	if st.Cancelled != 3 || st.HeartbeatFailures != 0 || st.Abandoned != 1 || st.AbandonedRunning != 0 {
		t.Errorf("scheduler: %d cancelled by a heartbeat, %d heartbeat failures, %d abandoned, %d still running; want 3, 0, 1, 0",
			st.Cancelled, st.HeartbeatFailures, st.Abandoned, st.AbandonedRunning)
	}
}

// TestCancelRunningInAnotherProcess: the item runs in a worker process;
// this process cancels it. The handler there sees its context cancelled
// (with workqueue.ErrCancelRequested) at its next heartbeat, the item ends
// cancelled, and the worker process runs its lane follower.
func TestCancelRunningInAnotherProcess(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	ids := f.enqueueKeyed("acct-2", "block", "after")
	blocked, follower := ids[0], ids[1]
	const lease = 3 * time.Second // heartbeats every second
	h := startHelper(t, "worker-a", f.dsn, helperLeaseEnv+"="+lease.String(), helperBlockOnEnv+"=block")
	h.send(t, "go")
	if line := h.next(t); line != fmt.Sprintf("blocking %d", blocked) {
		t.Fatalf("worker-a said %q, want it blocking on %d", line, blocked)
	}
	began := time.Now()
	if out, err := f.qu.Cancel(f.ctx, scope, blocked, "from another process"); err != nil || !out.Running {
		t.Fatalf("cancel = %+v, %v", out, err)
	}
	if line := h.next(t); line != fmt.Sprintf("cancelled %d true", blocked) {
		t.Fatalf("worker-a said %q, want its handler cancelled with ErrCancelRequested", line)
	}
	told := time.Since(began)
	if line := h.next(t); line != fmt.Sprintf("ran %d", follower) {
		t.Fatalf("worker-a said %q, want the follower %d run", line, follower)
	}
	f.waitForState(blocked, workqueue.StateSkipped)
	if class, summary := f.failure(blocked); class != workqueue.FailureCancelled || !strings.HasSuffix(summary, ": from another process") {
		t.Fatalf("the cancelled item records %q / %q", class, summary)
	}
	var rep helperReport
	waitfor.Until(t, time.Minute, func() (bool, error) {
		rep = h.report(t, "stats", map[string]int{})
		return rep.Stats.Scheduler.Cancelled == 1, nil
	}, func() string { return fmt.Sprintf("scheduler stats %+v", rep.Stats.Scheduler) })
	h.send(t, "stop")
	t.Logf("the handler was told %s after the cancel (heartbeat every %s)", told.Round(time.Millisecond), lease/3)
}
