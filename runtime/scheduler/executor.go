package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"
)

// slot is one executor: it runs the items handed to its shape, one at a
// time, until the scheduler stops. A handler's panic, wedge or lease loss
// ends that attempt only; the slot goes on to the next item.
//
// The slot is free again as soon as the handler returns: the outcome is
// made durable on its own goroutine (finishAsync), which keeps the item's
// processing-budget row until the outcome committed. Outcomes of many
// slots then commit together (the backend group-commits them) while the
// slots already run the next claim, instead of every slot idling for a
// commit it cannot speed up. The next item may already be waiting in the
// shape's queue, claimed ahead (Config.ClaimAhead).
func (s *Scheduler[I]) slot(sh *shapeSlots[I]) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case q := <-sh.work:
			outcome, handled := error(ErrShutdown), time.Duration(-1) // stopping: do not start it
			var leaseAge time.Duration
			if s.ctx.Err() == nil {
				leaseAge, outcome = s.renewIfWaited(q)
			}
			if outcome == nil {
				began := time.Now()
				outcome = s.attempt(q.item, leaseAge)
				handled = time.Since(began)
			}
			s.finishAsync(q.item, outcome)
			s.releaseSlot(sh, handled)
		}
	}
}

// renewIfWaited returns how old the item's lease is as it starts. An item
// that waited HeartbeatEvery or longer for its slot (claimed ahead while a
// handler turned slow) renews first, so it starts with the lease an item
// claimed just now would have; when that fails it must not start (another
// claimer may own it, or soon will): the outcome wraps ErrNotStarted and
// the item is released unrun.
func (s *Scheduler[I]) renewIfWaited(q queued[I]) (leaseAge time.Duration, outcome error) {
	if age := s.cfg.Clock.Now().Sub(q.claimed); age < s.cfg.HeartbeatEvery {
		return max(age, 0), nil
	}
	s.aheadRenewals.Add(1)
	ctx, cancel := context.WithTimeout(s.ctx, s.cfg.HeartbeatEvery)
	defer cancel()
	if err := s.backend.Renew(ctx, q.item); err != nil {
		s.aheadReleased.Add(1)
		s.log.Warn("an item claimed ahead waited past a heartbeat and could not renew its lease; releasing it unrun", "err", err)
		return 0, errors.Join(ErrNotStarted, err)
	}
	return 0, nil
}

// finishAsync makes outcome durable on its own goroutine and then returns
// the item's budget row. Stop waits for it.
func (s *Scheduler[I]) finishAsync(item I, outcome error) {
	s.wg.Add(1) // the calling slot's own count is held: Stop cannot be past Wait
	go func() {
		defer s.wg.Done()
		s.finish(item, outcome)
		s.releaseBudget()
	}()
}

// attempt runs the handler on its own goroutine under a heartbeat and the
// deadline, and returns its outcome. The lease was taken or renewed
// leaseAge ago (the item may have waited for its slot): the first
// heartbeat and the renewal grace count from then.
func (s *Scheduler[I]) attempt(item I, leaseAge time.Duration) error {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	clk := s.cfg.Clock
	deadline, heartbeat, abandon := clk.NewTimer(), clk.NewTimer(), clk.NewTimer()
	defer deadline.Stop()
	defer heartbeat.Stop()
	defer abandon.Stop()
	deadline.Reset(s.cfg.HandlerDeadline)
	heartbeat.Reset(max(s.cfg.HeartbeatEvery-leaseAge, 0))
	renewed := clk.Now().Add(-leaseAge) // when the claim (or renewal) took the lease
	// Timers are armed before the handler starts: a test that sees the
	// handler running may advance a fake clock at once.
	result := make(chan error, 1)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				result <- &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		result <- s.backend.Handle(ctx, item)
	}()

	done := ctx.Done()
	for {
		select {
		case err := <-result:
			if err != nil && ctx.Err() != nil && !errors.Is(err, context.Cause(ctx)) {
				// Say why the context ended: shutdown, deadline or lost lease.
				err = errors.Join(context.Cause(ctx), err)
			}
			var p *PanicError
			if errors.As(err, &p) {
				s.panics.Add(1)
				s.log.Error("handler panicked; the item goes back through the fenced retry path",
					"panic_type", fmt.Sprintf("%T", p.Value), "stack", string(p.Stack))
			}
			return err
		case <-heartbeat.C():
			// Bounded: a hung renew must not hold up the deadline timers, nor
			// outlast the grace the lease still allows.
			grace := s.cfg.RenewGrace - clk.Now().Sub(renewed)
			rctx, rcancel := context.WithTimeout(ctx, max(min(s.cfg.HeartbeatEvery, grace), time.Millisecond))
			err := s.backend.Renew(rctx, item)
			rcancel()
			switch {
			case err == nil:
				renewed = clk.Now()
				heartbeat.Reset(s.cfg.HeartbeatEvery)
			case errors.Is(err, ErrCancelled):
				// Not a renewal failure: the item is to stop. Its lease is not
				// renewed any more; the handler has AbandonAfter to return.
				s.cancelled.Add(1)
				cancel(err)
			case errors.Is(err, ErrOwnershipLost) || clk.Now().Sub(renewed) >= s.cfg.RenewGrace:
				// The item is someone else's, or too little of the lease is
				// left to trust it: end the attempt.
				s.heartbeatFailures.Add(1)
				cancel(errors.Join(ErrLeaseRenewal, err))
			default:
				// Most of the lease remains: try again soon.
				s.heartbeatFailures.Add(1)
				s.log.Warn("lease renewal failed; retrying while the lease lasts", "err", err)
				heartbeat.Reset(s.cfg.renewRetryEvery())
			}
		case <-deadline.C():
			cancel(ErrHandlerDeadline)
		case <-done:
			// Cancelled (deadline, shutdown or lost lease): give the handler
			// AbandonAfter to return.
			done = nil
			heartbeat.Stop()
			abandon.Reset(s.cfg.AbandonAfter)
		case <-abandon.C():
			s.abandoned.Add(1)
			cause := context.Cause(ctx)
			s.log.Warn("handler ignored cancellation; abandoning it and finishing the item", "cause", cause)
			return cause
		}
	}
}

// finish makes the outcome durable; failures are counted and logged (the
// lease fences a finish that lost its item).
func (s *Scheduler[I]) finish(item I, outcome error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), s.cfg.FinishTimeout)
	defer cancel()
	s.finished.Add(1)
	if err := s.backend.Finish(ctx, item, outcome); err != nil {
		s.finishErrs.Add(1)
		s.log.Warn("finishing an item failed", "err", err)
	}
}
