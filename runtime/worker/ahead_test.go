package worker_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestItemClaimedAheadAndTakenOverNeverRuns, on real TiDB: a worker whose
// handlers were short claims an item ahead of its one executor; the item
// waits past a heartbeat period behind a handler that turned slow, and
// meanwhile another owner takes its lease (its token moves on). When the
// executor frees, the item's renewal finds the lease lost: the item never
// runs and its row keeps the new owner's token.
func TestItemClaimedAheadAndTakenOverNeverRuns(t *testing.T) {
	t.Parallel()
	const heartbeat = 300 * time.Millisecond
	// An hour's lease: the worker's due timer is armed for the taken-over
	// row's expiry, and a reclaim at the default 30s would move the token
	// the last check expects to find left alone (a stalled machine).
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	f.enqueue(1, 0, "deliver")
	slow := make(chan struct{})
	ran := make(chan int64, 10)
	var calls atomic.Int32
	h := func(ctx context.Context, job *worker.Job) error {
		ran <- job.Item.WorkID
		if calls.Add(1) == 2 {
			<-slow // the second item's handler turns slow
		}
		return nil
	}
	cfg := quietCfg(1)
	cfg.Scheduler.Profile = scheduler.ProfileDefaultHeavy
	cfg.Scheduler.ClaimAheadWait = time.Hour // any handler is short
	cfg.Scheduler.HeartbeatEvery = heartbeat
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": h})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	<-ran // a short handler: the executor may now hold one item ahead
	settled(t, f, w, map[string]int{"completed": 1})

	// The next two items are claimed in one turn: one blocks the executor,
	// the other waits for it.
	f.enqueue(2, 0, "deliver")
	blocker := <-ran
	var waiting, token int64
	if err := f.db.QueryRow(`SELECT work_id, lease_token FROM work_item
		WHERE scope_id = ? AND state = 'processing' AND work_id <> ?`, scope, blocker).Scan(&waiting, &token); err != nil {
		close(slow)
		t.Fatalf("no second item claimed ahead: %v", err)
	}
	// Another owner takes the waiting item's lease.
	if _, err := f.db.Exec("UPDATE work_item SET lease_token = lease_token + 1, lease_owner = 'other' WHERE work_id = ?", waiting); err != nil {
		t.Fatal(err)
	}
	claimedBy := time.Now()
	time.Sleep(heartbeat + 50*time.Millisecond - time.Since(claimedBy)) // the item waits past a heartbeat period
	close(slow)
	waitfor.Until(t, time.Minute, func() (bool, error) { return w.Stats().Scheduler.AheadReleased > 0, nil },
		func() string { return fmt.Sprintf("the waiting item was not refused: %+v", w.Stats().Scheduler) })
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id == waiting {
			t.Fatalf("item %d ran although another owner took its lease while it waited", id)
		}
	default:
	}
	var state, owner string
	var now int64
	if err := f.db.QueryRow("SELECT state, lease_owner, lease_token FROM work_item WHERE work_id = ?", waiting).Scan(&state, &owner, &now); err != nil {
		t.Fatal(err)
	}
	if state != "processing" || owner != "other" || now != token+1 {
		t.Fatalf("taken-over item is %s/%s/token %d, want processing/other/%d: the refused item touched the row", state, owner, now, token+1)
	}
}

// TestSlowHandlersAreNotClaimedAhead, on real TiDB with two workers on one
// backlog: while handlers take longer than ClaimAheadWait, neither worker
// ever holds more items than it has executors (claimed and not yet
// returned from its handler), so the other process's free executors get
// the rest; with short handlers the same workers do claim ahead.
func TestSlowHandlersAreNotClaimedAhead(t *testing.T) {
	t.Parallel()
	const executors = 2
	for _, tc := range []struct {
		name    string
		handler time.Duration
		items   int
		ahead   bool
	}{
		{"slow handlers", 60 * time.Millisecond, 24, false},
		{"short handlers", 0, 300, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			f.enqueue(tc.items, 0, "deliver")
			var ran atomic.Int64
			held := make([]*maxHeld, 2)
			for i := range held {
				held[i] = &maxHeld{}
				m := held[i]
				cfg := quietCfg(executors)
				cfg.Owner = fmt.Sprintf("worker-%d", i)
				cfg.Scheduler.Profile = scheduler.ProfileDefaultHeavy
				cfg.Hooks = &worker.Hooks{AfterClaim: func(workqueue.Claimed) { m.claimed() }}
				h := func(ctx context.Context, job *worker.Job) error {
					if tc.handler > 0 {
						time.Sleep(tc.handler) // the handler's own work: its duration is the point
					}
					m.returned()
					ran.Add(1)
					return nil
				}
				w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": h})
				if err != nil {
					t.Fatal(err)
				}
				run(t, w)
			}
			waitfor.Until(t, 2*time.Minute, func() (bool, error) { return ran.Load() >= int64(tc.items), nil },
				func() string { return fmt.Sprintf("ran %d of %d", ran.Load(), tc.items) })
			for i, m := range held {
				most := m.most()
				t.Logf("worker %d held at most %d items (%d executors)", i, most, executors)
				if !tc.ahead && most > executors {
					t.Errorf("worker %d held %d items with %d executors while handlers took %s: it claimed ahead", i, most, executors, tc.handler)
				}
			}
			if tc.ahead && max(held[0].most(), held[1].most()) <= executors {
				t.Errorf("with short handlers no worker held more than its %d executors: claiming ahead is off", executors)
			}
		})
	}
}

// maxHeld tracks the most items a worker held at once: claimed, and not yet
// returned from their handler (waiting for a slot or running).
type maxHeld struct {
	mu        sync.Mutex
	now, peak int
}

func (m *maxHeld) claimed() {
	m.mu.Lock()
	m.now++
	m.peak = max(m.peak, m.now)
	m.mu.Unlock()
}

func (m *maxHeld) returned() {
	m.mu.Lock()
	m.now--
	m.mu.Unlock()
}

func (m *maxHeld) most() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}
