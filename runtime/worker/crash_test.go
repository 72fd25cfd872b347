package worker_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/crashmatrix"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// crashStore is one database (the durable store) plus an in-memory record
// of handler effects made by workers that were still alive.
type crashStore struct {
	f *fixture

	mu         sync.Mutex
	workID     int64
	executions int
}

// crashWorker is a Worker on its own connection pool, so that killing it
// (closing the pool) stops it from committing anything, as a crash would.
type crashWorker struct {
	w      *worker.Worker
	db     *sql.DB
	killed atomic.Bool
}

const crashLease = time.Second

func TestCrashMatrix(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	store := &crashStore{f: f}
	crashmatrix.Run(t, crashmatrix.Case[*crashStore, *crashWorker]{
		Store: store,
		Seed: func(ctx context.Context, s *crashStore) error {
			s.f.seq++
			res, err := s.f.qu.Enqueue(ctx, scope, []workqueue.Event{{
				IdempotencyKey: fmt.Sprintf("crash-%d", s.f.seq), Payload: []byte("{}"),
				Work: []workqueue.Work{{WorkType: "deliver"}},
			}})
			if err != nil {
				return err
			}
			id := res[0].Work[0].WorkID
			s.mu.Lock()
			s.workID, s.executions = id, 0
			s.mu.Unlock()
			return nil
		},
		NewWorker: func(ctx context.Context, s *crashStore, inj *crashmatrix.Injector) (*crashWorker, error) {
			db, err := sql.Open("mysql", s.f.dsn)
			if err != nil {
				return nil, err
			}
			qu, err := workqueue.New(db, workqueue.Config{Lease: crashLease})
			if err != nil {
				return nil, err
			}
			cw := &crashWorker{db: db}
			cfg := quietCfg(2)
			cfg.Hooks = &worker.Hooks{
				AfterClaim: func(workqueue.Claimed) { inj.Reached(crashmatrix.AfterClaim) },
				BeforeFinish: func(_ workqueue.Claimed, outcome error) {
					if outcome == nil {
						inj.Reached(crashmatrix.AfterCompletionBeforeAck)
					}
				},
			}
			cw.w, err = worker.New(qu, cfg, map[string]worker.Handler{"deliver": func(ctx context.Context, job *worker.Job) error {
				inj.Reached(crashmatrix.MidExecution)
				if !cw.killed.Load() { // the effect of a live worker
					s.mu.Lock()
					s.executions++
					s.mu.Unlock()
				}
				return nil
			}})
			return cw, err
		},
		Run: func(ctx context.Context, cw *crashWorker) error { return cw.w.Run(ctx) },
		Kill: func(cw *crashWorker) {
			cw.killed.Store(true)
			_ = cw.db.Close()
		},
		Recovered: func(ctx context.Context, s *crashStore, b crashmatrix.Boundary) error {
			s.mu.Lock()
			id := s.workID
			s.mu.Unlock()
			for {
				var state string
				var attempts int
				err := s.f.db.QueryRowContext(ctx, "SELECT state, attempt_count FROM work_item WHERE work_id = ?", id).Scan(&state, &attempts)
				if err != nil {
					return err
				}
				if state == workqueue.StateCompleted {
					s.mu.Lock()
					n := s.executions
					s.mu.Unlock()
					want := 1
					if b == crashmatrix.AfterCompletionBeforeAck {
						want = 2 // at-least-once: the effect ran, its ack was lost
					}
					if n != want || attempts != 2 {
						return fmt.Errorf("work %d: %d effects and %d attempts, want %d and 2", id, n, attempts, want)
					}
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("work %d still %s after %d attempts: %w", id, state, attempts, ctx.Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		},
		Timeout: time.Minute,
	})
}

// TestCrashBeforeBatchCommitRerunsOnlyUnacknowledged crashes a worker while
// its completer holds a batch of completions whose handlers returned but
// whose write had not reached the server (the write blocks, then the
// process's pool is closed, as a kill would). A second worker must run
// again exactly the items the first never acknowledged (the stuck batch
// and whatever it had claimed but not finished), and none it acknowledged.
func TestCrashBeforeBatchCommitRerunsOnlyUnacknowledged(t *testing.T) {
	t.Parallel()
	const items = 60
	f := newFixture(t, workqueue.Config{})
	f.enqueue(items, 0, "deliver")

	crashed, release := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(release) })
	var crashOnce sync.Once
	dbA, in, err := faultdb.Open(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The fifth batch write never reaches the server: it blocks (the process
	// is being killed) and then fails before sending anything.
	in.Add(faultdb.Rule{Statement: "FinishBatch", Skip: 4, Times: 1 << 30, Fault: faultdb.DropBefore,
		Before: func(context.Context) {
			crashOnce.Do(func() { close(crashed) })
			<-release
		}})
	quA, err := workqueue.New(dbA, workqueue.Config{Lease: crashLease})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	returnedA, ackedA, ranB := map[int64]bool{}, map[int64]bool{}, map[int64]int{}
	var killed atomic.Bool
	cfgA := quietCfg(8)
	cfgA.Hooks = &worker.Hooks{
		BeforeFinish: func(c workqueue.Claimed, outcome error) {
			if outcome == nil && !killed.Load() {
				mu.Lock()
				returnedA[c.WorkID] = true
				mu.Unlock()
			}
		},
		AfterFinish: func(c workqueue.Claimed, _, err error) {
			if err == nil && !killed.Load() {
				mu.Lock()
				ackedA[c.WorkID] = true
				mu.Unlock()
			}
		},
	}
	wA, err := worker.New(quA, cfgA, map[string]worker.Handler{"deliver": func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	go func() { _ = wA.Run(ctxA) }() // abandoned at the crash, as a killed process's

	stuck := func() (n int) {
		mu.Lock()
		defer mu.Unlock()
		for id := range returnedA {
			if !ackedA[id] {
				n++
			}
		}
		return n
	}
	select {
	case <-crashed:
	case <-time.After(time.Minute):
		t.Fatal("worker A never reached its fifth batch write")
	}
	// Let the executors queue behind the blocked write: every slot ends up
	// holding a returned, unacknowledged completion.
	waitfor.Until(t, time.Minute, func() (bool, error) { return stuck() >= 2, nil }, func() string {
		return fmt.Sprintf("only %d completions queued behind the blocked batch write", stuck())
	})
	killed.Store(true)
	_ = dbA.Close() // the kill: nothing of A's reaches the server any more
	// What A made durable is what the database holds, not what A's hooks
	// saw: a batch write can commit while its executors' hooks have yet to
	// run when the kill lands. Every acknowledgement must be durable.
	committedA := f.completedIDs()
	mu.Lock()
	pending := 0
	for id := range ackedA {
		if !committedA[id] {
			t.Errorf("work %d was acknowledged to the crashed worker but is not completed", id)
		}
	}
	for id := range returnedA {
		if !committedA[id] {
			pending++
		}
	}
	mu.Unlock()

	quB, err := workqueue.New(f.db, workqueue.Config{Lease: crashLease})
	if err != nil {
		t.Fatal(err)
	}
	// The reconciliation backstop finds leases A's last claim, still in
	// flight when its pool closed, committed after B's first look.
	cfgB := quietCfg(8)
	cfgB.Controller.ReconcileEvery = time.Second
	wB, err := worker.New(quB, cfgB, map[string]worker.Handler{"deliver": func(_ context.Context, job *worker.Job) error {
		mu.Lock()
		ranB[job.Item.WorkID]++
		mu.Unlock()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	stopB := run(t, wB)
	waitfor.Until(t, 2*time.Minute, func() (bool, error) { return f.states()[workqueue.StateCompleted] >= items, nil },
		func() string { return fmt.Sprintf("states %v after recovery", f.states()) })
	if err := stopB(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for id := range committedA {
		if ranB[id] > 0 {
			t.Errorf("work %d was completed by the crashed worker and ran again", id)
		}
	}
	for id, n := range ranB {
		if n != 1 {
			t.Errorf("work %d ran %d times in the recovery worker", id, n)
		}
	}
	for id := range returnedA {
		if !committedA[id] && ranB[id] != 1 {
			t.Errorf("work %d: its completion was in the uncommitted batch, and recovery ran it %d times", id, ranB[id])
		}
	}
	if pending == 0 {
		t.Error("no returned completion was left uncommitted by the crash: the test proved nothing")
	}
	if len(ranB)+len(committedA) != items {
		t.Errorf("recovery ran %d items and the crashed worker completed %d; want %d together", len(ranB), len(committedA), items)
	}
	t.Logf("crashed worker completed %d (its hooks saw %d), held %d returned but uncommitted; recovery ran %d", len(committedA), len(ackedA), pending, len(ranB))
}
