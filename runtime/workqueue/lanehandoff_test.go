package workqueue_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/laneq/laneq/internal/sqlwrap"
	"github.com/laneq/laneq/runtime/workqueue"
)

// failFirst fails the first statement named name with err, without sending
// it.
type failFirst struct {
	name   string
	err    error
	failed atomic.Bool
}

func (h *failFirst) Before(_ context.Context, query string, _ []driver.NamedValue) (any, error) {
	if sqlwrap.Name(query) == h.name && h.failed.CompareAndSwap(false, true) {
		return nil, h.err
	}
	return nil, nil
}

func (h *failFirst) After(_ context.Context, _ string, _ any, err error) error { return err }

// TestLaneHandoffStopRecovery: the TestLaneDemotionStopRecovery for
// laneq's one reconciliation path. No laneq path puts an earlier ordinal in
// front of a live lane head (a projection successor enters its lane only
// when the head it queued behind terminalizes; a replay child takes a fresh
// ordinal; an advance keeps the generation's place), so there is no
// demotion: the reordering step is the terminal handoff, which activates
// the successor and then promotes by ordinal in the same transaction. A
// failure injected between the two (the promotion's first read) must stop
// the finish with nothing half-written: the claimed generation is still
// processing, the successor still inactive, nothing promoted. A fresh
// consumer that takes over the expired lease then claims and completes
// every row of the lane in ordinal order, with and without unrelated ready
// lanes beside it.
func TestLaneHandoffStopRecovery(t *testing.T) {
	t.Parallel()
	for _, unrelated := range []int{0, 5} {
		t.Run(fmt.Sprintf("unrelated-lanes=%d", unrelated), func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			for u := range unrelated {
				f.one(workqueue.Work{SourceLane: fmt.Sprintf("other-%d", u)})
			}
			names := map[int64]string{}
			first := f.project("e1", "L")
			names[first.WorkID] = "gen1"
			names[f.one(workqueue.Work{SourceLane: "L"})] = "x1"
			gen1 := f.claimOne(f.claimer("w1"), projectTypes)
			successor := f.project("e2", "L")
			names[successor.WorkID] = "successor"
			names[f.one(workqueue.Work{SourceLane: "L"})] = "x2"

			injected := errors.New("injected: the process stopped before promotion")
			hooked := f.queueWithHook(&failFirst{name: "NextBlockedInSourceLane", err: injected})
			if _, err := hooked.Complete(f.ctx, gen1.Lease); !errors.Is(err, injected) {
				t.Fatalf("complete with the promotion failing: %v, want the injected error", err)
			}
			want := map[string]string{"gen1": workqueue.StateProcessing, "x1": workqueue.StateBlocked, "successor": workqueue.StateInactive, "x2": workqueue.StateBlocked}
			got := map[string]string{}
			for id, name := range names {
				got[name] = f.state(id)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Fatalf("after the stopped finish (-want +got):\n%s", diff)
			}

			// A fresh consumer: the stopped owner's lease expires, and
			// everything is claimed and completed from scratch.
			f.expireLease(gen1.WorkID)
			c := f.claimer("fresh")
			c.NoteDue()
			var order []string
			others := 0
			for idle := 0; idle < 2; {
				batch := f.claim(c, workqueue.ClaimRequest{WorkTypes: []string{"project", "deliver"}})
				if len(batch) == 0 {
					idle++
					c.Rewind()
					continue
				}
				idle = 0
				for _, item := range batch {
					if name, ok := names[item.WorkID]; ok {
						order = append(order, name)
					} else {
						others++
					}
					f.complete(item)
				}
			}
			if diff := cmp.Diff([]string{"gen1", "x1", "successor", "x2"}, order); diff != "" {
				t.Fatalf("lane L ran out of order (-want +got):\n%s", diff)
			}
			if others != unrelated {
				t.Fatalf("completed %d unrelated items, want %d", others, unrelated)
			}
			var live int
			if err := f.db.QueryRow("SELECT COUNT(*) FROM work_item WHERE terminal_at IS NULL").Scan(&live); err != nil || live != 0 {
				t.Fatalf("%d rows not terminal (%v)", live, err)
			}
		})
	}
}
