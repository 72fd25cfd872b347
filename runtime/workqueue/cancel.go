package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/laneq/laneq/gen"
)

// Cancelling an item (issue 39). An item no process holds ends at once; a
// running one is told through its holder's next heartbeat, and its holder's
// fenced finish ends it. Either way it ends skipped with FailureCancelled,
// its lanes move on and a projection's successor takes its place, as for
// every terminal state.
//
// The request on a running row (cancel_reason, RequestCancel) is what every
// later step keys on:
//   - renewals match no row that carries it, and their read-back returns it
//     (*CancelRequestedError), so the worker cancels the handler's context
//     and from then on holds the row (Hold, HoldLease) until the handler
//     returns: the item, and its lanes, stay its holder's while the
//     handler may still act, whether it honours the cancellation or not;
//   - a retry, a release or a dependency wait of it matches nothing (it would
//     run again), and returns the same error, so the holder ends it
//     cancelled instead (FinishCancelled);
//   - a claimer that finds its lease expired (its process died, froze or
//     lost the database) ends it cancelled rather than taking it over
//     (FinishExpired).
//
// A handler that returns success after the request still completes the
// item: its work was done, and the record says so.

// FailureCancelled is the failure class of a cancelled item (state skipped).
const FailureCancelled = "cancelled"

// ErrCancelRequested is wrapped by the error a lease-fenced call returns when
// the item's cancellation was requested while the lease was held: the
// holder should stop its handler and end the item with FinishCancelled.
// Every such error is a *CancelRequestedError.
var ErrCancelRequested = errors.New("workqueue: cancellation requested")

// CancelRequestedError reports a cancellation request found by a holder's
// renewal or give-back.
type CancelRequestedError struct {
	WorkID int64
	Reason string // the operator's reason; empty when none was given
}

func (e *CancelRequestedError) Error() string {
	if e.Reason == "" {
		return fmt.Sprintf("workqueue: cancellation of work %d requested", e.WorkID)
	}
	return fmt.Sprintf("workqueue: cancellation of work %d requested: %s", e.WorkID, e.Reason)
}

func (e *CancelRequestedError) Unwrap() error { return ErrCancelRequested }

// cancelFailure is what a cancelled item records.
func cancelFailure(reason string) Failure {
	summary := "cancelled by an operator"
	if reason != "" {
		summary += ": " + reason
	}
	return Failure{Class: FailureCancelled, Summary: summary}
}

// CancelOutcome is what Cancel did.
type CancelOutcome struct {
	// Running is set when the item was running: the cancellation is
	// recorded and its process is told at its next heartbeat (within the
	// worker's HeartbeatEvery); the item ends when its handler returns,
	// however long a handler that ignores its context takes, and its lane
	// followers start only then.
	// Otherwise the item ended skipped at once.
	Running bool
	// Finished reports the lane followers an immediate cancel promoted.
	Finished Finished
}

// Cancel cancels an item of scope, recording reason (at most 1,000 bytes of
// UTF-8; may be empty). A pending, blocked or waiting item ends skipped with
// FailureCancelled at once, in a transaction that hands its lanes and
// projection over (as SkipUnclaimed). A running item is marked: its holder
// learns of it at its next heartbeat, its handler's context is cancelled
// (context.Cause wraps ErrCancelRequested), and its fenced finish ends it
// skipped with FailureCancelled, unless the handler returns success first.
// Cancelling a running item again changes nothing and reports Running. It
// refuses (ErrRefused) a terminal item, and one between the two
// transactions of entering a dependency wait (try again).
func (qu *Queue) Cancel(ctx context.Context, scope string, workID int64, reason string) (CancelOutcome, error) {
	if err := validScope(scope); err != nil {
		return CancelOutcome{}, err
	}
	if err := validReason(reason); err != nil {
		return CancelOutcome{}, err
	}
	var out CancelOutcome
	err := qu.actOnItem(ctx, scope, workID, "cancel", StateSkipped, func(ctx context.Context, q *gen.Queries, it gen.LockWorkItemForActionRow) error {
		out = CancelOutcome{}
		switch it.State {
		case StatePending, StateBlocked, StateWaitingDependency:
			fin, err := endUnclaimed(ctx, q, scope, it, cancelFailure(reason))
			out.Finished = fin
			return err
		case StateProcessing:
			out.Running = true
			if it.CancelReason.Valid {
				return nil // requested before (or by a run whose reply was lost)
			}
			// Never NULL, even without a reason: NULL means no request.
			n, err := q.RequestCancel(ctx, gen.RequestCancelParams{CancelReason: sql.NullString{String: reason, Valid: true}, WorkID: workID, LeaseToken: it.LeaseToken})
			if err != nil {
				return fmt.Errorf("request cancellation: %w", err)
			}
			if n != 1 { // the row is locked and was seen processing with this token
				return fmt.Errorf("request cancellation: matched %d rows under its lock", n)
			}
			return nil
		case StateDependencyRegistration:
			return fmt.Errorf("%w: work item %d is entering a dependency wait; cancel it again in a moment", ErrRefused, workID)
		default:
			return fmt.Errorf("%w: work item %d is %s: cancel applies to an item that has not ended", ErrRefused, workID, it.State)
		}
	}, &out.Finished)
	return out, err
}

// FinishCancelled ends a held item whose cancellation was requested (its
// holder learned of it from a *CancelRequestedError): skipped with
// FailureCancelled and reason, through the fenced finish that hands its
// lanes and projection over.
func (qu *Queue) FinishCancelled(ctx context.Context, l Lease, reason string) (Finished, error) {
	f := cancelFailure(reason)
	return qu.finish(ctx, l, StateSkipped, &f)
}

// cancelRequested reads the row of a lease whose fenced write matched
// nothing and returns a *CancelRequestedError when the lease still holds it
// and its cancellation was requested (the write was refused for that), nil
// otherwise. The read gets a WriteTimeout of its own (see detached), not
// what the write left of its run: a slow write must not cut the read short
// and report a cancelled item's lease lost.
func (qu *Queue) cancelRequested(ctx context.Context, l Lease) error {
	ctx, cancel := qu.detached(ctx)
	defer cancel()
	row, err := qu.q.GetLeaseState(ctx, l.WorkID)
	if err != nil {
		return nil // the caller reports the lease lost; a renewal or the stale path finds the request
	}
	return cancelRequestedIn(l, row.State, row.LeaseToken, row.CancelReason)
}

// cancelRequestedIn is cancelRequested on a row already read.
func cancelRequestedIn(l Lease, state string, token int64, reason sql.NullString) error {
	if state == StateProcessing && token == l.Token && reason.Valid {
		return &CancelRequestedError{WorkID: l.WorkID, Reason: reason.String}
	}
	return nil
}
