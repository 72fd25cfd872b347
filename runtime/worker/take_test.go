package worker_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Claim on promote through the worker: lanes of ten drain in lane order,
// every item once, and followers start from the completion batch that
// promoted them (scheduler Taken) rather than a claim turn; with
// NoClaimOnPromote none does, and the drain is the same.
func TestClaimOnPromoteKeepsLaneOrder(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		t.Run(fmt.Sprint("NoClaimOnPromote=", off), func(t *testing.T) {
			const items, lanes = 300, 30
			f := newFixture(t, workqueue.Config{})
			f.enqueue(items, items/lanes, "deliver", "interactive", "default", "bulk")
			var mu sync.Mutex
			last := map[int]int64{} // lane -> ordinal of the last item that started
			var disorder []string
			c := newCollector(func(job *worker.Job, _ int) error {
				var p struct{ N int }
				if err := json.Unmarshal(job.Event.Payload, &p); err != nil {
					return err
				}
				lane := (p.N - 1) % lanes
				mu.Lock()
				defer mu.Unlock()
				if job.Item.LaneOrdinal <= last[lane] {
					disorder = append(disorder, fmt.Sprintf("lane %d: ordinal %d after %d", lane, job.Item.LaneOrdinal, last[lane]))
				}
				last[lane] = job.Item.LaneOrdinal
				return nil
			})
			cfg := quietCfg(8)
			cfg.NoClaimOnPromote = off
			w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
			if err != nil {
				t.Fatal(err)
			}
			run(t, w)
			c.wait(t, items)
			settled(t, f, w, map[string]int{"completed": items})
			mu.Lock()
			defer mu.Unlock()
			if len(disorder) > 0 {
				t.Fatalf("out of lane order: %v", disorder)
			}
			for id, n := range c.attempts {
				if n != 1 {
					t.Fatalf("work %d ran %d times", id, n)
				}
			}
			st := w.Stats().Scheduler
			switch {
			case off && st.Adopted != 0:
				t.Fatalf("took %d followers with claim on promote off", st.Adopted)
			case !off && st.Adopted == 0:
				// How many are taken depends on the places free as each
				// batch commits (a claim turn in flight takes them all);
				// BenchmarkThroughputVsFloor measures the share.
				t.Fatalf("took none of the %d followers on promote (stats %+v)", items-lanes, st)
			}
			t.Logf("taken on promote: %d of %d followers; claim turns %d", st.Adopted, items-lanes, st.ClaimTurns)
			if st.Claimed != items {
				t.Fatalf("handed %d items to executors, want %d", st.Claimed, items)
			}
		})
	}
}
