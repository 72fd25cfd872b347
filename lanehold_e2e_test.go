package laneq_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The lane rule across processes: while a process that can reach the
// database still runs a handler, nothing behind its item in its lane
// starts, and no other attempt of the item starts, whatever ended the
// handler's context. Two worker processes serve the scope; item A (its
// handler ignores its context until the test releases it) heads lane
// acct:1, item B follows it.

const (
	laneProcessEnv     = "LANEQ_TEST_LANE_PROCESS_DSN"
	laneProcessModeEnv = "LANEQ_TEST_LANE_PROCESS_MODE" // "cancel" or "deadline"
	laneProcessLease   = 6 * time.Second
	laneProcessBeat    = time.Second
)

// laneStep is the work of these tests: a stubborn step ignores its context
// on its first attempt until the test releases it.
type laneStep struct {
	Name     string `json:"name"`
	Stubborn bool   `json:"stubborn"`
}

func (laneStep) Kind() string { return "lane_step" }

// TestHelperLaneProcess is a worker process of the tests below; it does
// nothing unless one of them started it. It prints "start NAME ATTEMPT NS"
// and "end NAME ATTEMPT NS" around each handler, "ctxdone NAME" when a
// stubborn handler sees its context end (and ignores it), and "abandoned N"
// when its scheduler's count of abandoned handlers changes. A stdin line
// "release NAME" lets the stubborn handler of NAME return; the end of stdin
// closes the client.
func TestHelperLaneProcess(t *testing.T) {
	dsn := os.Getenv(laneProcessEnv)
	if dsn == "" {
		return
	}
	ctx := context.Background()
	sched := scheduler.Config{Executors: 2, HeartbeatEvery: laneProcessBeat, AbandonAfter: time.Second}
	if os.Getenv(laneProcessModeEnv) == "deadline" {
		sched.HandlerDeadline = 2 * time.Second
	}
	// Maintenance every second: the process's row says how many handlers
	// it abandoned soon after it did.
	c, err := laneq.Open(ctx, dsn, laneq.Config{Scope: "tenant-a",
		Queue:  workqueue.Config{Lease: laneProcessLease},
		Worker: worker.Config{Scheduler: sched, Controller: controller.Config{MaintainEvery: time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	var out sync.Mutex
	say := func(format string, args ...any) {
		out.Lock()
		defer out.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	var relMu sync.Mutex
	released := map[string]chan struct{}{}
	releaseOf := func(name string) chan struct{} {
		relMu.Lock()
		defer relMu.Unlock()
		if released[name] == nil {
			released[name] = make(chan struct{})
		}
		return released[name]
	}
	if err := laneq.AddWorker(c, func(ctx context.Context, job *laneq.Job[laneStep]) error {
		name, attempt := job.Args.Name, job.Item.Attempt
		say("start %s %d %d", name, attempt, time.Now().UnixNano())
		var err error
		if job.Args.Stubborn && attempt == 1 {
			<-ctx.Done()
			say("ctxdone %s", name)
			<-releaseOf(name) // as a call that ignores its context would
			err = ctx.Err()
		}
		say("end %s %d %d", name, attempt, time.Now().UnixNano())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		// Instrumentation, not a wait: report each change of the count.
		defer close(watched)
		var last uint64
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopWatch:
				return
			case <-tick.C:
			}
			if n := c.Worker().Stats().Scheduler.Abandoned; n != last {
				last = n
				say("abandoned %d", n)
			}
		}
	}()
	say("ready")
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if name, ok := strings.CutPrefix(in.Text(), "release "); ok {
			close(releaseOf(name))
		}
	}
	close(stopWatch)
	<-watched
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// laneLine is one line a lane process printed.
type laneLine struct {
	proc   int
	fields []string
}

// laneProcesses runs worker processes and merges what they print.
type laneProcesses struct {
	stdins []io.WriteCloser
	lines  chan laneLine
	mu     sync.Mutex
	seen   []laneLine
}

func startLaneProcesses(t *testing.T, dsn, mode string, n int) *laneProcesses {
	t.Helper()
	lp := &laneProcesses{lines: make(chan laneLine, 1000)}
	for i := range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperLaneProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), laneProcessEnv+"="+dsn, laneProcessModeEnv+"="+mode)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		lp.stdins = append(lp.stdins, stdin)
		t.Cleanup(func() {
			_ = stdin.Close()
			if err := cmd.Wait(); err != nil {
				t.Errorf("lane process %d: %v", i, err)
			}
		})
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				l := laneLine{proc: i, fields: strings.Fields(sc.Text())}
				lp.mu.Lock()
				lp.seen = append(lp.seen, l)
				lp.mu.Unlock()
				lp.lines <- l
			}
		}()
		lp.await(t, func(l laneLine) bool { return l.proc == i && l.fields[0] == "ready" }, "process ready")
	}
	return lp
}

// await returns the next line match accepts, failing after the guard.
func (lp *laneProcesses) await(t *testing.T, match func(laneLine) bool, what string) laneLine {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case l := <-lp.lines:
			if len(l.fields) > 0 && match(l) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %s within %s; lines so far: %v", what, guard, lp.all())
		}
	}
}

// awaitLine waits for the line "word name [attempt]" from any process.
func (lp *laneProcesses) awaitLine(t *testing.T, word, name string, attempt int) laneLine {
	t.Helper()
	return lp.await(t, func(l laneLine) bool { return lineIs(l, word, name, attempt) }, fmt.Sprintf("%q of %s attempt %d", word, name, attempt))
}

func lineIs(l laneLine, word, name string, attempt int) bool {
	if len(l.fields) < 2 || l.fields[0] != word || l.fields[1] != name {
		return false
	}
	return attempt == 0 || (len(l.fields) > 2 && l.fields[2] == strconv.Itoa(attempt))
}

// at reads a start or end line's time.
func (l laneLine) at(t *testing.T) time.Time {
	t.Helper()
	ns, err := strconv.ParseInt(l.fields[3], 10, 64)
	if err != nil {
		t.Fatalf("line %v: %v", l.fields, err)
	}
	return time.Unix(0, ns)
}

func (lp *laneProcesses) all() []string {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	out := make([]string, len(lp.seen))
	for i, l := range lp.seen {
		out[i] = fmt.Sprintf("p%d: %s", l.proc, strings.Join(l.fields, " "))
	}
	return out
}

// started reports whether any process printed the start of name (any
// attempt when 0).
func (lp *laneProcesses) started(name string, attempt int) bool {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	for _, l := range lp.seen {
		if lineIs(l, "start", name, attempt) {
			return true
		}
	}
	return false
}

func (lp *laneProcesses) send(t *testing.T, proc int, line string) {
	t.Helper()
	if _, err := io.WriteString(lp.stdins[proc], line+"\n"); err != nil {
		t.Fatalf("tell process %d %q: %v", proc, line, err)
	}
}

// laneHoldCase enqueues A (stubborn) and B in lane acct:1 on a fresh
// database served by two worker processes, waits until A runs, calls
// stopA (the cancellation, or nothing for the deadline), and holds the
// processes to the lane rule until A's handler has been abandoned and its
// lease held past the expiry it had when its context ended. It returns
// the processes and the database after the test released A.
func laneHoldCase(t *testing.T, mode string, stopA func(ctl *laneq.Client, a int64)) (*laneProcesses, *laneq.Client, *sql.DB, int64, int64) {
	t.Helper()
	db, dsn := tidbtest.NewDBWithDSN(t)
	ctl := openClientOn(t, dsn, laneq.Config{Migrate: true})
	lp := startLaneProcesses(t, dsn, mode, 2)
	ctx := context.Background()
	a, err := ctl.Enqueue(ctx, laneStep{Name: "A", Stubborn: true}, laneq.WithSourceLane("acct:1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ctl.Enqueue(ctx, laneStep{Name: "B"}, laneq.WithSourceLane("acct:1"))
	if err != nil {
		t.Fatal(err)
	}
	runsA := lp.awaitLine(t, "start", "A", 1).proc
	stopA(ctl, a.WorkID)
	lp.await(t, func(l laneLine) bool { return l.proc == runsA && lineIs(l, "ctxdone", "A", 0) }, "A's handler seeing its context end")
	// Where the lease stood once the handler was told to stop: held, it
	// moves on past this; let go, it runs out and another process may
	// take the item or its lane.
	var told time.Time
	var token int64
	if err := db.QueryRow("SELECT run_after, lease_token FROM work_item WHERE work_id = ?", a.WorkID).Scan(&told, &token); err != nil {
		t.Fatal(err)
	}
	lp.await(t, func(l laneLine) bool {
		return l.proc == runsA && len(l.fields) == 2 && l.fields[0] == "abandoned" && l.fields[1] == "1"
	},
		"A's handler abandoned")
	waitfor.Until(t, guard, func() (bool, error) {
		var state string
		var leaseUntil time.Time
		var tok int64
		var past bool
		err := db.QueryRow("SELECT state, run_after, lease_token, NOW(6) > ? FROM work_item WHERE work_id = ?", told, a.WorkID).Scan(&state, &leaseUntil, &tok, &past)
		if err != nil {
			return false, err
		}
		if state != workqueue.StateProcessing || tok != token {
			return false, fmt.Errorf("A is %s with token %d while its handler still runs, want processing with token %d; lines %v", state, tok, token, lp.all())
		}
		return past && leaseUntil.After(told), nil
	}, func() string {
		return fmt.Sprintf("A's lease was not held past %s while its handler ran; lines %v", told, lp.all())
	})
	// Operators see it: the process's row counts its abandoned handler.
	processes := inspect.NewFromQueue(ctl.Queue())
	waitfor.Until(t, guard, func() (bool, error) {
		n, err := processes.AbandonedHandlers(ctx, ctl.Scope())
		return n == 1, err
	}, func() string { return "no process row counts the abandoned handler" })
	if lp.started("B", 0) || lp.started("A", 2) {
		t.Fatalf("B or a second attempt of A started while A's first handler still runs: %v", lp.all())
	}
	var stateB string
	if err := db.QueryRow("SELECT state FROM work_item WHERE work_id = ?", b.WorkID).Scan(&stateB); err != nil {
		t.Fatal(err)
	}
	if stateB != workqueue.StateBlocked {
		t.Fatalf("B is %s while A's handler still runs, want blocked", stateB)
	}
	lp.send(t, runsA, "release A")
	return lp, ctl, db, a.WorkID, b.WorkID
}

// Client.Cancel of a running item whose handler ignores its context: the
// item ends cancelled when the handler returns, not before, and only then
// does its lane follower start, in either process.
func TestCancelKeepsLaneOrderWithUncooperativeHandler(t *testing.T) {
	t.Parallel()
	lp, ctl, _, a, b := laneHoldCase(t, "cancel", func(ctl *laneq.Client, a int64) {
		out, err := ctl.Cancel(context.Background(), a, "stuck call")
		if err != nil || !out.Running {
			t.Fatalf("cancel A = %+v, %v; want Running", out, err)
		}
	})
	endA := lp.awaitLine(t, "end", "A", 1)
	startB := lp.awaitLine(t, "start", "B", 1)
	if startB.at(t).Before(endA.at(t)) {
		t.Fatalf("B started at %s, before A's handler returned at %s", startB.at(t), endA.at(t))
	}
	ctx := context.Background()
	waitfor.Until(t, guard, func() (bool, error) {
		it, err := ctl.Item(ctx, b)
		return err == nil && it.State == workqueue.StateCompleted, err
	}, func() string { return "B did not complete" })
	it, err := ctl.Item(ctx, a)
	if err != nil || it.State != workqueue.StateSkipped || it.Failure == nil || it.Failure.Class != workqueue.FailureCancelled || it.Attempts != 1 {
		t.Fatalf("A after its handler returned: %+v, %v; want skipped, cancelled, one attempt", it, err)
	}
}

// HandlerDeadline passed by a handler that ignores its context: the item
// keeps its lease until the handler returns; only then is its failure
// recorded and its retry runs, and then its lane follower.
func TestDeadlineKeepsLaneOrderWithUncooperativeHandler(t *testing.T) {
	t.Parallel()
	lp, ctl, _, a, b := laneHoldCase(t, "deadline", func(*laneq.Client, int64) {})
	endA1 := lp.awaitLine(t, "end", "A", 1)
	startA2 := lp.awaitLine(t, "start", "A", 2)
	if startA2.at(t).Before(endA1.at(t)) {
		t.Fatalf("A's second attempt started at %s, before its first handler returned at %s", startA2.at(t), endA1.at(t))
	}
	endA2 := lp.awaitLine(t, "end", "A", 2)
	startB := lp.awaitLine(t, "start", "B", 1)
	if startB.at(t).Before(endA2.at(t)) {
		t.Fatalf("B started at %s, before A's last handler returned at %s", startB.at(t), endA2.at(t))
	}
	ctx := context.Background()
	waitfor.Until(t, guard, func() (bool, error) {
		it, err := ctl.Item(ctx, b)
		return err == nil && it.State == workqueue.StateCompleted, err
	}, func() string { return "B did not complete" })
	it, err := ctl.Item(ctx, a)
	if err != nil || it.State != workqueue.StateCompleted || it.Attempts != 2 {
		t.Fatalf("A: %+v, %v; want completed in two attempts", it, err)
	}
}

// Close after a Stop whose context ran out waits for that shutdown: a
// handler that ignores its context still runs, so the pool its finish needs
// stays open, and its item ends by its own outcome instead of running again
// after its lease.
func TestCloseAfterTimedOutStopWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := tidbtest.NewDBWithDSN(t)
	c, err := laneq.Open(ctx, dsn, laneq.Config{Scope: "tenant-a",
		Worker: worker.Config{Scheduler: scheduler.Config{AbandonAfter: 100 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	started, sawStop, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	if err := laneq.AddWorker(c, func(ctx context.Context, job *laneq.Job[greet]) error {
		close(started)
		<-ctx.Done()
		close(sawStop)
		<-release // as a call that ignores its context would
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, greet{Name: "stubborn"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(guard):
		t.Fatal("handler did not start")
	}
	w := c.Worker()
	stopCtx, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	if err := c.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a handler that ignores it = %v, want the context's deadline", err)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	select {
	case <-sawStop:
	case <-time.After(guard):
		t.Fatal("the handler's context did not end")
	}
	// Abandoned: the point at which a shutdown that gave up on the handler
	// would already have closed the pool.
	waitfor.Until(t, guard, func() (bool, error) { return w.Stats().Scheduler.Abandoned == 1, nil },
		func() string { return fmt.Sprintf("the handler was not abandoned: %+v", w.Stats().Scheduler) })
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a handler still runs", err)
	default:
	}
	close(release)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(guard):
		t.Fatal("Close did not return after the handler did")
	}
	var state string
	if err := db.QueryRow("SELECT state FROM work_item WHERE work_id = ?", res.WorkID).Scan(&state); err != nil {
		t.Fatal(err)
	}
	if state != workqueue.StateCompleted {
		t.Fatalf("the item is %s after its handler returned nil and Close returned, want completed", state)
	}
}
