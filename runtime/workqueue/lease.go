package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// Failure describes why an attempt failed. Both fields are stored and shown
// to operators: keep them free of payloads, credentials and tokens.
type Failure struct {
	Class   string // short, low-cardinality, e.g. "dependency_unavailable"
	Summary string // sanitized, at most 1024 characters
}

func (f Failure) validate() error {
	if f.Class == "" || len(f.Class) > 64 {
		return invalidf("failure class must be 1..64 bytes, got %d", len(f.Class))
	}
	if n := len([]rune(f.Summary)); n > 1024 {
		return invalidf("failure summary must be at most 1024 characters, got %d", n)
	}
	return nil
}

func leaseLost(l Lease, what string) error {
	return fmt.Errorf("%w: %s work %d with token %d", ErrLeaseLost, what, l.WorkID, l.Token)
}

// fenced runs one lease-fenced statement and turns "no row matched" into
// ErrLeaseLost.
func fenced(l Lease, what string, n int64, err error) error {
	if err != nil {
		return fmt.Errorf("workqueue: %s work %d: %w", what, l.WorkID, err)
	}
	if n == 0 {
		return leaseLost(l, what)
	}
	return nil
}

// Renew extends the lease by the configured lease duration from the
// database's clock.
func (qu *Queue) Renew(ctx context.Context, l Lease) error {
	n, err := qu.q.RenewLease(ctx, gen.RenewLeaseParams{LeaseMicros: micros(qu.cfg.Lease), WorkID: l.WorkID, LeaseToken: l.Token})
	return fenced(l, "renew", n, err)
}

// RecordProgress marks durable forward progress within the attempt: the
// consecutive safe-retry series ends, so a later failure backs off from the
// start.
func (qu *Queue) RecordProgress(ctx context.Context, l Lease) error {
	n, err := qu.q.RecordProgress(ctx, gen.RecordProgressParams{WorkID: l.WorkID, LeaseToken: l.Token})
	return fenced(l, "record progress of", n, err)
}

// Release hands the item back unexecuted, due now (drain, shutdown).
func (qu *Queue) Release(ctx context.Context, l Lease) error {
	n, err := qu.q.ReleaseLease(ctx, gen.ReleaseLeaseParams{WorkID: l.WorkID, LeaseToken: l.Token})
	return fenced(l, "release", n, err)
}

// Retry schedules another attempt after the policy's backoff for the item's
// consecutive safe-retry count (Claimed.SafeRetries) and returns the delay.
func (qu *Queue) Retry(ctx context.Context, c Claimed, f Failure) (time.Duration, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	delay := qu.cfg.Retry.jittered(c.SafeRetries)
	n, err := qu.q.RetryLater(ctx, gen.RetryLaterParams{
		DelayMicros:    micros(delay),
		FailureClass:   nullString(f.Class),
		FailureSummary: nullString(f.Summary),
		WorkID:         c.Lease.WorkID,
		LeaseToken:     c.Lease.Token,
	})
	if err := fenced(c.Lease, "retry", n, err); err != nil {
		return 0, err
	}
	return delay, nil
}

// ErrPermanent marks a failure that retrying cannot fix; Fail sends such an
// item straight to dead.
var ErrPermanent = errors.New("workqueue: permanent failure")

// Fail records a failed attempt: dead when cause wraps ErrPermanent or the
// item has used up RetryPolicy.MaxSafeRetries, otherwise a safe retry. It
// reports whether the item went dead.
func (qu *Queue) Fail(ctx context.Context, c Claimed, f Failure, cause error) (dead bool, err error) {
	limit := qu.cfg.Retry.MaxSafeRetries
	if errors.Is(cause, ErrPermanent) || (limit > 0 && c.SafeRetries+1 >= limit) {
		return true, qu.Dead(ctx, c.Lease, f)
	}
	_, err = qu.Retry(ctx, c, f)
	return false, err
}

// Complete finishes the item successfully and promotes its lane followers.
func (qu *Queue) Complete(ctx context.Context, l Lease) (Finished, error) {
	return qu.finish(ctx, l, StateCompleted, nil)
}

// Skip finishes the item without executing it (nothing to do).
func (qu *Queue) Skip(ctx context.Context, l Lease) (Finished, error) {
	return qu.finish(ctx, l, StateSkipped, nil)
}

// Dead finishes the item as failed for good; it is kept for inspection and
// replay and never reopened. Its lanes move on.
func (qu *Queue) Dead(ctx context.Context, l Lease, f Failure) error {
	_, err := qu.finishWithFailure(ctx, l, StateDead, f)
	return err
}

func (qu *Queue) finishWithFailure(ctx context.Context, l Lease, state string, f Failure) (Finished, error) {
	if err := f.validate(); err != nil {
		return Finished{}, err
	}
	return qu.finish(ctx, l, state, &f)
}

// Finished reports the lane followers a finish made claimable.
type Finished struct {
	// PromotedOrdinals are the lane ordinals of promoted followers: a
	// Claimer scanning past them should Rewind to the smallest.
	PromotedOrdinals []int64
}

// finish terminalizes the claimed row and, in the same transaction,
// promotes the next follower of each of its lanes when that follower now
// heads both of its own lanes. Lock order: the finished row (CAS), then the
// follower (locking read), then any live predecessor of the follower's other
// lane (locking read).
func (qu *Queue) finish(ctx context.Context, l Lease, state string, f *Failure) (Finished, error) {
	var res Finished
	err := qu.inTx(ctx, "finish work "+fmt.Sprint(l.WorkID), func(q *gen.Queries) error {
		res = Finished{}
		p := gen.FinishParams{TerminalState: state, WorkID: l.WorkID, LeaseToken: l.Token}
		if f != nil {
			p.FailureClass, p.FailureSummary = nullString(f.Class), nullString(f.Summary)
		}
		n, err := q.Finish(ctx, p)
		if err != nil {
			return err
		}
		if n == 0 {
			return leaseLost(l, "finish")
		}
		lane, err := q.GetLaneIdentity(ctx, l.WorkID)
		if err != nil {
			return fmt.Errorf("read lanes: %w", err)
		}
		promoted, err := promoteAfter(ctx, q, lane)
		res.PromotedOrdinals = promoted
		return err
	})
	if errors.Is(err, ErrLeaseLost) {
		return Finished{}, leaseLost(l, "finish")
	}
	return res, err
}

func promoteAfter(ctx context.Context, q *gen.Queries, lane gen.GetLaneIdentityRow) ([]int64, error) {
	var promoted []int64
	type follower struct {
		workID, token, ordinal int64
		source, target         sql.NullString
	}
	var next []follower
	if lane.SourceLaneKey.Valid {
		rows, err := q.NextBlockedInSourceLane(ctx, gen.NextBlockedInSourceLaneParams{
			ScopeID: lane.ScopeID, Generation: lane.Generation, LaneKey: lane.SourceLaneKey, AfterOrdinal: lane.LaneOrdinal,
		})
		if err != nil {
			return nil, fmt.Errorf("next follower in source lane: %w", err)
		}
		for _, r := range rows {
			next = append(next, follower{r.WorkID, r.LeaseToken, r.LaneOrdinal, r.SourceLaneKey, r.TargetLaneKey})
		}
	}
	if lane.TargetLaneKey.Valid {
		rows, err := q.NextBlockedInTargetLane(ctx, gen.NextBlockedInTargetLaneParams{
			ScopeID: lane.ScopeID, Generation: lane.Generation, LaneKey: lane.TargetLaneKey, AfterOrdinal: lane.LaneOrdinal,
		})
		if err != nil {
			return nil, fmt.Errorf("next follower in target lane: %w", err)
		}
		for _, r := range rows {
			if len(next) == 1 && next[0].workID == r.WorkID {
				continue // the same follower through both lanes
			}
			next = append(next, follower{r.WorkID, r.LeaseToken, r.LaneOrdinal, r.SourceLaneKey, r.TargetLaneKey})
		}
	}
	for _, fw := range next {
		blocked, err := liveBefore(ctx, q, lane.ScopeID, lane.Generation, fw.source.String, fw.target.String, fw.ordinal)
		if err != nil {
			return nil, err
		}
		if blocked {
			continue // its other lane still has an earlier live item; that item's finish promotes it
		}
		n, err := q.PromoteBlocked(ctx, gen.PromoteBlockedParams{WorkID: fw.workID, LeaseToken: fw.token})
		if err != nil {
			return nil, fmt.Errorf("promote work %d: %w", fw.workID, err)
		}
		if n == 1 {
			promoted = append(promoted, fw.ordinal)
		}
	}
	return promoted, nil
}

// NextWorkAt returns the scope's earliest strictly-future due time (a retry
// coming due or a lease expiring), by the database clock; ok is false when
// nothing is scheduled.
func (qu *Queue) NextWorkAt(ctx context.Context, scope string) (at time.Time, ok bool, err error) {
	times, err := qu.q.NextWorkAt(ctx, gen.NextWorkAtParams{ScopeID: scope})
	if err != nil {
		return time.Time{}, false, fmt.Errorf("workqueue: next work time of scope %q: %w", scope, err)
	}
	for _, t := range times {
		if !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok, nil
}

// HasDueWork reports whether anything in the scope is claimable now: a due
// lane head or an expired lease. A hint; the claim path stays the authority.
func (qu *Queue) HasDueWork(ctx context.Context, scope string) (bool, error) {
	ids, err := qu.q.HasDueWork(ctx, gen.HasDueWorkParams{ScopeID: scope})
	if err != nil {
		return false, fmt.Errorf("workqueue: due-work hint of scope %q: %w", scope, err)
	}
	return len(ids) > 0, nil
}
