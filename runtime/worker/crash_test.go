package worker_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
