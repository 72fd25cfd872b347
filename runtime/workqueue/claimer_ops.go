package workqueue

import (
	"context"
	"time"
)

// The Claimer's lifecycle methods finish, retry or release an item it
// claimed through the Queue and keep its scan floors honest: an item that
// becomes claimable behind a floor (a promoted follower, a released item, a
// retry coming due) rewinds it, so this process picks it up without waiting
// for the periodic rescan. Ownership is still only the lease token; the local
// clock here only decides when to look again.

// Complete finishes c successfully; see Queue.Complete.
func (cl *Claimer) Complete(ctx context.Context, c Claimed) (Finished, error) {
	fin, err := cl.qu.Complete(ctx, c.Lease)
	cl.rewindPromoted(fin)
	return fin, err
}

// Skip finishes c without executing it; see Queue.Skip.
func (cl *Claimer) Skip(ctx context.Context, c Claimed) (Finished, error) {
	fin, err := cl.qu.Skip(ctx, c.Lease)
	cl.rewindPromoted(fin)
	return fin, err
}

// Dead finishes c as failed for good; see Queue.Dead.
func (cl *Claimer) Dead(ctx context.Context, c Claimed, f Failure) (Finished, error) {
	fin, err := cl.qu.Dead(ctx, c.Lease, f)
	cl.rewindPromoted(fin)
	return fin, err
}

// FailOutcome is what Claimer.Fail did.
type FailOutcome struct {
	Dead     bool
	Finished Finished      // followers promoted by a dead item
	RetryIn  time.Duration // the backoff of a safe retry
}

// Fail records a failed attempt of c, dead or safe retry; see Queue.Fail.
func (cl *Claimer) Fail(ctx context.Context, c Claimed, f Failure, cause error) (FailOutcome, error) {
	if cl.qu.failsForGood(c, cause) {
		fin, err := cl.Dead(ctx, c, f)
		return FailOutcome{Dead: true, Finished: fin}, err
	}
	delay, err := cl.Retry(ctx, c, f)
	return FailOutcome{RetryIn: delay}, err
}

// Release hands c back unexecuted, due now; see Queue.Release.
func (cl *Claimer) Release(ctx context.Context, c Claimed) error {
	if err := cl.qu.Release(ctx, c.Lease); err != nil {
		return err
	}
	cl.Rewind(c.LaneOrdinal)
	return nil
}

// Retry schedules another attempt after the backoff; see Queue.Retry. The
// floor rewinds once the delay has passed on the local clock.
func (cl *Claimer) Retry(ctx context.Context, c Claimed, f Failure) (time.Duration, error) {
	delay, err := cl.qu.Retry(ctx, c, f)
	if err != nil {
		return 0, err
	}
	cl.mu.Lock()
	cl.dueRewinds = append(cl.dueRewinds, dueRewind{at: cl.cfg.Now().Add(delay), ordinal: c.LaneOrdinal})
	cl.mu.Unlock()
	return delay, nil
}

func (cl *Claimer) rewindPromoted(fin Finished) {
	for _, o := range fin.PromotedOrdinals {
		cl.Rewind(o)
	}
}

type dueRewind struct {
	at      time.Time
	ordinal int64
}

// applyDueRewinds rewinds for retries whose delay has passed.
func (cl *Claimer) applyDueRewinds() {
	cl.mu.Lock()
	now := cl.cfg.Now()
	var due []int64
	kept := cl.dueRewinds[:0]
	for _, r := range cl.dueRewinds {
		if now.Before(r.at) {
			kept = append(kept, r)
		} else {
			due = append(due, r.ordinal)
		}
	}
	cl.dueRewinds = kept
	cl.mu.Unlock()
	for _, o := range due {
		cl.Rewind(o)
	}
}
