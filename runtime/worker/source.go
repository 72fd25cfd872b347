package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/workqueue"
)

// source is the work-item queue as the controller sees it.
type source struct{ w *Worker }

// Ready checks that the scope exists.
func (s source) Ready(ctx context.Context) error {
	_, err := s.w.q.Generation(ctx, s.w.cfg.Scope)
	return err
}

// Reconcile makes the next claim rescan every class from the front of its
// range, picking up anything that became claimable behind a scan floor
// without an event this process saw (another process's release, say). It
// reads and writes nothing itself. (Ingress-receipt routing will hook in
// here when it lands.)
func (s source) Reconcile(context.Context) error {
	s.w.claimer.Rewind(0)
	return nil
}

// Claim runs a scheduler turn. When the due timer fired, the items coming
// due (retries, expired leases) may sit behind the claimer's scan floors,
// so the turn rescans from the front: one statement per class, once per
// due event.
func (s source) Claim(ctx context.Context, turn controller.Turn) (controller.ClaimBatch, error) {
	if turn.DueFired {
		s.w.claimer.Rewind(0)
	}
	return s.w.sched.ClaimTurn(ctx, turn)
}

// NextWorkAt places the queue's next due time on the local clock by its
// delay from the database's NOW(6): no two wall clocks are compared, so
// skew between this host and TiDB neither fires the timer early nor makes
// a future time look overdue.
func (s source) NextWorkAt(ctx context.Context) (time.Time, bool, error) {
	in, ok, err := s.w.q.NextWorkIn(ctx, s.w.cfg.Scope)
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	return s.w.clock.Now().Add(in), true, nil
}

func (s source) Generation(ctx context.Context) (uint64, error) {
	return s.w.q.Generation(ctx, s.w.cfg.Scope)
}

func (s source) Capacity(continuation bool) int { return s.w.sched.Capacity(continuation) }

// claimError maps a claim's error for the controller: a read that failed
// before any write is a proven no-commit; when items were won anyway, their
// outcome is known and they run, so the failed later read is only logged.
func (w *Worker) claimError(won int, err error) error {
	if err == nil || !errors.Is(err, workqueue.ErrNothingCommitted) {
		return err
	}
	if won > 0 {
		w.log.Warn("claim read failed after items were won; running them", "won", won, "err", err)
		return nil
	}
	return fmt.Errorf("%w: %w", controller.ErrSourceOperationNotCommitted, err)
}
