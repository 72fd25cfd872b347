package main_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// announceScope is the scope of TestCLIWriteCommandsAnnounce.
const announceScope = "tenant-announce"

// announceGuard bounds each wait for the worker: a failure guard only.
const announceGuard = 30 * time.Second

// quietWorker is a worker on its own Queue in this test process whose
// generation probe, quiet probe, reconciliation and maintenance are off
// and whose quiet backstop is its default 4 hours (it cannot be turned
// off): once quiet, only a wake datagram from another process makes it
// claim. It records the items its handler ran.
type quietWorker struct {
	w   *worker.Worker
	mu  sync.Mutex
	ran map[int64]bool
}

func startQuietWorker(t *testing.T, db *sql.DB) *quietWorker {
	t.Helper()
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qu.Close() })
	off := time.Duration(-1)
	qw := &quietWorker{ran: map[int64]bool{}}
	cfg := worker.Config{Scope: announceScope, Owner: "quiet-worker", Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Controller: controller.Config{GenerationProbeEvery: off, QuietProbeEvery: off, ReconcileEvery: off, MaintainEvery: off}}
	qw.w, err = worker.New(qu, cfg, map[string]worker.Handler{"deliver": func(ctx context.Context, job *worker.Job) error {
		qw.mu.Lock()
		defer qw.mu.Unlock()
		qw.ran[job.Item.WorkID] = true
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- qw.w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("quiet worker: %v", err)
		}
	})
	waitfor.Until(t, announceGuard, func() (bool, error) { return qw.w.Stats().Quiet, nil },
		func() string { return fmt.Sprintf("the worker never went quiet: %+v", qw.w.Stats().Controller) })
	if n := qw.count(); n != 0 {
		t.Fatalf("the worker ran %d items before any command", n)
	}
	return qw
}

func (qw *quietWorker) count() int {
	qw.mu.Lock()
	defer qw.mu.Unlock()
	return len(qw.ran)
}

// expectRan waits for the worker to run work item id.
func (qw *quietWorker) expectRan(t *testing.T, id int64, after string) {
	t.Helper()
	waitfor.Until(t, announceGuard, func() (bool, error) {
		qw.mu.Lock()
		defer qw.mu.Unlock()
		return qw.ran[id], nil
	}, func() string {
		return fmt.Sprintf("the quiet worker did not run work item %d after %s (its controller: %+v)", id, after, qw.w.Stats().Controller)
	})
}

// TestCLIWriteCommandsAnnounce: every laneq write command that makes an
// item claimable, run as the built binary in its own OS process, starts
// that item in a quiet worker whose probes and backstops are off: only the
// command's wake datagram, sent before its process exited, can have
// reached the worker.
func TestCLIWriteCommandsAnnounce(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{Lease: 10 * time.Minute}, announceScope)
	ctx := context.Background()
	n := 0
	enqueue := func(w workqueue.Work) int64 {
		t.Helper()
		n++
		key := "announce-" + strconv.Itoa(n)
		if w.WorkType == "" {
			w.WorkType = "deliver"
		}
		out, err := qu.Enqueue(ctx, announceScope, []workqueue.Event{{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k",
			SourceKind: "s", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{w}}})
		if err != nil {
			t.Fatal(err)
		}
		return out[0].Work[0].WorkID
	}

	// Every starting state, set up before the worker starts, none of it
	// claimable. The generation's item first: every later one is of
	// generation 2, and the rollback (the last command) fences them.
	fenced := enqueue(workqueue.Work{})
	if err := qu.SetGeneration(ctx, announceScope, 2); err != nil {
		t.Fatal(err)
	}
	deadA, deadB := enqueue(workqueue.Work{}), enqueue(workqueue.Work{})
	cl, err := qu.NewClaimer(announceScope, "seeder", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 2})
	if err != nil || len(got) != 2 {
		t.Fatalf("claimed %d: %v", len(got), err)
	}
	for _, c := range got {
		if _, err := qu.Dead(ctx, c.Lease, workqueue.Failure{Class: "test", Summary: "dead for a replay"}); err != nil {
			t.Fatal(err)
		}
	}
	notDue := enqueue(workqueue.Work{Delay: time.Hour})
	if err := qu.PauseClass(ctx, announceScope, "bulk"); err != nil {
		t.Fatal(err)
	}
	paused := enqueue(workqueue.Work{QueueClass: "bulk"})
	// Lanes whose heads are an hour away: skipping or cancelling a head
	// promotes its follower.
	skippedHead := enqueue(workqueue.Work{SourceLane: "skip", Delay: time.Hour})
	skipFollower := enqueue(workqueue.Work{SourceLane: "skip"})
	cancelledHead := enqueue(workqueue.Work{SourceLane: "cancel", Delay: time.Hour})
	cancelFollower := enqueue(workqueue.Work{SourceLane: "cancel"})
	enqueue(workqueue.Work{SourceLane: "matching", WorkType: "held", Delay: time.Hour})
	matchingFollower := enqueue(workqueue.Work{SourceLane: "matching"})

	qw := startQuietWorker(t, db)
	write := func(args ...string) result {
		t.Helper()
		return laneq(t, dsn, append(args, "--scope", announceScope, "--yes", "--json")...).want(t, 0)
	}
	id := func(id int64) string { return strconv.FormatInt(id, 10) }

	t.Run("item retry-now", func(t *testing.T) {
		write("item", "retry-now", "--work-id", id(notDue))
		qw.expectRan(t, notDue, "item retry-now")
	})
	t.Run("class resume", func(t *testing.T) {
		write("class", "resume", "--class", "bulk")
		qw.expectRan(t, paused, "class resume")
	})
	t.Run("replay", func(t *testing.T) {
		out := decode[struct{ Child int64 }](t, write("replay", "--work-id", id(deadA)))
		qw.expectRan(t, out.Child, "replay")
	})
	t.Run("dlq replay", func(t *testing.T) {
		write("dlq", "replay") // deadA was replayed before: only deadB
		var child int64
		if err := db.QueryRow("SELECT work_id FROM work_item WHERE replay_of_work_id = ?", deadB).Scan(&child); err != nil {
			t.Fatalf("the replay of work item %d: %v", deadB, err)
		}
		qw.expectRan(t, child, "dlq replay")
	})
	t.Run("item skip", func(t *testing.T) {
		write("item", "skip", "--work-id", id(skippedHead))
		qw.expectRan(t, skipFollower, "item skip")
	})
	t.Run("item cancel", func(t *testing.T) {
		write("item", "cancel", "--work-id", id(cancelledHead))
		qw.expectRan(t, cancelFollower, "item cancel")
	})
	t.Run("item skip-matching", func(t *testing.T) {
		write("item", "skip-matching", "--work-type", "held")
		qw.expectRan(t, matchingFollower, "item skip-matching")
	})
	t.Run("scope set-generation --rollback", func(t *testing.T) {
		write("scope", "set-generation", "--generation", "1", "--rollback")
		qw.expectRan(t, fenced, "scope set-generation --rollback")
	})
	if st := qw.w.Stats(); !st.Quiet || st.Controller.GenerationProbes != 0 || st.Controller.Reconciles != 1 || st.Controller.MissedWakes != 0 {
		t.Fatalf("the worker probed or reconciled beyond its start, or left quiet mode: %+v", st.Controller)
	}
}
