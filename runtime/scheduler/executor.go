package scheduler

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/laneq/laneq/runtime/clock"
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
//
// A handler that ignores its cancelled context past AbandonAfter gives its
// slot back, not its item: this goroutine stays with the handler, holding
// the item's lease (and so its lanes) until the handler returns, and a new
// goroutine serves the slot (see attempt).
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
				var abandoned bool
				outcome, abandoned = s.attempt(q.item, leaseAge, func() {
					// The slot and its processing-budget row take new work on a
					// new goroutine; this one holds the abandoned handler's item.
					s.releaseSlot(sh, time.Since(began))
					s.releaseBudget()
					s.wg.Add(1) // this goroutine's count is held: Stop cannot be past Wait
					go s.slot(sh)
				})
				if abandoned {
					if !errors.Is(outcome, errGaveUp) { // given up: left to its lease's expiry
						s.finish(q.item, outcome)
					}
					return
				}
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

// errGaveUp is the outcome of an attempt a stopping scheduler gave up on
// (Config.GiveUpAfter): its handler still runs, its lease is no longer
// renewed, and nothing may be written for it.
var errGaveUp = errors.New("scheduler: gave up on a handler that ignored shutdown")

// attempt runs the handler on its own goroutine under a heartbeat and the
// deadline, and returns its outcome. The lease was taken or renewed
// leaseAge ago (the item may have waited for its slot): the first
// heartbeat and the renewal grace count from then.
//
// The item is this process's while its handler runs, whatever ended the
// attempt's context (the deadline, a cancellation, shutdown, failed
// renewals): the heartbeat goes on holding the lease (Backend.Hold), so
// neither the item's lane followers nor another attempt of it can start
// while the handler may still act. Only a lost lease (ErrOwnershipLost:
// another claimer has the item, or it ended) stops the heartbeat; the
// fence then refuses the old attempt's writes. A handler that ignores its
// context for AbandonAfter is abandoned: abandon is called once (it frees
// the slot) and attempt goes on holding until the handler returns, and
// returns abandoned. After a Stop, a handler still running when
// GiveUpAfter passed is given up on: attempt returns errGaveUp without
// renewing again, and the item is left to its lease's expiry.
func (s *Scheduler[I]) attempt(item I, leaseAge time.Duration, abandon func()) (outcome error, abandoned bool) {
	ctx, cancel := context.WithCancelCause(s.ctx)
	defer cancel(nil)
	clk := s.cfg.Clock
	deadline, heartbeat, abandonT := clk.NewTimer(), clk.NewTimer(), clk.NewTimer()
	defer deadline.Stop()
	defer heartbeat.Stop()
	defer abandonT.Stop()
	deadline.Reset(s.cfg.HandlerDeadline)
	heartbeat.Reset(max(s.cfg.HeartbeatEvery-leaseAge, 0))
	renewed := clk.Now().Add(-leaseAge) // when the claim (or renewal) took the lease
	// Timers are armed before the handler starts: a test that sees the
	// handler running may advance a fake clock at once.
	result := make(chan error, 1) // buffered: a handler given up on never blocks
	go func() {
		defer func() {
			if r := recover(); r != nil {
				result <- &PanicError{Value: r, Stack: debug.Stack()}
			}
		}()
		result <- s.backend.Handle(ctx, item)
	}()

	done := ctx.Done()
	owned := true // the lease is still this attempt's to hold
	defer func() {
		if abandoned {
			s.abandonedRunning.Add(-1)
		}
	}()
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
			if abandoned {
				s.log.Info("an abandoned handler returned; finishing its item", "item", item, "cause", context.Cause(ctx), "err", err)
			}
			return err, abandoned
		case <-heartbeat.C():
			if ctx.Err() != nil {
				// Told to stop and still running: hold the item.
				owned = s.hold(ctx, item, heartbeat, &renewed)
				continue
			}
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
				// Not a renewal failure: the item is to stop. Its lease is
				// held (Hold) until the handler returns; its finish ends it
				// cancelled.
				s.cancelled.Add(1)
				cancel(err)
				heartbeat.Reset(0)
			case errors.Is(err, ErrOwnershipLost):
				// The item is someone else's (or ended): end the attempt; there
				// is nothing left to hold.
				s.heartbeatFailures.Add(1)
				owned = false
				cancel(errors.Join(ErrLeaseRenewal, err))
			case clk.Now().Sub(renewed) >= s.cfg.RenewGrace:
				// Too little of the lease is left to trust it: end the attempt,
				// and keep trying to hold the item while the handler runs (the
				// fence tells whether it is still this process's).
				s.heartbeatFailures.Add(1)
				cancel(errors.Join(ErrLeaseRenewal, err))
				heartbeat.Reset(s.cfg.renewRetryEvery())
			default:
				// Most of the lease remains: try again soon.
				s.heartbeatFailures.Add(1)
				s.log.Warn("lease renewal failed; retrying while the lease lasts", "err", err)
				heartbeat.Reset(s.cfg.renewRetryEvery())
			}
		case <-deadline.C():
			cancel(ErrHandlerDeadline)
		case <-done:
			// Cancelled (deadline, cancellation, shutdown or lost lease): give
			// the handler AbandonAfter to return, and its slot back after.
			done = nil
			abandonT.Reset(s.cfg.AbandonAfter)
		case <-abandonT.C():
			abandoned = true
			s.abandoned.Add(1)
			s.abandonedRunning.Add(1)
			msg := "handler ignored cancellation; its slot takes new work, and its item keeps its lease and lanes until it returns"
			if !owned {
				msg = "handler ignored cancellation; its slot takes new work (its item is no longer this process's)"
			}
			s.log.Warn(msg, "item", item, "cause", context.Cause(ctx), "abandon_after", s.cfg.AbandonAfter)
			abandon()
		case <-s.giveUp:
			// Stop's bound passed: stop renewing and leave the item to its
			// lease's expiry. Never a finish or a release here: the handler may
			// still act, and another process may take the item only once the
			// lease it can no longer renew has run out.
			s.gaveUp.Add(1)
			s.log.Warn("stopping without a handler that ignored shutdown; its item is left to its lease's expiry, then to another process",
				"item", item, "give_up_after", s.cfg.GiveUpAfter, "cause", context.Cause(ctx))
			if !abandoned {
				abandoned = true
				s.abandonedRunning.Add(1) // balanced by the deferred decrement
				abandon()
			}
			return errGaveUp, true
		}
	}
}

// hold renews the lease of an attempt whose context ended while its
// handler still runs (Backend.Hold), so the item stays this process's, and
// arms the next heartbeat; it reports false once the item is someone
// else's, and then arms none.
func (s *Scheduler[I]) hold(ctx context.Context, item I, heartbeat clock.Timer, renewed *time.Time) bool {
	clk := s.cfg.Clock
	hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.HeartbeatEvery, time.Millisecond))
	err := s.backend.Hold(hctx, item)
	hcancel()
	switch {
	case err == nil:
		*renewed = clk.Now()
		heartbeat.Reset(s.cfg.HeartbeatEvery)
		return true
	case errors.Is(err, ErrOwnershipLost):
		s.log.Warn("a handler told to stop still runs, and its item is no longer this process's: its writes are fenced", "item", item, "err", err)
		return false
	default:
		s.heartbeatFailures.Add(1)
		s.log.Warn("holding the lease of a handler told to stop failed; retrying", "item", item, "err", err)
		heartbeat.Reset(s.cfg.renewRetryEvery())
		return true
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
