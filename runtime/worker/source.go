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
// range, picking up anything a scan cursor passed (a transition that
// committed later than the claimer's straggler window after it ran), and
// reports work kinds no executor shape serves. It writes nothing. (Ingress
// receipt routing will hook in here when it lands.)
func (s source) Reconcile(ctx context.Context) error {
	s.w.rewind()
	if err := s.w.checkWorkKinds(ctx); err != nil {
		// A report, not a repair: a failed read changes nothing durable.
		return fmt.Errorf("%w: %w", controller.ErrSourceOperationNotCommitted, err)
	}
	return nil
}

// Claim runs a scheduler turn. When the due timer fired, something
// scheduled came due: a retry (found by the scan, whose floor it is ahead
// of) or a lease expiry, so the turn also looks for expired leases.
func (s source) Claim(ctx context.Context, turn controller.Turn) (controller.ClaimBatch, error) {
	s.w.claimBegan = time.Now() // real time: the lookup measures it against the database's
	if turn.DueFired {
		s.w.claimer.NoteDue()
		for _, c := range s.w.limited {
			c.NoteDue()
		}
	}
	return s.w.sched.ClaimTurn(ctx, turn)
}

// NextWorkAt places the queue's next due time on the local clock by its
// delay from the database's NOW(6): no two wall clocks are compared, so
// skew between this host and TiDB neither fires the timer early nor makes
// a future time look overdue. It looks no further than the longest
// reconciliation backstop (controller.LookAhead), which looks again.
//
// For leases it also looks back to when the last claim turn began, with a
// slack (workqueue.LookBackSince): a dead process's lease that expired
// after that turn's reads is claimable now, yet no later lookup (they see
// only the future) and no announcement would report it, so it would wait
// for a probe — 20 minutes in quiet mode. Such an expiry is reported as
// now. The turn it causes takes it, unless its class is one this worker
// does not serve: then the next lookup, whose window reaches the slack
// before that turn, can show it again. A repeat is armed for when it
// leaves the window instead, so it costs one more turn at most (which also
// finds any expiry the repeat hid behind it).
func (s source) NextWorkAt(ctx context.Context) (time.Time, bool, error) {
	next, ok, err := s.w.q.NextWorkSince(ctx, s.w.cfg.Scope, workqueue.LookBackSince(s.w.claimBegan), s.w.ctrl.LookAhead())
	if err != nil || !ok {
		return time.Time{}, false, err
	}
	now := s.w.clock.Now()
	if next.In > 0 {
		return now.Add(next.In), true, nil
	}
	if next.At.Equal(s.w.lookedBack) {
		return now.Add(max(workqueue.LookBackSlack+next.In, time.Millisecond)), true, nil
	}
	s.w.lookedBack = next.At
	return now, true, nil
}

// Generation is the claimer's probe, in both modes: the scope's admission
// state, the first claimable row and the first expired lease of every
// class this worker serves, so work another process made claimable is
// noticed within one probe period (the quiet one while wakes are healthy)
// even when every wake is lost.
func (s source) Generation(ctx context.Context) (uint64, error) {
	return s.w.claimer.Probe(ctx, s.w.classes, s.w.types)
}

func (s source) Capacity(continuation bool) int { return s.w.sched.Capacity(continuation) }

// claimError maps a claim's error for the controller: an error proven to
// have committed nothing is marked so; when items were won anyway, their
// outcome is known and they run, so the failed later step is only logged.
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

// Maintain runs the controller's maintenance (every
// Controller.MaintainEvery, in quiet mode too): one dependency safety
// pass, which wakes waiters whose key a producer satisfied without waking
// them and settles registrations a crashed worker left, one page of
// lane recovery (workqueue.Queue.RecoverLanes), which promotes blocked
// rows that nothing ahead of them holds back any more, the write of the
// history of the minutes that ended (HistoryConfig), and, when its quiet
// mode changed, the process's description in its wake endpoint row. Each runs whatever
// the other did: a failing sweep does not hold lane recovery back. Either
// one that made work claimable, or may have, asks for a claim turn (and
// was announced by the queue); a failed pass keeps its cursor and is run
// again after a backoff.
func (s source) Maintain(ctx context.Context) (bool, error) {
	st, sweepErr := s.w.sweep.Pass(ctx)
	s.w.metrics.swept(ctx, st)
	if st.Woken > 0 {
		s.w.log.Warn("dependency safety pass woke waiters a producer did not wake", "woken", st.Woken, "probed", st.Probed)
	}
	if sweepErr != nil {
		sweepErr = fmt.Errorf("dependency safety pass: %w", sweepErr)
	}
	lanes, laneErr := s.w.q.RecoverLanes(ctx, s.w.cfg.Scope, s.w.laneCursor, laneRecoveryPage)
	if laneErr == nil {
		s.w.laneCursor = lanes.Next
	} else {
		laneErr = fmt.Errorf("lane recovery: %w", laneErr)
	}
	if lanes.Promoted > 0 {
		s.w.log.Warn("lane recovery promoted blocked rows nothing held back", "promoted", lanes.Promoted, "checked", lanes.Checked)
	}
	// The history of the minutes that ended: nothing when this worker did
	// nothing. A failure keeps the counts for the next maintenance and
	// does not fail this one (the repairs above are what it is for).
	if err := s.w.flushHistory(ctx, false); err != nil {
		s.w.log.Warn("history not written; kept for the next maintenance", "err", err)
	}
	if err := s.w.describeChange(ctx); err != nil {
		s.w.log.Warn("process description not updated; tried again at the next maintenance", "err", err)
	}
	return st.Claimable() || lanes.Promoted > 0, errors.Join(sweepErr, laneErr)
}

// laneRecoveryPage is the blocked rows one maintenance checks (two probes
// each): a scope with many lane followers is gone round over several
// maintenances, and one with none costs one statement.
const laneRecoveryPage = 100
