// Package laneqtest is a test kit for code that uses laneq: a real TiDB for
// each test binary (never a mock), a migrated database of its own for each
// test, and waits and checks over a laneq.Client.
//
//	func TestMain(m *testing.M) { os.Exit(laneqtest.Main(m)) }
//
//	func TestSignup(t *testing.T) {
//		client := laneqtest.Open(t, laneq.Config{})
//		laneq.AddWorker(client, sendWelcome)
//		laneqtest.Start(t, client)
//		res := signup(t, client) // enqueues a Welcome
//		args := laneqtest.RequireEnqueued[Welcome](t, client, res.WorkID)
//		laneqtest.WaitForState(t, client, res.WorkID, workqueue.StateCompleted)
//	}
//
// TiDB is found as laneq's own tests find it (LANEQ_TIDB_DSN, then a
// Docker image, then an embedded tidb-server; see the README): the first
// test that needs it starts it, Main stops it. A test fails, never skips,
// when none can start. Every wait is for a condition, bounded by Guard as
// a failure guard only.
//
// Databases come from one pool per test binary: each is migrated once,
// emptied when its test ends and handed to the next test, and serves one
// test at a time. Mark tests t.Parallel(): parallel tests get a database
// each, and a suite pays laneq's migrations once per test running at a
// time, not once per test.
package laneqtest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/inspect"
)

// Guard bounds every wait of this package: a wait that has not seen its
// condition after Guard fails the test. It is generous on purpose (a
// loaded CI machine), never a timing assertion.
var Guard = 2 * time.Minute

// Main runs the tests and stops the TiDB they started. Call it from
// TestMain.
func Main(m *testing.M) int { return tidbtest.Main(m) }

// DSN returns the DSN (for laneq.Open, or another process) of a database
// with laneq's schema and no rows, used by this test alone until it ends,
// then emptied and reused by a later test of the binary.
func DSN(t testing.TB) string {
	t.Helper()
	_, dsn := tidbtest.NewDBWithDSN(t)
	return dsn
}

// Open opens a Client on a database of this test's own (DSN), closed when
// the test ends. An empty cfg.Scope becomes "test".
func Open(t testing.TB, cfg laneq.Config) *laneq.Client {
	t.Helper()
	if cfg.Scope == "" {
		cfg.Scope = "test"
	}
	c, err := laneq.Open(context.Background(), DSN(t), cfg)
	if err != nil {
		t.Fatalf("laneqtest: open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("laneqtest: close: %v", err)
		}
	})
	return c
}

// Start starts c's worker; the Client's Close (at cleanup, with Open)
// stops it.
func Start(t testing.TB, c *laneq.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("laneqtest: start: %v", err)
	}
}

// RequireEnqueued fails the test unless workID is an item of T's kind in
// c's scope whose args decode as T, and returns them.
func RequireEnqueued[T laneq.Args](t testing.TB, c *laneq.Client, workID int64) T {
	t.Helper()
	var args T
	ctx := context.Background()
	it, err := c.Item(ctx, workID)
	if err != nil {
		t.Fatalf("laneqtest: item %d: %v", workID, err)
	}
	if it.Scope != c.Scope() {
		t.Fatalf("laneqtest: item %d is of scope %q, not %q", workID, it.Scope, c.Scope())
	}
	if it.WorkType != args.Kind() {
		t.Fatalf("laneqtest: item %d is of kind %q, want %q", workID, it.WorkType, args.Kind())
	}
	ev, err := c.Queue().LoadEvent(ctx, it.Event.EventID)
	if err != nil {
		t.Fatalf("laneqtest: event of item %d: %v", workID, err)
	}
	if err := json.Unmarshal(ev.Payload, &args); err != nil {
		t.Fatalf("laneqtest: args of item %d do not decode as %T: %v", workID, args, err)
	}
	return args
}

// WaitForState waits until item workID is in state (workqueue.State*) and
// returns it; it fails the test when the item reaches another terminal
// state first, or after Guard.
func WaitForState(t testing.TB, c *laneq.Client, workID int64, state string) inspect.Item {
	t.Helper()
	var last inspect.Item
	ok := waitFor(func() (bool, bool) {
		it, err := c.Item(context.Background(), workID)
		if err != nil {
			t.Fatalf("laneqtest: item %d: %v", workID, err)
		}
		last = it
		return it.State == state, !it.TerminalAt.IsZero()
	})
	if !ok {
		t.Fatalf("laneqtest: item %d is %s (failure %+v), want %s", workID, last.State, last.Failure, state)
	}
	return last
}

// Drain waits until c's scope has no live item (Client.Drained): every
// item completed, skipped or dead. Items waiting for a dependency nobody
// satisfies never drain: the test fails after Guard.
func Drain(t testing.TB, c *laneq.Client) {
	t.Helper()
	if !waitFor(func() (bool, bool) {
		ok, err := c.Drained(context.Background())
		if err != nil {
			t.Fatalf("laneqtest: drained: %v", err)
		}
		return ok, false
	}) {
		t.Fatalf("laneqtest: scope %q still has live items after %s", c.Scope(), Guard)
	}
}

// Work enqueues args (with opts) on a started client and waits for the
// first outcome its worker writes for that item (completed, skipped,
// retried, dead or waiting): the real claim, handler and finish path, run
// synchronously from the test's view. It fails after Guard.
func Work(t testing.TB, c *laneq.Client, args laneq.Args, opts ...laneq.EnqueueOption) laneq.Event {
	t.Helper()
	events, stop := c.Subscribe(laneq.EventCompleted, laneq.EventSkipped, laneq.EventRetried, laneq.EventDead, laneq.EventWaiting)
	defer stop()
	res, err := c.Enqueue(context.Background(), args, opts...)
	if err != nil {
		t.Fatalf("laneqtest: enqueue: %v", err)
	}
	if res.Duplicate {
		t.Fatalf("laneqtest: enqueue of %s was a duplicate of item %d (%s): use a fresh idempotency key", args.Kind(), res.WorkID, res.State)
	}
	timeout := time.After(Guard)
	for {
		select {
		case e, open := <-events:
			if !open {
				t.Fatalf("laneqtest: client closed before item %d finished", res.WorkID)
			}
			if e.WorkID == res.WorkID {
				return e
			}
		case <-timeout:
			t.Fatalf("laneqtest: item %d of %s had no outcome after %s (is the client started, with a worker for it?)", res.WorkID, args.Kind(), Guard)
		}
	}
}

// WaitFor waits until cond holds, for conditions the kit does not name (a
// receipt materialized, a count reached, a row of your own written): it
// calls cond with a pause that doubles from 1 ms to 100 ms, and fails the
// test with what when cond returns an error or does not hold within Guard.
func WaitFor(t testing.TB, what string, cond func() (bool, error)) {
	t.Helper()
	waitfor.Until(t, Guard, cond, func() string { return "laneqtest: waiting for " + what })
}

// waitFor calls check until it reports done (true) or that it never will
// (stop), or Guard passed; it reports done.
func waitFor(check func() (done, stop bool)) bool { return waitfor.Poll(Guard, check) }
