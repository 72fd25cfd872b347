package laneq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/laneqtest"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// guard bounds every wait for a condition; it is a failure guard, not a
// timing assertion.
const guard = 2 * time.Minute

type greet struct {
	Name string `json:"name"`
}

func (greet) Kind() string { return "greet" }

type flaky struct{ N int }

func (flaky) Kind() string { return "flaky" }

// openClient opens a Client on a fresh database of the shared TiDB, closed
// when the test ends.
func openClient(t testing.TB, cfg laneq.Config) (*laneq.Client, string) {
	t.Helper()
	_, dsn := tidbtest.NewDBWithDSN(t)
	return openClientOn(t, dsn, cfg), dsn
}

// openClientOn opens a Client on dsn (scope tenant-a unless cfg names
// one), closed when the test ends.
func openClientOn(t testing.TB, dsn string, cfg laneq.Config) *laneq.Client {
	t.Helper()
	if cfg.Scope == "" {
		cfg.Scope = "tenant-a"
	}
	c, err := laneq.Open(context.Background(), dsn, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

// startWorker registers handle, subscribes to kinds (every kind when none)
// and starts c.
func startWorker[T laneq.Args](t *testing.T, c *laneq.Client, handle func(context.Context, *laneq.Job[T]) error, kinds ...laneq.EventKind) <-chan laneq.Event {
	t.Helper()
	if err := laneq.AddWorker(c, handle); err != nil {
		t.Fatal(err)
	}
	events, stop := c.Subscribe(kinds...)
	t.Cleanup(stop)
	laneqtest.Start(t, c)
	return events
}

// nextEvent returns the next event from ch, failing after the guard.
func nextEvent(t *testing.T, ch <-chan laneq.Event) laneq.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("subscription closed")
		}
		return e
	case <-time.After(guard):
		t.Fatalf("no event within %s", guard)
	}
	return laneq.Event{}
}

func TestClientRunsTypedHandlerAndReportsCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	got := make(chan greet, 1)
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[greet]) error {
		got <- job.Args
		return nil
	})
	res, err := c.Enqueue(ctx, greet{Name: "ada"}, laneq.WithIdempotencyKey("g-1"), laneq.WithSourceLane("user:1"))
	if err != nil {
		t.Fatal(err)
	}
	if res.WorkID == 0 || res.State != workqueue.StatePending || res.Duplicate {
		t.Fatalf("Enqueue = %+v, want a new pending item", res)
	}
	e := nextEvent(t, events)
	if diff := cmp.Diff(laneq.Event{Kind: laneq.EventCompleted, WorkID: res.WorkID, WorkType: "greet", QueueClass: "default", Attempt: 1},
		e, cmpIgnoreAt); diff != "" {
		t.Errorf("event (-want +got):\n%s", diff)
	}
	if a := <-got; a.Name != "ada" {
		t.Errorf("handler got %+v", a)
	}
	it, err := c.Item(ctx, res.WorkID)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != workqueue.StateCompleted || it.SourceLane != "user:1" {
		t.Errorf("item %+v, want completed in lane user:1", it)
	}
	dup, err := c.Enqueue(ctx, greet{Name: "ada again"}, laneq.WithIdempotencyKey("g-1"))
	if err != nil {
		t.Fatal(err)
	}
	if !dup.Duplicate || dup.WorkID != res.WorkID || dup.State != workqueue.StateCompleted {
		t.Errorf("second enqueue with the key = %+v, want the duplicate of %d, completed", dup, res.WorkID)
	}
}

var cmpIgnoreAt = cmp.Comparer(func(a, b time.Time) bool { return true })

func TestClientRetriesThenCompletes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{Queue: workqueue.Config{Retry: workqueue.RetryPolicy{Initial: time.Millisecond, Max: time.Millisecond}}})
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[flaky]) error {
		if job.Item.Attempt <= int32(job.Args.N) {
			return fmt.Errorf("attempt %d fails", job.Item.Attempt)
		}
		return nil
	}, laneq.EventRetried, laneq.EventCompleted)
	res, err := c.Enqueue(ctx, flaky{N: 2})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []laneq.EventKind
	for len(kinds) < 3 {
		e := nextEvent(t, events)
		if e.WorkID != res.WorkID {
			t.Fatalf("event of item %d, want %d", e.WorkID, res.WorkID)
		}
		if e.Kind == laneq.EventRetried && (e.Err == nil || e.Err.Error() != fmt.Sprintf("attempt %d fails", e.Attempt)) {
			t.Errorf("retried event carries %v", e.Err)
		}
		kinds = append(kinds, e.Kind)
	}
	if diff := cmp.Diff([]laneq.EventKind{laneq.EventRetried, laneq.EventRetried, laneq.EventCompleted}, kinds); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// Args that do not decode as their kind's type cannot be fixed by a retry:
// the item is dead at once, with its own failure class, and a replay
// through the Client is announced as an event.
func TestClientUndecodableArgsAreDeadAndReplayable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	ran := make(chan string, 1)
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[greet]) error {
		ran <- job.Args.Name
		return nil
	}, laneq.EventDead, laneq.EventReplayed)
	// Bytes of another encoding, under the typed kind, through the layer
	// below the Client.
	res, err := c.Queue().Enqueue(ctx, c.Scope(), []workqueue.Event{{IdempotencyKey: "raw-1", Payload: []byte("name=ada"),
		Work: []workqueue.Work{{WorkType: "greet"}}}})
	if err != nil {
		t.Fatal(err)
	}
	id := res[0].Work[0].WorkID
	e := nextEvent(t, events)
	var de *laneq.DecodeError
	if e.Kind != laneq.EventDead || e.WorkID != id || e.Attempt != 1 || !errors.As(e.Err, &de) || de.Kind != "greet" {
		t.Fatalf("event %+v, want item %d dead on its first attempt with a DecodeError", e, id)
	}
	it, err := c.Item(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != workqueue.StateDead || it.Failure == nil || it.Failure.Class != "undecodable_args" {
		t.Fatalf("item %+v (failure %+v), want dead with class undecodable_args", it, it.Failure)
	}
	page, err := c.DeadLetters(ctx, inspect.DeadLetterQuery{FailureClass: "undecodable_args"})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Items[0].WorkID != id {
		t.Fatalf("dead letters %+v, want item %d", page.Items, id)
	}
	counts, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Total.Dead != 1 {
		t.Errorf("Stats total %+v, want 1 dead", counts.Total)
	}
	child, err := c.Replay(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, events); e.Kind != laneq.EventReplayed || e.WorkID != child || e.ReplayOf != id {
		t.Errorf("event %+v, want replayed %d of %d", e, child, id)
	}
	select {
	case name := <-ran:
		t.Fatalf("handler ran with %q", name)
	default:
	}
}

// Stop lets a running handler see its context end and gives its item back,
// due at once; it never waits past its own context.
func TestClientStopReleasesRunningItems(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	started := make(chan int64, 1)
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[greet]) error {
		started <- job.Item.WorkID
		<-ctx.Done()
		return ctx.Err()
	}, laneq.EventReleased)
	res, err := c.Enqueue(ctx, greet{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(guard):
		t.Fatal("handler did not start")
	}
	stopCtx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if e := nextEvent(t, events); e.WorkID != res.WorkID {
		t.Errorf("released event %+v, want item %d", e, res.WorkID)
	}
	it, err := c.Item(ctx, res.WorkID)
	if err != nil {
		t.Fatal(err)
	}
	if it.State != workqueue.StatePending || it.LeaseOwner != "" {
		t.Errorf("after Stop the item is %s owned by %q, want pending and unowned", it.State, it.LeaseOwner)
	}
	if err := c.Start(ctx); !errors.Is(err, laneq.ErrStopped) {
		t.Errorf("Start after Stop = %v, want ErrStopped", err)
	}
}

type badKind struct{}

func (badKind) Kind() string { return "has space" }

type ptrKind struct{ name string }

func (p *ptrKind) Kind() string { return p.name }

func TestClientRefusesBadConfigurationAndRegistration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := laneq.Open(ctx, "root@tcp(127.0.0.1:1)/x", laneq.Config{}); !errors.Is(err, laneq.ErrConfig) {
		t.Errorf("Open without a scope = %v, want ErrConfig", err)
	}
	_, emptyDSN := emptyDatabase(t)
	if _, err := laneq.Open(ctx, emptyDSN, laneq.Config{Scope: "s"}); !errors.Is(err, laneq.ErrSchemaNotCurrent) {
		t.Errorf("Open on an unmigrated database = %v, want ErrSchemaNotCurrent", err)
	}
	c, _ := openClient(t, laneq.Config{})
	if err := c.Start(ctx); !errors.Is(err, laneq.ErrNoWorkers) {
		t.Errorf("Start with no workers = %v, want ErrNoWorkers", err)
	}
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[badKind]) error { return nil }); !errors.Is(err, laneq.ErrInvalidKind) {
		t.Errorf("AddWorker of kind %q = %v, want ErrInvalidKind", badKind{}.Kind(), err)
	}
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[*ptrKind]) error { return nil }); !errors.Is(err, laneq.ErrInvalidKind) {
		t.Errorf("AddWorker of a pointer type = %v, want ErrInvalidKind", err)
	}
	if _, err := c.Enqueue(ctx, badKind{}); !errors.Is(err, laneq.ErrInvalidKind) {
		t.Errorf("Enqueue of kind %q = %v, want ErrInvalidKind", badKind{}.Kind(), err)
	}
	if _, err := c.Enqueue(ctx, greet{}, laneq.WithDelay(-time.Second)); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("Enqueue with a negative delay = %v, want ErrInvalid", err)
	}
	if _, err := c.Enqueue(ctx, greet{}, laneq.WithQueueClass("no such class!")); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("Enqueue with a bad class = %v, want ErrInvalid", err)
	}
	handle := func(context.Context, *laneq.Job[greet]) error { return nil }
	if err := laneq.AddWorker(c, handle); err != nil {
		t.Fatal(err)
	}
	if err := laneq.AddWorker(c, handle); !errors.Is(err, laneq.ErrDuplicateKind) {
		t.Errorf("second AddWorker of greet = %v, want ErrDuplicateKind", err)
	}
	if err := laneq.AddWorkerRaw(c, "greet", func(context.Context, *worker.Job) error { return nil }); !errors.Is(err, laneq.ErrDuplicateKind) {
		t.Errorf("AddWorkerRaw of greet = %v, want ErrDuplicateKind", err)
	}
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(ctx); !errors.Is(err, laneq.ErrStarted) {
		t.Errorf("second Start = %v, want ErrStarted", err)
	}
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[flaky]) error { return nil }); !errors.Is(err, laneq.ErrStarted) {
		t.Errorf("AddWorker after Start = %v, want ErrStarted", err)
	}
}

func emptyDatabase(t *testing.T) (string, string) {
	t.Helper()
	// Unmigrated on purpose: laneq.Open must refuse it (ErrSchemaNotCurrent).
	_, name := tidbtest.NewEmptyDB(t)
	return name, tidbtest.Server(t).DSN(name)
}

// A transaction's enqueue and satisfy are invisible before the commit and
// gone after a rollback; the commit makes the satisfied waiter run.
func TestClientInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	events := startWorker(t, c, func(context.Context, *laneq.Job[greet]) error { return nil }, laneq.EventCompleted)
	rollback := errors.New("roll back")
	var rolledBack laneq.Enqueued
	err := c.InTx(ctx, func(ctx context.Context, tx *laneq.Tx) error {
		var err error
		rolledBack, err = tx.Enqueue(ctx, greet{Name: "never"}, laneq.WithIdempotencyKey("tx-1"))
		if err != nil {
			return err
		}
		return rollback
	})
	if !errors.Is(err, rollback) {
		t.Fatalf("InTx = %v, want the rollback error", err)
	}
	if _, err := c.Item(ctx, rolledBack.WorkID); err == nil {
		t.Errorf("rolled-back item %d exists", rolledBack.WorkID)
	}
	waiter, err := c.Enqueue(ctx, greet{Name: "waits"}, laneq.WithWaitFor(workqueue.Dependency{WakeKey: "order:9", Keys: []string{"order:9/paid"}}))
	if err != nil {
		t.Fatal(err)
	}
	// The waiter is claimed, finds its key missing and parks. Waiting for
	// that state is the condition; the guard only bounds it.
	laneqtest.WaitForState(t, c, waiter.WorkID, workqueue.StateWaitingDependency)
	var inTx laneq.Enqueued
	if err := c.InTx(ctx, func(ctx context.Context, tx *laneq.Tx) error {
		if _, err := tx.SQL().ExecContext(ctx, "SELECT 1"); err != nil {
			return err
		}
		if err := tx.Satisfy(ctx, "order:9", "order:9/paid"); err != nil {
			return err
		}
		var err error
		inTx, err = tx.Enqueue(ctx, greet{Name: "in tx"}, laneq.WithIdempotencyKey("tx-2"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	done := map[int64]bool{}
	for !done[waiter.WorkID] || !done[inTx.WorkID] {
		done[nextEvent(t, events).WorkID] = true
	}
}

func TestSubscribeNeverBlocksAndCountsDrops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{SubscribeBuffer: 1})
	full, stopFull := c.Subscribe(laneq.EventReplayed)
	defer stopFull()
	other, stopOther := c.Subscribe(laneq.EventCompleted)
	stopOther()
	if _, ok := <-other; ok {
		t.Error("a stopped subscription delivered an event")
	}
	// Replays publish through the broker: dead letters first, waited for
	// in the database (with a buffer of 1 their own events may be dropped,
	// which is the point).
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[greet]) error {
		return fmt.Errorf("no: %w", workqueue.ErrPermanent)
	}); err != nil {
		t.Fatal(err)
	}
	laneqtest.Start(t, c)
	var ids []int64
	for i := range 3 {
		res, err := c.Enqueue(ctx, greet{Name: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.WorkID)
	}
	for _, id := range ids {
		laneqtest.WaitForState(t, c, id, workqueue.StateDead)
	}
	before := c.DroppedEvents() // nothing reads the replay subscription yet
	for _, id := range ids {
		if _, err := c.Replay(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if got := c.DroppedEvents() - before; got < 2 {
		t.Errorf("DroppedEvents grew by %d over 3 replays into a buffer of 1, want at least 2", got)
	}
	if e := nextEvent(t, full); e.Kind != laneq.EventReplayed || e.ReplayOf != ids[0] {
		t.Errorf("first buffered event %+v, want the replay of %d", e, ids[0])
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-full; ok {
		t.Error("Close left a subscription open")
	}
}

// The whole life of a Client: two typed handlers, enqueues committed with
// the user's own rows in the user's transactions, a transaction rolled
// back, completion events for exactly the committed items, and a Stop
// that leaves nothing running.
func TestClientLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	if _, err := c.DB().ExecContext(ctx, "CREATE TABLE orders (id BIGINT PRIMARY KEY, note VARCHAR(64) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[greet]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[flaky]) error { return nil }); err != nil {
		t.Fatal(err)
	}
	events, stop := c.Subscribe()
	defer stop()
	laneqtest.Start(t, c)
	order := func(id int, outcome error) (ids []int64) {
		t.Helper()
		err := c.InTx(ctx, func(ctx context.Context, tx *laneq.Tx) error {
			ids = ids[:0] // a rerun after a transient error starts over
			if _, err := tx.SQL().ExecContext(ctx, "INSERT INTO orders (id, note) VALUES (?, ?)", id, "order"); err != nil {
				return err
			}
			for _, args := range []laneq.Args{greet{Name: strconv.Itoa(id)}, flaky{N: id}} {
				res, err := tx.Enqueue(ctx, args, laneq.WithIdempotencyKey(fmt.Sprintf("order-%d/%s", id, args.Kind())))
				if err != nil {
					return err
				}
				ids = append(ids, res.WorkID)
			}
			return outcome
		})
		if !errors.Is(err, outcome) {
			t.Fatalf("order %d: InTx = %v, want %v", id, err, outcome)
		}
		return ids
	}
	rollback := errors.New("roll back")
	want := map[int64]bool{}
	var rolledBack []int64
	for id := range 6 {
		if id%3 == 2 {
			rolledBack = append(rolledBack, order(id, rollback)...)
			continue
		}
		for _, w := range order(id, nil) {
			want[w] = true
		}
	}
	completed := map[int64]int{}
	for len(completed) < len(want) {
		e := nextEvent(t, events)
		if e.Kind != laneq.EventCompleted || !want[e.WorkID] {
			t.Fatalf("event %+v: want only completions of the committed items %v", e, want)
		}
		completed[e.WorkID]++
	}
	stopCtx, cancel := context.WithTimeout(ctx, guard)
	defer cancel()
	if err := c.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-events:
		t.Errorf("event after every committed item completed: %+v", e)
	default:
	}
	for id, n := range completed {
		if n != 1 {
			t.Errorf("item %d completed %d times", id, n)
		}
	}
	for _, id := range rolledBack {
		if it, err := c.Item(ctx, id); err == nil {
			t.Errorf("rolled-back item %d exists: %+v", id, it)
		}
	}
	var orders int
	if err := c.DB().QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if orders != 4 {
		t.Errorf("%d orders, want the 4 committed", orders)
	}
	if drained, err := c.Drained(ctx); err != nil || !drained {
		t.Errorf("Drained after Stop = %v, %v: want nothing pending or processing", drained, err)
	}
}

// TestClientServesManyScopes: with Config.Serve a Client runs its typed
// handlers for every scope of a prefix through one worker.Group; WithScope
// enqueues into another scope, in and out of a transaction; events report
// each completion; a scope outside the prefix is left alone.
func TestClientServesManyScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{Scope: "org/a", Serve: &worker.GroupConfig{ByPrefix: true, Prefix: "org/"}})
	for _, s := range []string{"org/b", "other/c"} {
		if err := c.Queue().EnsureScope(ctx, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	scopes := make(chan string, 8)
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[greet]) error {
		scopes <- job.Item.Scope
		return nil
	}, laneq.EventCompleted)
	if _, err := c.Enqueue(ctx, greet{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, greet{Name: "b"}, laneq.WithScope("org/b")); err != nil {
		t.Fatal(err)
	}
	if err := c.InTx(ctx, func(ctx context.Context, tx *laneq.Tx) error {
		_, err := tx.Enqueue(ctx, greet{Name: "b2"}, laneq.WithScope("org/b"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	outside, err := c.Enqueue(ctx, greet{Name: "c"}, laneq.WithScope("other/c"))
	if err != nil {
		t.Fatal(err)
	}
	ran := map[string]int{}
	for range 3 {
		nextEvent(t, events)
		ran[<-scopes]++
	}
	if diff := cmp.Diff(map[string]int{"org/a": 1, "org/b": 2}, ran); diff != "" {
		t.Errorf("ran by scope (-want +got):\n%s", diff)
	}
	if c.Group() == nil || c.Worker() != nil {
		t.Fatalf("group %v, worker %v: want the group only", c.Group(), c.Worker())
	}
	if it, err := c.Item(ctx, outside.WorkID); err != nil || it.State != workqueue.StatePending {
		t.Fatalf("the item outside the prefix: %+v (%v), want it pending", it, err)
	}
	if _, err := c.Enqueue(ctx, greet{Name: "x"}, laneq.WithScope("org/missing")); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("enqueue into a missing scope: %v", err)
	}
}

// TestClientUniqueKey: WithUniqueKey refuses a second enqueue while the
// first item is live, with that item, and accepts one once it completed.
func TestClientUniqueKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{})
	first, err := c.Enqueue(ctx, greet{Name: "a"}, laneq.WithUniqueKey("greet:a"))
	if err != nil || first.Refused {
		t.Fatalf("first: %+v (%v)", first, err)
	}
	second, err := c.Enqueue(ctx, greet{Name: "a"}, laneq.WithUniqueKey("greet:a"))
	if err != nil || !second.Refused || second.WorkID != first.WorkID {
		t.Fatalf("second while the first is live: %+v (%v), want refused with %d", second, err, first.WorkID)
	}
	events := startWorker(t, c, func(context.Context, *laneq.Job[greet]) error { return nil }, laneq.EventCompleted)
	if e := nextEvent(t, events); e.WorkID != first.WorkID {
		t.Fatalf("completed %d, want %d", e.WorkID, first.WorkID)
	}
	third, err := c.Enqueue(ctx, greet{Name: "a"}, laneq.WithUniqueKey("greet:a"))
	if err != nil || third.Refused || third.WorkID == first.WorkID {
		t.Fatalf("after it completed: %+v (%v), want a new item", third, err)
	}
}

// Client.Cancel: a delayed item ends at once; a running one's handler sees
// its context cancelled at its next heartbeat (a 3s lease renews every
// second), with a cause wrapping workqueue.ErrCancelRequested, and the
// Client publishes EventCancelled; a terminal item is refused.
func TestClientCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, _ := openClient(t, laneq.Config{Queue: workqueue.Config{Lease: 3 * time.Second}})
	delayed, err := c.Enqueue(ctx, greet{Name: "later"}, laneq.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := c.Cancel(ctx, delayed.WorkID, "not needed"); err != nil || out.Running {
		t.Fatalf("cancel of a delayed item = %+v, %v", out, err)
	}
	if it, err := c.Item(ctx, delayed.WorkID); err != nil || it.State != workqueue.StateSkipped {
		t.Fatalf("the cancelled item: %+v, %v", it, err)
	}
	if _, err := c.Cancel(ctx, delayed.WorkID, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("second cancel = %v, want ErrRefused", err)
	}
	running, err := c.Enqueue(ctx, greet{Name: "slow"})
	if err != nil {
		t.Fatal(err)
	}
	started, causes := make(chan struct{}), make(chan error, 1)
	events := startWorker(t, c, func(ctx context.Context, job *laneq.Job[greet]) error {
		close(started)
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	}, laneq.EventCancelled)
	select {
	case <-started:
	case <-time.After(guard):
		t.Fatal("the handler did not start")
	}
	if out, err := c.Cancel(ctx, running.WorkID, ""); err != nil || !out.Running {
		t.Fatalf("cancel of a running item = %+v, %v", out, err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, workqueue.ErrCancelRequested) {
			t.Fatalf("the handler's context cause is %v, want ErrCancelRequested", cause)
		}
	case <-time.After(guard):
		t.Fatal("the handler was not told of the cancellation")
	}
	if e := nextEvent(t, events); e.WorkID != running.WorkID || e.Kind != laneq.EventCancelled {
		t.Fatalf("event %+v, want %d cancelled", e, running.WorkID)
	}
}

// Config.Periodic: a job of one tick a second, run by two Clients on one
// database (two processes' worth), enqueues each tick once; its handler
// sees the tick in its arguments. A job without Args, and Periodic with
// Serve, fail Start.
func TestClientPeriodic(t *testing.T) {
	t.Parallel()
	jobs := []laneq.PeriodicJob{{Name: "hello", Every: time.Second, Args: func(tick time.Time) laneq.Args {
		return greet{Name: tick.UTC().Format(time.RFC3339)}
	}, Opts: []laneq.EnqueueOption{laneq.WithQueueClass("bulk")}}}
	a, dsn := openClient(t, laneq.Config{Periodic: jobs})
	b := openClientOn(t, dsn, laneq.Config{Periodic: jobs})
	var mu sync.Mutex
	seen := map[string]int{}
	handle := func(_ context.Context, job *laneq.Job[greet]) error {
		mu.Lock()
		seen[job.Args.Name]++
		mu.Unlock()
		return nil
	}
	startWorker(t, a, handle)
	startWorker(t, b, handle)
	waitfor.Until(t, guard, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= 4, nil
	}, func() string { return fmt.Sprintf("ticks handled: %v", seen) })
	mu.Lock()
	for tick, n := range seen {
		if n != 1 {
			t.Errorf("tick %s handled %d times", tick, n)
		}
		if _, err := time.Parse(time.RFC3339, tick); err != nil {
			t.Errorf("args carry %q: %v", tick, err)
		}
	}
	mu.Unlock()

	bad := openClientOn(t, dsn, laneq.Config{Scope: "tenant-bad", Periodic: []laneq.PeriodicJob{{Name: "x", Every: time.Second}}})
	if err := laneq.AddWorker(bad, handle); err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(context.Background()); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("Start with a job without Args = %v, want ErrInvalid", err)
	}
	served := openClientOn(t, dsn, laneq.Config{Scope: "tenant-served", Periodic: jobs, Serve: &worker.GroupConfig{Scopes: []string{"tenant-served"}}})
	if err := laneq.AddWorker(served, handle); err != nil {
		t.Fatal(err)
	}
	if err := served.Start(context.Background()); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("Start with Periodic and Serve = %v, want ErrInvalid", err)
	}
}
