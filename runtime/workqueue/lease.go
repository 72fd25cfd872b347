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
// consecutive safe-retry series ends, in the database and in c, so a later
// failure of this attempt backs off from the start.
func (qu *Queue) RecordProgress(ctx context.Context, c *Claimed) error {
	n, err := qu.q.RecordProgress(ctx, gen.RecordProgressParams{WorkID: c.Lease.WorkID, LeaseToken: c.Lease.Token})
	if err := fenced(c.Lease, "record progress of", n, err); err != nil {
		return err
	}
	c.SafeRetries = 0
	return nil
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
// item already made RetryPolicy.MaxSafeRetries consecutive safe retries,
// otherwise a safe retry. It reports whether the item went dead and, if so,
// the followers that made claimable.
func (qu *Queue) Fail(ctx context.Context, c Claimed, f Failure, cause error) (dead bool, fin Finished, err error) {
	if qu.failsForGood(c, cause) {
		fin, err = qu.Dead(ctx, c.Lease, f)
		return true, fin, err
	}
	_, err = qu.Retry(ctx, c, f)
	return false, Finished{}, err
}

// failsForGood decides Fail: permanent causes and exhausted retry series
// end in dead.
func (qu *Queue) failsForGood(c Claimed, cause error) bool {
	limit := qu.cfg.Retry.MaxSafeRetries
	return errors.Is(cause, ErrPermanent) || (limit > 0 && c.SafeRetries >= limit)
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
func (qu *Queue) Dead(ctx context.Context, l Lease, f Failure) (Finished, error) {
	if err := f.validate(); err != nil {
		return Finished{}, err
	}
	return qu.finish(ctx, l, StateDead, &f)
}

// Finished reports the lane followers a finish made claimable.
type Finished struct {
	// PromotedOrdinals are the lane ordinals of promoted followers: a
	// Claimer scanning past them should Rewind to the smallest.
	PromotedOrdinals []int64
}

// readCommitted is the finish transaction's isolation: every statement reads
// the latest commit (TiDB keeps it pessimistic), so promotion checks need no
// locks beyond the follower's (see LiveBeforeInSourceLane).
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// finish terminalizes the claimed row and, in the same transaction,
// promotes the next follower of each of its lanes when that follower now
// heads both of its own lanes. Locks: the finished row (CAS), then the
// follower (locking read); the follower's other lane is read without a lock
// (see LiveBeforeInSourceLane). An item in no lane has no followers: one
// autocommit CAS finishes it.
func (qu *Queue) finish(ctx context.Context, l Lease, state string, f *Failure) (Finished, error) {
	p := gen.FinishParams{TerminalState: state, WorkID: l.WorkID, LeaseToken: l.Token}
	if f != nil {
		p.FailureClass, p.FailureSummary = nullString(f.Class), nullString(f.Summary)
	}
	if l.lanes != nil && !l.lanes.source.Valid && !l.lanes.target.Valid {
		n, err := qu.q.Finish(ctx, p)
		return Finished{}, fenced(l, "finish", n, err)
	}
	var res Finished
	err := qu.inTx(ctx, "finish work "+fmt.Sprint(l.WorkID), readCommitted, func(q *gen.Queries) error {
		res = Finished{}
		n, err := q.Finish(ctx, p)
		if err != nil {
			return err
		}
		if n == 0 {
			return leaseLost(l, "finish")
		}
		lanes := l.lanes
		if lanes == nil {
			row, err := q.GetLaneIdentity(ctx, l.WorkID)
			if err != nil {
				return fmt.Errorf("read lanes: %w", err)
			}
			lanes = &laneIdentity{scope: row.ScopeID, generation: row.Generation, ordinal: row.LaneOrdinal, source: row.SourceLaneKey, target: row.TargetLaneKey}
		}
		res.PromotedOrdinals, err = promoteAfter(ctx, q, lanes)
		return err
	})
	if errors.Is(err, ErrLeaseLost) {
		return Finished{}, leaseLost(l, "finish")
	}
	return res, err
}

// follower is the first blocked item behind a finished one in one lane.
type follower struct {
	workID, token, ordinal int64
	source, target         sql.NullString
}

func followers(rows []gen.NextBlockedInSourceLaneRow) []follower {
	out := make([]follower, len(rows))
	for i, r := range rows {
		out[i] = follower{r.WorkID, r.LeaseToken, r.LaneOrdinal, r.SourceLaneKey, r.TargetLaneKey}
	}
	return out
}

// promoteAfter promotes, for each lane the finished item leaves, the next
// blocked item of that lane if it now heads both of its lanes. In the lane it
// was found in it is the head already: the finished item headed that lane,
// everything before it is terminal, and every live item after a head is
// blocked. So only its other lane needs a look.
func promoteAfter(ctx context.Context, q *gen.Queries, finished *laneIdentity) ([]int64, error) {
	var viaSource, viaTarget []follower
	if finished.source.Valid {
		rows, err := q.NextBlockedInSourceLane(ctx, gen.NextBlockedInSourceLaneParams{
			ScopeID: finished.scope, Generation: finished.generation, LaneKey: finished.source, AfterOrdinal: finished.ordinal,
		})
		if err != nil {
			return nil, fmt.Errorf("next follower in source lane: %w", err)
		}
		viaSource = followers(rows)
	}
	if finished.target.Valid {
		rows, err := q.NextBlockedInTargetLane(ctx, gen.NextBlockedInTargetLaneParams{
			ScopeID: finished.scope, Generation: finished.generation, LaneKey: finished.target, AfterOrdinal: finished.ordinal,
		})
		if err != nil {
			return nil, fmt.Errorf("next follower in target lane: %w", err)
		}
		for _, r := range rows { // both statements select the same columns
			viaTarget = append(viaTarget, followers([]gen.NextBlockedInSourceLaneRow{gen.NextBlockedInSourceLaneRow(r)})...)
		}
	}
	var promoted []int64
	promote := func(fw follower, otherSource, otherTarget string) error {
		blocked, err := liveBefore(ctx, q, finished.scope, finished.generation, otherSource, otherTarget, fw.ordinal, false)
		if err != nil || blocked {
			return err // when blocked, the other lane's predecessor promotes it on finishing
		}
		n, err := q.PromoteBlocked(ctx, gen.PromoteBlockedParams{WorkID: fw.workID, LeaseToken: fw.token})
		if err != nil {
			return fmt.Errorf("promote work %d: %w", fw.workID, err)
		}
		if n == 1 {
			promoted = append(promoted, fw.ordinal)
		}
		return nil
	}
	for _, fw := range viaSource {
		other := fw.target.String
		if len(viaTarget) == 1 && viaTarget[0].workID == fw.workID {
			other = "" // found through both lanes: it heads both
		}
		if err := promote(fw, "", other); err != nil {
			return nil, err
		}
	}
	for _, fw := range viaTarget {
		if len(viaSource) == 1 && viaSource[0].workID == fw.workID {
			continue
		}
		if err := promote(fw, fw.source.String, ""); err != nil {
			return nil, err
		}
	}
	return promoted, nil
}

// NextWorkAt returns the scope's earliest strictly-future due time (a retry
// coming due or a lease expiring), by the database clock; ok is false when
// nothing is scheduled.
func (qu *Queue) NextWorkAt(ctx context.Context, scope string) (at time.Time, ok bool, err error) {
	next, ok, err := qu.nextWork(ctx, scope)
	return next.DueAt, ok, err
}

// NextWorkIn is NextWorkAt measured as a delay from the database's NOW(6),
// for arming a local timer without comparing two hosts' wall clocks.
func (qu *Queue) NextWorkIn(ctx context.Context, scope string) (in time.Duration, ok bool, err error) {
	next, ok, err := qu.nextWork(ctx, scope)
	return time.Duration(next.DelayMicros) * time.Microsecond, ok, err
}

func (qu *Queue) nextWork(ctx context.Context, scope string) (next gen.NextWorkAtRow, ok bool, err error) {
	if err := validScope(scope); err != nil {
		return next, false, err
	}
	rows, err := qu.q.NextWorkAt(ctx, gen.NextWorkAtParams{ScopeID: scope})
	if err != nil {
		return next, false, fmt.Errorf("workqueue: next work time of scope %q: %w", scope, err)
	}
	for _, r := range rows {
		if !ok || r.DueAt.Before(next.DueAt) {
			next, ok = r, true
		}
	}
	return next, ok, nil
}

// HasDueWork reports whether anything in the scope is claimable now: a due
// lane head or an expired lease. A hint; the claim path stays the authority.
func (qu *Queue) HasDueWork(ctx context.Context, scope string) (bool, error) {
	if err := validScope(scope); err != nil {
		return false, err
	}
	ids, err := qu.q.HasDueWork(ctx, gen.HasDueWorkParams{ScopeID: scope})
	if err != nil {
		return false, fmt.Errorf("workqueue: due-work hint of scope %q: %w", scope, err)
	}
	return len(ids) > 0, nil
}
