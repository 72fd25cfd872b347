package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Outcomes of a cancellation, as bench_cancel records Cancel's answer.
const (
	cancelRunning = "running" // the holder is told at its next heartbeat
	cancelEnded   = "ended"   // it was not running: it ended at once
	cancelRefused = "refused" // it had ended between the pick and the call
)

// cancelFindFor bounds how long one cancellation looks for a stubborn
// attempt running: they start one in StubbornEvery events and run for
// StubbornFor, so one is usually there at once, but a run between bursts,
// or near its end, can have none for a while.
const cancelFindFor = time.Minute

// cancelReason is what the bench's cancellations record.
const cancelReason = "laneq bench: cancelled during the run"

// cancelRunning makes Spec.Cancels cancellations, one every CancelEvery
// (the first after CancelEvery too), each of a running stubborn attempt's
// item (cancelOne). One that finds none is skipped and reported.
func (p *phase) cancelRunning(ctx context.Context) error {
	if p.spec.Cancels == 0 {
		return nil
	}
	q, err := workqueue.New(p.db, workqueue.Config{Lease: p.spec.Lease})
	if err != nil {
		return fmt.Errorf("bench: queue for cancellations: %w", err)
	}
	for n := range p.spec.Cancels {
		select {
		case <-time.After(p.spec.CancelEvery):
		case <-ctx.Done():
			return ctx.Err()
		}
		err := p.cancelOne(ctx, q)
		p.mu.Lock()
		if errors.Is(err, errSkipped) {
			p.skippedCancels = append(p.skippedCancels, err.Error())
		} else if err == nil {
			p.cancels++
		}
		p.mu.Unlock()
		if err != nil && !errors.Is(err, errSkipped) {
			return fmt.Errorf("bench: cancellation %d: %w", n+1, err)
		}
	}
	return nil
}

// cancelOne cancels the item of the stubborn attempt that started last
// among those running (NextStubbornToCancel), recording the request in
// bench_cancel before the call (a cancel whose reply is lost may still
// have committed) and Cancel's answer after. An item that ended between
// the pick and the call is refused by Cancel: it is recorded as such and
// another is picked. It returns an error wrapping errSkipped when no
// stubborn attempt ran for cancelFindFor.
func (p *phase) cancelOne(ctx context.Context, q *workqueue.Queue) error {
	var failed error
	var refused int
	done := waitfor.Poll(cancelFindFor, func() (done, stop bool) {
		if ctx.Err() != nil {
			failed = ctx.Err()
			return false, true
		}
		pick, err := p.bq.NextStubbornToCancel(ctx)
		if err != nil {
			// sql.ErrNoRows: none running now. Anything else is a TiDB pause
			// or a connection it broke: look again either way.
			return false, false
		}
		outcome, err := p.cancel(ctx, q, pick)
		if err != nil {
			failed = err
			return false, true
		}
		if outcome == cancelRefused {
			refused++
			return false, false
		}
		return true, false
	})
	switch {
	case done:
		return nil
	case failed != nil:
		return failed
	default:
		return fmt.Errorf("%w: no stubborn attempt was running to cancel for %s (%d picks had ended before Cancel reached them)",
			errSkipped, cancelFindFor, refused)
	}
}

// cancel asks the queue to cancel pick's item, with the request and its
// answer on record, and returns the answer. A Cancel that failed
// otherwise leaves the answer unknown ("", and NULL in the row: the
// request may have committed); that counts as a cancellation made, since
// the item may end cancelled.
func (p *phase) cancel(ctx context.Context, q *workqueue.Queue, pick benchdb.NextStubbornToCancelRow) (string, error) {
	var id int64
	if err := throughFaults(ctx, func() (err error) {
		id, err = p.bq.BeginCancel(ctx, benchdb.BeginCancelParams{WorkID: pick.WorkID, Process: pick.Process})
		return err
	}); err != nil {
		return "", fmt.Errorf("record the cancellation of work %d: %w", pick.WorkID, err)
	}
	out, err := q.Cancel(ctx, pick.ScopeID, pick.WorkID, cancelReason)
	outcome := cancelEnded
	switch {
	case errors.Is(err, workqueue.ErrRefused):
		outcome = cancelRefused
	case ctx.Err() != nil:
		return "", ctx.Err()
	case err != nil:
		return "", nil // answer lost: the row keeps a NULL outcome
	case out.Running:
		outcome = cancelRunning
	}
	if err := throughFaults(ctx, func() error {
		return p.bq.EndCancel(ctx, benchdb.EndCancelParams{CancelID: id, Outcome: sql.NullString{String: outcome, Valid: true}})
	}); err != nil {
		return "", fmt.Errorf("record the answer to the cancellation of work %d: %w", pick.WorkID, err)
	}
	return outcome, nil
}
