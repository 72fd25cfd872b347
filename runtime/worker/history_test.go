package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A worker's history: what it finished, by outcome and work kind, and how
// long its items had been due when claimed, written by the time it stops;
// a worker with history off writes none.
func TestWorkerWritesHistory(t *testing.T) {
	for _, off := range []bool{false, true} {
		t.Run(map[bool]string{false: "on", true: "off"}[off], func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, workqueue.Config{})
			f.enqueue(5, 0, "deliver")
			time.Sleep(1200 * time.Millisecond) // the items wait at least this long for their claim
			c := newCollector(func(job *worker.Job, _ int) error {
				if job.Item.Event.SourceID == "5" { // the fifth event's item fails for good
					return workqueue.ErrPermanent
				}
				return nil
			})
			cfg := quietCfg(2)
			cfg.History.Off = off
			w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, w)
			c.wait(t, 5)
			if err := w.Settle(f.ctx); err != nil {
				t.Fatal(err)
			}
			if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatal(err)
			}
			r, err := inspect.New(f.db)
			if err != nil {
				t.Fatal(err)
			}
			points, cut, err := r.History(f.ctx, scope, time.Now().Add(-time.Hour))
			if err != nil || cut {
				t.Fatalf("history: %v (cut %v)", err, cut)
			}
			var sum inspect.HistoryPoint
			for _, p := range points {
				if p.QueueClass != "default" || p.WorkType != "deliver" {
					t.Fatalf("a point of another kind: %+v", p)
				}
				sum.Completed, sum.Failed, sum.Dead = sum.Completed+p.Completed, sum.Failed+p.Failed, sum.Dead+p.Dead
				sum.MaxDue = max(sum.MaxDue, p.MaxDue)
			}
			if off {
				if len(points) != 0 {
					t.Fatalf("history off, yet %d points written", len(points))
				}
				return
			}
			if sum.Completed != 4 || sum.Dead != 1 || sum.Failed != 0 || sum.MaxDue < time.Second {
				t.Fatalf("history %+v over %d points, want 4 completed, 1 dead, oldest due at least 1s", sum, len(points))
			}
		})
	}
}
