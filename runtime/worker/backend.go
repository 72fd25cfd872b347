package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/workqueue"
)

// backend is the work-item queue as the scheduler sees it.
type backend struct{ w *Worker }

// Claim serves a scheduler turn with one ClaimMany: one scope read, and
// one claim for the shapes whose eligible work is the same. With rate
// limits, the unlimited work types are claimed first, then each limited
// type whose window is not spent, by its own Claimer, into the places
// left.
func (b backend) Claim(ctx context.Context, reqs []scheduler.Request) []scheduler.ClaimResult[*workqueue.Claimed] {
	w := b.w
	out := make([]scheduler.ClaimResult[*workqueue.Claimed], len(reqs))
	var limited []string
	if w.limiter != nil {
		admitted, retryAt, err := w.limiter.Admit(ctx, w.types)
		if err != nil {
			for i := range out {
				out[i].Err = fmt.Errorf("worker: rate limits: %w", err)
			}
			return out
		}
		if !retryAt.IsZero() {
			w.ctrl.NotifyDue(retryAt) // a limited type's next window: claim it then
		}
		for _, t := range admitted {
			if w.limited[t] != nil {
				limited = append(limited, t)
			}
		}
	}
	left := make([]int, len(reqs))
	for i, req := range reqs {
		left[i] = req.Max
	}
	claim := func(c *workqueue.Claimer, types []string) {
		var creqs []workqueue.ClaimRequest
		var idx []int
		for i, req := range reqs {
			if left[i] > 0 || req.Max == 0 {
				creqs = append(creqs, workqueue.ClaimRequest{
					QueueClasses: req.QueueClasses, Preferred: req.Preferred, WorkTypes: types,
					Max: left[i], StaleOnly: req.StaleOnly, StaleClasses: w.classes,
				})
				idx = append(idx, i)
			}
		}
		if len(creqs) == 0 {
			return
		}
		start := time.Now()
		results := c.ClaimMany(ctx, creqs)
		took := time.Since(start)
		for k, r := range results {
			i := idx[k]
			w.metrics.claimed(ctx, reqs[i], r.Items, r.Stats, took)
			if h := w.cfg.Hooks; h != nil && h.AfterClaimTurn != nil && len(r.Items) > 0 {
				h.AfterClaimTurn(took, r.Items)
			}
			if w.limiter != nil {
				for _, it := range r.Items {
					w.limiter.Claimed(it.WorkType, it.RateKey, 1) // each asks Take once as it starts
				}
			}
			items := w.handOver(r.Items)
			left[i] -= len(items)
			out[i].Items = append(out[i].Items, items...)
			err := w.claimError(len(items), r.Err)
			if err == nil && r.Contended {
				err = scheduler.ErrContended // keep claiming: there is work
			}
			if out[i].Err == nil || errors.Is(out[i].Err, scheduler.ErrContended) {
				out[i].Err = cmpErr(out[i].Err, err)
			}
		}
	}
	if len(w.unlimited) > 0 {
		claim(w.claimer, w.unlimited)
	}
	for _, t := range limited {
		claim(w.limited[t], []string{t})
	}
	return out
}

// cmpErr keeps the more telling of two claim errors: a failure over
// ErrContended, ErrContended over none.
func cmpErr(prev, next error) error {
	switch {
	case next == nil:
		return prev
	case prev == nil, errors.Is(prev, scheduler.ErrContended):
		return next
	}
	return prev
}

// handOver records items this process just claimed (a claim turn's, or
// followers a completion batch took) and returns them as the scheduler
// runs them.
func (w *Worker) handOver(claimed []workqueue.Claimed) []*workqueue.Claimed {
	w.history.claimed(w.clock.Now(), claimed)
	if h := w.cfg.Hooks; h != nil && h.AfterClaim != nil {
		for _, c := range claimed {
			h.AfterClaim(c)
		}
	}
	items := make([]*workqueue.Claimed, len(claimed))
	for k := range claimed {
		items[k] = &claimed[k]
	}
	return items
}

// completeBatch writes a batch of completions (the completion batcher's
// write) and claims on promote: the batch's transaction may take, for
// this process, up to one lane follower per item in lanes it completes
// (workqueue.Claimer.CompleteManyTaking), and each taken follower goes to
// an executor shape that runs its class (scheduler Adopt), holding the
// processing-budget row its predecessor is about to give back. Promotions
// it did not take are announced by the queue.
func (w *Worker) completeBatch(ctx context.Context, leases []workqueue.Lease) []error {
	if w.cfg.NoClaimOnPromote || !slices.ContainsFunc(leases, func(l workqueue.Lease) bool { return !l.InNoLane() }) {
		errs, _ := w.q.CompleteMany(ctx, leases)
		return errs
	}
	shapes := w.sched.Shapes()
	places := make([]workqueue.TakePlace, len(shapes))
	for i, sh := range shapes {
		places[i] = workqueue.TakePlace{QueueClasses: sh.QueueClasses, Max: len(leases)}
	}
	began, start := w.clock.Now(), time.Now() // no lease it takes is older
	errs, _, taken, err := w.claimer.CompleteManyTaking(ctx, leases, places, w.types)
	took := time.Since(start)
	if err != nil {
		w.log.Warn("followers taken on promote could not be read back; their leases will expire and be reclaimed", "err", err)
	}
	for i, sh := range shapes {
		w.metrics.taken(ctx, sh.Name, len(taken[i]))
		if h := w.cfg.Hooks; h != nil && h.AfterClaimTurn != nil && len(taken[i]) > 0 {
			h.AfterClaimTurn(took, taken[i])
		}
		w.sched.Adopt(sh.Name, w.handOver(taken[i]), began)
	}
	return errs
}

func (b backend) Renew(ctx context.Context, c *workqueue.Claimed) error {
	var err error
	if b.w.renew != nil {
		err = b.w.renew.do(ctx, c.Lease)
	} else {
		err = b.w.q.Renew(ctx, c.Lease)
	}
	switch {
	case errors.Is(err, workqueue.ErrLeaseLost):
		return fmt.Errorf("%w: %w", scheduler.ErrOwnershipLost, err)
	case errors.Is(err, workqueue.ErrCancelRequested):
		return fmt.Errorf("%w: %w", scheduler.ErrCancelled, err)
	}
	return err
}

// Hold keeps the lease of an item whose handler was told to stop and has
// not returned (see scheduler.Backend): the lane stays this item's until it
// does.
func (b backend) Hold(ctx context.Context, c *workqueue.Claimed) error {
	err := b.w.q.Hold(ctx, c.Lease)
	if errors.Is(err, workqueue.ErrLeaseLost) {
		return fmt.Errorf("%w: %w", scheduler.ErrOwnershipLost, err)
	}
	if err != nil {
		return fmt.Errorf("worker: hold work %d: %w", c.WorkID, err)
	}
	return nil
}

func (b backend) Handle(ctx context.Context, c *workqueue.Claimed) error {
	w := b.w
	if c.Dependency != nil {
		// Rechecked before its rate limit counts the start: an item that
		// waits again (or whose recheck failed) does not run, so it spends
		// no start, and no longer waits for one (Unclaimed): the budget's
		// next share is not sized for it.
		if err := w.recheckDependency(ctx, c); err != nil {
			if w.limiter != nil {
				w.limiter.Unclaimed(c.WorkType, c.RateKey)
			}
			return err
		}
	}
	if w.limiter != nil {
		// Counted as it starts: a start its window has no budget for is
		// given back unrun until the next window (Finish).
		ok, retryAt, err := w.limiter.Take(ctx, c.WorkType, c.RateKey)
		if err != nil {
			return &rateDeferred{until: w.clock.Now().Add(time.Second), err: err}
		}
		if !ok {
			return &rateDeferred{until: retryAt}
		}
	}
	start := time.Now()
	var ev workqueue.StoredEvent
	if c.Event != nil { // read with the claim
		ev = *c.Event
	} else {
		loaded, err := w.q.LoadEvent(ctx, c.EventID)
		if err != nil {
			return err
		}
		ev = loaded
	}
	loaded := time.Now()
	err := w.handlers[c.WorkType](ctx, &Job{Item: *c, Event: ev, q: w.q, owned: c})
	if w.cfg.StageTiming {
		w.log.Info("stage timing", "work_id", c.WorkID, "work_type", c.WorkType, "queue_class", c.QueueClass,
			"attempt", c.Attempt, "load_event", loaded.Sub(start), "handle", time.Since(loaded), "ok", err == nil)
	}
	return err
}

// recheckDependency decides whether an item woken (or enqueued) with a
// dependency runs: its exact keys decide, never the wake. Unsatisfied, it
// returns the *DependencyWait that sends the item back to waiting unrun.
func (w *Worker) recheckDependency(ctx context.Context, c *workqueue.Claimed) error {
	ok, err := w.q.DependencySatisfied(ctx, c.Scope, *c.Dependency)
	if err != nil {
		return fmt.Errorf("worker: recheck dependency: %w", err)
	}
	if !ok {
		return &DependencyWait{Dependency: *c.Dependency}
	}
	return nil
}

// Finish makes the attempt's outcome durable through the lease-fenced
// queue calls and tells the controller about work that became claimable.
func (b backend) Finish(ctx context.Context, cp *workqueue.Claimed, outcome error) error {
	w := b.w
	c := *cp // as RecordProgress left it
	if h := w.cfg.Hooks; h != nil && h.BeforeFinish != nil {
		h.BeforeFinish(c, outcome)
	}
	var (
		err       error
		kind      Outcome
		retryIn   time.Duration
		wait      *DependencyWait
		cancelled *workqueue.CancelRequestedError
	)
	var deferred *rateDeferred
	switch {
	case errors.As(outcome, &deferred):
		kind = OutcomeDeferred
		err = w.q.Defer(ctx, c.Lease, max(deferred.until.Sub(w.clock.Now()), time.Millisecond))
		w.ctrl.NotifyDue(deferred.until)
	case outcome != nil && errors.As(outcome, &cancelled):
		// A heartbeat found the item cancelled and the handler did not
		// return success: whatever it returned, the item ends cancelled.
		kind = OutcomeCancelled
		_, err = w.q.FinishCancelled(ctx, c.Lease, cancelled.Reason)
	case errors.As(outcome, &wait) && wait.Dependency.Validate() == nil:
		kind = OutcomeWaiting
		_, err = w.q.Wait(ctx, c, wait.Dependency) // a runnable item is announced by the queue
	case outcome == nil && w.complete != nil:
		kind = OutcomeCompleted // group-committed; the batch wakes the controller for followers it promoted
		if c.Lease.InNoLane() {
			err = w.complete.do(ctx, c.Lease)
		} else {
			err = w.completeLaned.do(ctx, c.Lease)
		}
	case outcome == nil:
		kind = OutcomeCompleted
		_, err = w.q.Complete(ctx, c.Lease)
	case errors.Is(outcome, ErrSkip):
		kind = OutcomeSkipped
		_, err = w.q.Skip(ctx, c.Lease)
	case errors.Is(outcome, scheduler.ErrShutdown) || errors.Is(outcome, scheduler.ErrNotStarted):
		kind = OutcomeReleased
		if w.limiter != nil && errors.Is(outcome, scheduler.ErrNotStarted) {
			w.limiter.Unclaimed(c.WorkType, c.RateKey) // it never asked Take
		}
		err = w.q.Release(ctx, c.Lease)
	default:
		var out workqueue.FailOutcome
		out, err = w.q.Fail(ctx, c, failureOf(outcome), outcome)
		kind = OutcomeRetried
		if out.Dead {
			kind = OutcomeDead
		} else if err == nil {
			retryIn = out.RetryIn
			w.ctrl.NotifyDue(w.clock.Now().Add(out.RetryIn))
		}
	}
	if errors.As(err, &cancelled) {
		// The cancellation was requested after the last heartbeat, and the
		// retry, release or wait was refused for it: the item ends
		// cancelled instead of running again.
		kind = OutcomeCancelled
		_, err = w.q.FinishCancelled(ctx, c.Lease, cancelled.Reason)
	}
	w.metrics.finished(ctx, c, kind, err)
	if err == nil {
		w.history.finished(w.clock.Now(), c, kind)
	}
	if h := w.cfg.Hooks; h != nil && h.AfterFinish != nil {
		h.AfterFinish(c, outcome, err)
	}
	if err != nil {
		// The queue already ran the write again after transient errors; what
		// is left is a lost lease or an error that kept coming back. The
		// lease fences the item either way: it is reclaimed when it expires.
		w.log.Warn("finishing an item failed", "work_id", c.WorkID, "outcome", kind, "err", err)
		return fmt.Errorf("worker: %s work %d: %w", kind, c.WorkID, err)
	}
	if w.cfg.OnFinished != nil {
		w.onFinished(Finished{Item: c, Outcome: kind, Err: outcome, RetryIn: retryIn})
	}
	// Promoted followers, a released item and a retry were announced by
	// the queue itself (see workqueue.Announcement).
	return nil
}

// rateDeferred is the outcome of an item whose rate limit had no start
// left in its window (or whose budget could not be read): it never ran,
// and is given back unrun, its attempt not counted, until then.
type rateDeferred struct {
	until time.Time // on the worker's clock
	err   error     // the budget's read failed
}

func (d *rateDeferred) Error() string {
	if d.err != nil {
		return fmt.Sprintf("worker: rate limit budget unread: %v", d.err)
	}
	return "worker: rate limit reached"
}

// Outcome is what a finished attempt made of its item.
type Outcome string

// Outcomes, as Finished and the finished metric's outcome attribute name
// them.
const (
	OutcomeCompleted Outcome = "completed" // the handler returned nil
	OutcomeSkipped   Outcome = "skipped"   // the handler returned ErrSkip
	OutcomeRetried   Outcome = "retried"   // a failure with retries left: due again after RetryIn
	OutcomeDead      Outcome = "dead"      // a permanent failure, or the retry or attempt budget spent
	OutcomeWaiting   Outcome = "waiting"   // WaitForDependency: parked until a producer satisfies a key
	OutcomeReleased  Outcome = "released"  // shutdown: given back unrun, due at once
	OutcomeCancelled Outcome = "cancelled" // cancelled while running (Queue.Cancel): ends skipped
	OutcomeDeferred  Outcome = "deferred"  // a rate limit had no start left: given back unrun until its next window
)

// Finished reports an attempt whose outcome this worker made durable.
type Finished struct {
	Item    workqueue.Claimed
	Outcome Outcome
	// Err is what the handler returned (nil for a completion; the
	// shutdown error for a release).
	Err error
	// RetryIn is how long after the write the next attempt is due
	// (OutcomeRetried only).
	RetryIn time.Duration
}

// failureOf describes an outcome for the item row: a class and a bounded
// summary. The summary is the error text; handlers must keep payloads and
// secrets out of their errors.
func failureOf(outcome error) workqueue.Failure {
	class := "handler_error"
	var p *scheduler.PanicError
	var fc FailureClass
	switch {
	case errors.As(outcome, &p):
		class = "panic"
	case errors.Is(outcome, scheduler.ErrHandlerDeadline):
		class = "deadline"
	case errors.Is(outcome, scheduler.ErrLeaseRenewal):
		class = "lease_renewal"
	case errors.As(outcome, &fc) && fc.FailureClass() != "":
		class = fc.FailureClass() // a named class says more than "permanent"
	case errors.Is(outcome, workqueue.ErrPermanent):
		class = "permanent"
	}
	if len(class) > 64 {
		class = class[:64]
	}
	summary := []rune(outcome.Error())
	if len(summary) > 1024 {
		summary = summary[:1024]
	}
	return workqueue.Failure{Class: class, Summary: string(summary)}
}

// onFinished calls Config.OnFinished, recovering a panic: the outcome is
// durable already, and a panicking callback must not end the process.
func (w *Worker) onFinished(f Finished) {
	defer func() {
		if v := recover(); v != nil {
			w.log.Error("worker: OnFinished panicked; the item's outcome stands and the worker goes on",
				"work_id", f.Item.WorkID, "outcome", f.Outcome, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	w.cfg.OnFinished(f)
}
