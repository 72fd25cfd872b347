package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestPoisonItemThatKillsItsProcessEndsDead: a handler that kills its whole
// process (os.Exit) on one item, run by a fresh worker process each time the
// last one died. The item is reclaimed after each expired lease until its
// attempt budget is spent, then goes to dead, and its lane follower runs.
func TestPoisonItemThatKillsItsProcessEndsDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	evs, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{
		{IdempotencyKey: "poison", Payload: []byte("poison"), Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "L"}}},
		{IdempotencyKey: "follower", Payload: []byte("fine"), Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "L"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	poison, follower := evs[0].Work[0].WorkID, evs[1].Work[0].WorkID
	const budget = 3
	env := []string{
		helperLeaseEnv + "=1s", fmt.Sprintf("%s=%d", helperMaxAttemptsEnv, budget), helperExitOnEnv + "=poison",
		worker.EnvExecutors + "=2", worker.EnvGenerationProbeEvery + "=-1s", worker.EnvReconcileEvery + "=-1s",
		helperDebugEnv + "=1", // its log, shown when a process neither dies nor runs the follower
	}
	deaths := 0
	for process := 1; ; process++ {
		if process > budget+2 {
			t.Fatalf("%d processes started and died; the poison item never ended", process-1)
		}
		h := startHelper(t, fmt.Sprintf("process-%d", process), f.dsn, env...)
		h.send(t, "go")
		ranFollower := false
		timeout := time.After(2 * time.Minute)
	read:
		for {
			select {
			case line, ok := <-h.lines:
				if !ok {
					if h.cmd.Wait() == nil {
						t.Fatalf("process %d ended without dying: %s", process, h.stderr.String())
					}
					if h.cmd.ProcessState.ExitCode() != 3 {
						t.Fatalf("process %d exited with %d, not the handler's 3: %s", process, h.cmd.ProcessState.ExitCode(), h.stderr.String())
					}
					deaths++
					break read // the handler killed it
				}
				if line == fmt.Sprintf("ran %d", follower) {
					ranFollower = true
					break read
				}
			case <-timeout:
				h.send(t, "stats")
				report := "no report"
				for wait := time.After(10 * time.Second); report == "no report"; {
					select {
					case line := <-h.lines:
						if strings.HasPrefix(line, "report ") {
							report = line
						}
					case <-wait:
						report = "no report within 10s"
					}
				}
				var row string
				if err := f.db.QueryRow("SELECT CONCAT_WS(' ', state, attempt_count, lease_owner, run_after, NOW(6)) FROM work_item WHERE work_id = ?", poison).Scan(&row); err != nil {
					row = err.Error()
				}
				t.Fatalf("process %d neither died nor ran the follower; poison row (state attempts owner run_after now): %s; %s; stderr (last 16 KiB): %s",
					process, row, report, tail(h.stderr.String(), 16<<10))
			}
		}
		if ranFollower {
			h.send(t, "stop")
			break
		}
	}
	if deaths != budget {
		t.Fatalf("%d processes died on the poison item, want %d (its attempt budget)", deaths, budget)
	}
	var state, class string
	var attempts int
	if err := f.db.QueryRow("SELECT state, COALESCE(failure_class, ''), attempt_count FROM work_item WHERE work_id = ?", poison).Scan(&state, &class, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != workqueue.StateDead || class != workqueue.FailureAttemptsExhausted || attempts != budget {
		t.Fatalf("poison item: %s (%q) after %d attempts; want dead (%s) after %d", state, class, attempts, workqueue.FailureAttemptsExhausted, budget)
	}
	var s string
	waitfor.Until(t, time.Minute, func() (bool, error) {
		err := f.db.QueryRow("SELECT state FROM work_item WHERE work_id = ?", follower).Scan(&s)
		return s == workqueue.StateCompleted, err
	}, func() string { return "follower is " + s })
}

// TestDeadProcessItemsAreReclaimedWithinALease: a process dies holding six
// items across three queue classes. A surviving worker with four executors,
// with the generation probe and the reconciliation backstop both off, takes
// all six back: its due timer is armed for the leases' expiry, and each
// claim turn reclaims expired leases of every class it serves, on any shape
// with a free slot.
func TestDeadProcessItemsAreReclaimedWithinALease(t *testing.T) {
	t.Parallel()
	// The leases must outlast the survivor's start-up (its first claim and
	// lookup), however slow the machine, or that claim takes them and the
	// due timer has nothing to do.
	const lease = 5 * time.Second
	f := newFixture(t, workqueue.Config{Lease: lease})
	f.enqueue(6, 0, "deliver", "interactive", "default", "bulk")
	dead, err := f.qu.NewClaimer(scope, "dead-process", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := dead.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: []string{"interactive", "default", "bulk"}, WorkTypes: []string{"deliver"}, Max: 6})
	if err != nil || len(held) != 6 {
		t.Fatalf("the process that dies claimed %d: %v", len(held), err)
	}
	died := time.Now() // it never renews
	c := newCollector(nil)
	w, err := worker.New(f.qu, quietCfg(4), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 6)
	recovered := time.Since(died)
	settled(t, f, w, map[string]int{"completed": 6})
	st := w.Stats().Controller
	if st.GenerationProbes != 0 || st.Reconciles != 1 || st.DueTimerFires < 1 {
		t.Fatalf("recovery did not come from the due timer: %+v", st)
	}
	for id, n := range c.attempts {
		if n != 1 {
			t.Fatalf("work %d ran %d times", id, n)
		}
	}
	t.Logf("six expired leases across three classes recovered %s after the claims (lease %s, heartbeat %s)", recovered.Round(time.Millisecond), lease, lease/3)
}

// claimAsDeadProcess claims one item of workType through another pool,
// with leases of lease, as a process that dies holding it.
func (f *fixture) claimAsDeadProcess(lease time.Duration, workType string) workqueue.Claimed {
	f.t.Helper()
	deadQueue := f.otherQueue(workqueue.Config{Lease: lease, Announce: workqueue.AnnounceConfig{Off: true}})
	dead, err := deadQueue.NewClaimer(scope, "dead-process", workqueue.ClaimerConfig{})
	if err != nil {
		f.t.Fatal(err)
	}
	held, _, err := dead.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{workType}, Max: 1})
	if err != nil || len(held) != 1 {
		f.t.Fatalf("the process that dies claimed %d: %v", len(held), err)
	}
	return held[0]
}

// TestLeaseExpiringDuringAClaimTurnIsReclaimed: a dead process's lease
// that expires after a claim turn read it live, and before that turn's
// next-work lookup, is already past for the lookup, and nobody announces a
// lease that runs out. With the probe and the backstop off, only a lookup
// that looks back to the turn's start finds it (fresh-clone CI beside two
// CPU hogs caught TestPoisonItemThatKillsItsProcessEndsDead in that gap:
// with defaults the item would have waited for the probe, 20 minutes in
// quiet mode). The hook holds the turn until the lease has expired by the
// database clock, so the gap is certain, not hoped for.
func TestLeaseExpiringDuringAClaimTurnIsReclaimed(t *testing.T) {
	t.Parallel()
	// The worker's own leases outlast the test: its next due time after
	// the turn is an hour away, so only the dead lease can bring a turn.
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	f.enqueue(1, 0, "deliver")
	held := f.claimAsDeadProcess(3*time.Second, "deliver")
	f.enqueue(1, 0, "deliver") // the worker's first turn takes this one
	cfg := quietCfg(2)
	var first sync.Once
	cfg.Hooks = &worker.Hooks{AfterClaimTurn: func(time.Duration, []workqueue.Claimed) {
		first.Do(func() {
			waitfor.Poll(2*time.Minute, func() (bool, bool) {
				var expired bool
				if err := f.db.QueryRow("SELECT run_after < NOW(6) FROM work_item WHERE work_id = ?", held.WorkID).Scan(&expired); err != nil {
					t.Error(err)
					return false, true
				}
				return expired, false
			})
		})
	}}
	c := newCollector(nil)
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	reclaimedByTheDueTimer(t, f, w, c, held.WorkID)
}

// reclaimedByTheDueTimer waits for both items of the test to complete and
// checks that the dead process's item ran here once, recovered by the due
// timer (the probe and the backstop are off).
func reclaimedByTheDueTimer(t *testing.T, f *fixture, w *worker.Worker, c *collector, workID int64) {
	t.Helper()
	c.wait(t, 2)
	settled(t, f, w, map[string]int{"completed": 2})
	if n := c.attempts[workID]; n != 1 {
		t.Fatalf("the dead process's item ran %d times here, want 1", n)
	}
	if st := w.Stats().Controller; st.GenerationProbes != 0 || st.DueTimerFires < 1 {
		t.Fatalf("recovery did not come from the due timer: %+v", st)
	}
}

// faultyQueue is a Queue on its own pool of the fixture's database whose
// statements the returned injector can fault.
func (f *fixture) faultyQueue(cfg workqueue.Config) (*workqueue.Queue, *faultdb.Injector) {
	f.t.Helper()
	db, in, err := faultdb.Open(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	return f.queueOn(db, cfg), in
}

// expireLeaseBeforeLookup makes the first next-work lookup the lease of
// workID run out just before the statement leaves (the lookup's look-back
// is measured by then) and reach the database after, by delay of the
// database's clock: a busy machine's delay between the two, made certain.
// It returns when the lease ran out, by the database's clock, once known.
func (f *fixture) expireLeaseBeforeLookup(in *faultdb.Injector, workID int64, delay time.Duration) <-chan time.Time {
	expired := make(chan time.Time, 1)
	in.Add(faultdb.Rule{Statement: "NextWorkAt", Before: func(ctx context.Context) {
		var at time.Time
		if err := f.db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&at); err != nil {
			f.t.Error(err)
			return
		}
		if _, err := f.db.ExecContext(ctx, "UPDATE work_item SET run_after = ? WHERE work_id = ? AND state = 'processing'", at, workID); err != nil {
			f.t.Error(err)
			return
		}
		expired <- at
		waitfor.Poll(time.Minute, func() (bool, bool) {
			var late bool
			if err := f.db.QueryRowContext(ctx, "SELECT NOW(6) >= DATE_ADD(?, INTERVAL ? MICROSECOND)", at, delay.Microseconds()).Scan(&late); err != nil {
				f.t.Error(err)
				return false, true
			}
			return late, false
		})
	}})
	return expired
}

// deliverBesideExpiringLease runs a quiet worker with a "deliver" handler
// on a queue whose first next-work lookup sees workID's lease run out
// (expireLeaseBeforeLookup).
func (f *fixture) deliverBesideExpiringLease(workID int64, delay time.Duration) (*worker.Worker, *collector, <-chan time.Time) {
	f.t.Helper()
	qu, in := f.faultyQueue(workqueue.Config{Lease: time.Hour})
	expired := f.expireLeaseBeforeLookup(in, workID, delay)
	c := newCollector(nil)
	w, err := worker.New(qu, quietCfg(2), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		f.t.Fatal(err)
	}
	run(f.t, w)
	return w, c, expired
}

// TestLeaseExpiringBeforeTheLookupRunsIsReclaimed: the worker's
// next-work lookup measures its look-back on its own clock, but the
// database subtracts it from the NOW(6) it reads when the statement
// arrives. Here a dead process's lease runs out just after the worker
// measured, and the statement arrives 300ms later: the lookup's slack
// (workqueue.LookBackSlack) still sees the expiry, so the due timer
// reclaims the item; with the probe and the backstop off nothing else
// would. (Fresh-clone CI beside two CPU hogs caught the router's lookup,
// which works the same way, in that gap.)
func TestLeaseExpiringBeforeTheLookupRunsIsReclaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	f.enqueue(1, 0, "deliver")
	held := f.claimAsDeadProcess(time.Hour, "deliver")
	f.enqueue(1, 0, "deliver") // the worker's first turn takes this one
	w, c, _ := f.deliverBesideExpiringLease(held.WorkID, 300*time.Millisecond)
	reclaimedByTheDueTimer(t, f, w, c, held.WorkID)
}

// TestExpiredLeaseOfUnservedWorkCostsOneMoreTurn: a lease the worker
// cannot take (a work type it has no handler for) runs out just before its
// lookup. The look-back reports it as now, the turn it causes cannot take
// it, and the next lookup's window, which reaches LookBackSlack before
// that turn, shows it again: the worker arms that repeat for when it
// leaves the window instead of turning at once until it has, so the
// expiry costs two turns, not a second of them.
func TestExpiredLeaseOfUnservedWorkCostsOneMoreTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	f.enqueue(1, 0, "report")
	held := f.claimAsDeadProcess(time.Hour, "report")
	f.enqueue(1, 0, "deliver")
	w, c, expired := f.deliverBesideExpiringLease(held.WorkID, 0)
	c.wait(t, 1)
	at := <-expired
	// Until the expiry is out of every window (the slack, and a second
	// for the lookups' own delay), by the database's clock.
	waitfor.Until(t, time.Minute, func() (bool, error) {
		var past bool
		err := f.db.QueryRow("SELECT NOW(6) >= DATE_ADD(?, INTERVAL ? MICROSECOND)", at, (workqueue.LookBackSlack + time.Second).Microseconds()).Scan(&past)
		return past, err
	}, func() string { return "the database's clock did not pass the window" })
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats().Controller
	// The first turn, the one the expiry causes and the repeat's (one more
	// of slack); turning until the expiry left the window would be dozens.
	if st.Claims > 4 || st.DueTimerFires < 2 || st.DueTimerFires > 3 {
		t.Fatalf("%d claim turns and %d due fires for one expiry of unserved work, want 3 and 2: %+v", st.Claims, st.DueTimerFires, st)
	}
	if got := f.item(held.WorkID); got.State != "processing" {
		t.Fatalf("the unserved item is %s", got.State)
	}
}

// TestReleaseByAnotherProcessIsFoundByTheProbe: another process releases
// items at its shutdown, behind everything this worker consumed and without
// an enqueue. The worker's probe sees them, with the backstop off.
func TestReleaseByAnotherProcessIsFoundByTheProbe(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	w := probingWorker(t, f, c)
	// The other process does not announce (its announcements lost):
	// only the probe can find what it releases.
	silent := f.otherQueue(workqueue.Config{Announce: workqueue.AnnounceConfig{Off: true}})
	other, err := silent.NewClaimer(scope, "other-process", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	f.enqueue(5, 0, "deliver")
	held, _, err := other.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 5})
	if err != nil || len(held) != 5 {
		t.Fatalf("the other process claimed %d: %v", len(held), err)
	}
	f.enqueue(1, 0, "deliver") // this worker consumes past the five
	run(t, w)
	c.wait(t, 1)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	for _, h := range held {
		if err := silent.Release(f.ctx, h.Lease); err != nil {
			t.Fatal(err)
		}
	}
	c.wait(t, 5)
	settled(t, f, w, map[string]int{"completed": 6})
	if st := w.Stats().Controller; st.Reconciles != 1 || st.GenerationChanges < 1 {
		t.Fatalf("found other than by the probe: %+v", st)
	}
}

// TestEnqueueIntoARunningLaneDoesNotCancelItsHandler: 1,000 events enqueued
// in one batch into the lane of an item whose handler is running. The batch
// locks the running head only for its last statements, so the head's lease
// renewals go through and its handler is not cancelled.
func TestEnqueueIntoARunningLaneDoesNotCancelItsHandler(t *testing.T) {
	t.Parallel()
	// A renewal may wait up to a heartbeat (lease / 3) for the row lock the
	// batch takes at its end: 3s, room for that batch's commit on a loaded
	// machine, still short beside a batch that locked the head throughout.
	const lease = 9 * time.Second
	f := newFixture(t, workqueue.Config{Lease: lease})
	head := f.one("head", "L")
	running, release := make(chan struct{}), make(chan struct{})
	var outcome error
	w, err := worker.New(f.qu, quietCfg(1), map[string]worker.Handler{"head": func(ctx context.Context, job *worker.Job) error {
		close(running)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			outcome = context.Cause(ctx)
			return ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	<-running
	evs := make([]workqueue.Event, 1000)
	for i := range evs {
		evs[i] = workqueue.Event{IdempotencyKey: fmt.Sprintf("follow-%d", i), Payload: []byte("{}"),
			Work: []workqueue.Work{{WorkType: "follow", SourceLane: "L"}}}
	}
	began := time.Now()
	if _, err := f.qu.Enqueue(f.ctx, scope, evs); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	time.Sleep(lease / 3) // one more heartbeat after the enqueue
	close(release)
	settled(t, f, w, map[string]int{"completed": 1, "pending": 1, "blocked": 999})
	if outcome != nil {
		t.Fatalf("the head's handler was cancelled: %v", outcome)
	}
	var attempts int
	if err := f.db.QueryRow("SELECT attempt_count FROM work_item WHERE work_id = ?", head).Scan(&attempts); err != nil || attempts != 1 {
		t.Fatalf("head ran %d attempts (%v), want 1", attempts, err)
	}
	if st := w.Stats().Scheduler; st.HeartbeatFailures != 0 {
		t.Fatalf("%d heartbeat failures during the enqueue", st.HeartbeatFailures)
	}
	t.Logf("1,000-event enqueue into the running lane took %s; lease %s", took.Round(time.Millisecond), lease)
}

// one enqueues one item of workType in lane and returns its id.
func (f *fixture) one(workType, lane string) int64 {
	f.t.Helper()
	f.seq++
	evs, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: fmt.Sprintf("one-%d", f.seq),
		Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: workType, SourceLane: lane}}}})
	if err != nil {
		f.t.Fatal(err)
	}
	return evs[0].Work[0].WorkID
}

// TestWorkerRidesOutInjectedFaults: deadlocks and lock-wait timeouts on the
// claim CAS, a lost reply of a claim CAS, failed renewals, batched
// completions that fail transiently or lose their reply, and failed event
// loads (batch and single). The controller stays usable (it
// restarts after the errors proven to have committed nothing), the worker
// keeps running, and every item runs exactly once.
func TestWorkerRidesOutInjectedFaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	db, in, err := faultdb.Open(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []faultdb.Rule{
		{Statement: "ClaimBatchCAS", Fault: faultdb.Deadlock},
		{Statement: "ClaimBatchCAS", Skip: 1, Fault: faultdb.ReplyLost},
		{Statement: "ClaimBatchCAS", Skip: 3, Fault: faultdb.LockWaitTimeout},
		{Statement: "ClaimedByRef", Skip: 2, Fault: faultdb.DropBefore}, // the read-back also reads the events
		// Items in no lane are completed in group-committed batches.
		{Statement: "FinishBatch", Fault: faultdb.LockWaitTimeout, Times: 2},
		{Statement: "FinishBatch", Skip: 5, Fault: faultdb.ReplyLost, Times: 3},
	} {
		in.Add(r)
	}
	f.enqueue(60, 0, "deliver", "interactive", "default", "bulk")
	c := newCollector(nil)
	w, err := worker.New(qu, quietCfg(4), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	c.wait(t, 60)
	settled(t, f, w, map[string]int{"completed": 60})
	if !w.Running() {
		t.Fatal("the worker stopped")
	}
	for id, n := range c.attempts {
		if n != 1 {
			t.Fatalf("work %d ran %d times", id, n)
		}
	}
	// A failed claim restarts the controller only when nothing else was won
	// in its turn (the turn's other claims often win), so restarts are
	// logged, not required.
	st := w.Stats()
	if st.Queue.WriteRetries < 3 {
		t.Fatalf("write retries %d: the faults did not happen", st.Queue.WriteRetries)
	}
	t.Logf("controller restarts %d, write retries %d", st.ControllerRestarts, st.Queue.WriteRetries)
	for _, name := range []string{"ClaimBatchCAS", "ClaimedByRef", "FinishBatch"} {
		if in.Fired(name) == 0 {
			t.Fatalf("no fault fired at %s", name)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestUnservedWorkKindIsReported: work of a queue class that none of the
// worker's executor shapes claims is logged at start-up and counted, instead
// of silently blocking its lanes.
func TestUnservedWorkKindIsReported(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(1, 0, "deliver", "reports")
	f.enqueue(1, 0, "other-type", "reports") // not this worker's type: not its report
	var logs syncBuffer
	cfg := quietCfg(4)
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": newCollector(nil).handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	got := w.UnservedWorkKinds()
	if len(got) != 1 || got[0] != (workqueue.WorkKind{QueueClass: "reports", WorkType: "deliver"}) {
		t.Fatalf("unserved work kinds %v, want [{reports deliver}]", got)
	}
	if !strings.Contains(logs.String(), "queue class no executor shape serves") || !strings.Contains(logs.String(), "queue_class=reports") {
		t.Fatalf("not logged:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
