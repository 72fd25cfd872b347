package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
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

// FailureAttemptsExhausted is the failure class of an item sent to dead
// because its lease expired with its attempt budget spent.
const FailureAttemptsExhausted = "attempts_exhausted"

func leaseLost(l Lease, what string) error {
	return fmt.Errorf("%w: %s work %d with token %d", ErrLeaseLost, what, l.WorkID, l.Token)
}

// fencedWrite runs a lease-fenced statement that moves the row to endState
// with the next token (run returns the rows it matched), re-running it after
// transient errors (see Queue.retryWrite). When a run's reply was lost and a
// later run matches nothing, the row is read: at endState with the lease's
// token plus one, the lost run committed and the write succeeded; still
// held with a cancellation requested, the write was refused for that
// (*CancelRequestedError); otherwise the lease was lost.
func (qu *Queue) fencedWrite(ctx context.Context, l Lease, what, endState string, run func(ctx context.Context) (int64, error)) error {
	var replyLost bool
	return qu.retryWrite(ctx, fmt.Sprintf("%s work %d", what, l.WorkID), func(ctx context.Context) error {
		n, err := run(ctx)
		switch {
		case err != nil:
			replyLost = replyLost || !serverRejected(err)
			return err
		case n > 0:
			return nil
		case replyLost && qu.committedEarlier(ctx, l, endState):
			return nil
		}
		if cancelled := qu.cancelRequested(ctx, l); cancelled != nil {
			return cancelled // a give-back refused: the item must not run again
		}
		return leaseLost(l, what)
	})
}

// committedEarlier reports whether the row shows the write of a lease whose
// reply was lost: the state it wrote and the token it set.
func (qu *Queue) committedEarlier(ctx context.Context, l Lease, endState string) bool {
	row, err := qu.q.GetLeaseState(ctx, l.WorkID)
	return err == nil && row.State == endState && row.LeaseToken == l.Token+1
}

// Renew extends the lease by the configured lease duration from the
// database's clock. A renewal is idempotent, so one whose reply was lost is
// simply run again. An item whose cancellation was requested is not
// renewed: Renew returns a *CancelRequestedError (see Cancel).
func (qu *Queue) Renew(ctx context.Context, l Lease) error {
	return qu.retryWrite(ctx, fmt.Sprintf("renew work %d", l.WorkID), func(ctx context.Context) error {
		n, err := qu.q.RenewLease(ctx, gen.RenewLeaseParams{LeaseMicros: store.Micros(qu.cfg.Lease), WorkID: l.WorkID, LeaseToken: l.Token})
		if err == nil && n == 0 {
			if cancelled := qu.cancelRequested(ctx, l); cancelled != nil {
				return cancelled
			}
			return leaseLost(l, "renew")
		}
		return err
	})
}

// Hold extends the lease of an item whose holder told its handler to stop
// (a cancellation, a deadline, a shutdown) while the handler still runs:
// the item stays the holder's, its lanes blocked, until the handler
// returns, so nothing behind it and no other attempt of it starts while it
// may still act. Unlike Renew it renews an item whose cancellation was
// requested. ErrLeaseLost when the token no longer holds the row (another
// claimer took it over after the lease ran out, or it ended).
func (qu *Queue) Hold(ctx context.Context, l Lease) error {
	return qu.retryWrite(ctx, fmt.Sprintf("hold work %d", l.WorkID), func(ctx context.Context) error {
		n, err := qu.q.HoldLease(ctx, gen.HoldLeaseParams{LeaseMicros: store.Micros(qu.cfg.Lease), WorkID: l.WorkID, LeaseToken: l.Token})
		if err == nil && n == 0 {
			return leaseLost(l, "hold")
		}
		return err
	})
}

// RecordProgress marks durable forward progress within the attempt: the
// consecutive safe-retry series ends, in the database and in c, so a later
// failure of this attempt backs off from the start.
func (qu *Queue) RecordProgress(ctx context.Context, c *Claimed) error {
	err := qu.retryWrite(ctx, fmt.Sprintf("record progress of work %d", c.WorkID), func(ctx context.Context) error {
		n, err := qu.q.RecordProgress(ctx, gen.RecordProgressParams{WorkID: c.Lease.WorkID, LeaseToken: c.Lease.Token})
		if err == nil && n == 0 {
			return leaseLost(c.Lease, "record progress of")
		}
		return err
	})
	if err != nil {
		return err
	}
	c.SafeRetries = 0
	return nil
}

// Release hands the item back unexecuted, due now (drain, shutdown); the
// attempt does not count against its budget.
func (qu *Queue) Release(ctx context.Context, l Lease) error {
	began := time.Now()
	err := qu.releaseFor(ctx, l, 0)
	if err == nil {
		qu.announceLease(ctx, l, false, began)
	}
	return err
}

// releaseFor gives the item back unexecuted, due after delay (Release,
// Defer): one statement, ReleaseLease.
func (qu *Queue) releaseFor(ctx context.Context, l Lease, delay time.Duration) error {
	return qu.fencedWrite(ctx, l, "release", StatePending, func(ctx context.Context) (int64, error) {
		return qu.q.ReleaseLease(ctx, gen.ReleaseLeaseParams{DelayMicros: store.Micros(delay), WorkID: l.WorkID, LeaseToken: l.Token})
	})
}

// announceLease announces the scope of a leased item; a Lease built by
// hand does not know it, so its row is read (a primary-key point get),
// after the write committed: a caller whose context ended meanwhile still
// announces it, and one whose connection stops answering gives up after
// WriteTimeout (see detached).
func (qu *Queue) announceLease(ctx context.Context, l Lease, lookFar bool, began time.Time) {
	if l.lanes != nil && l.lanes.scope != "" {
		qu.announceSince(l.lanes.scope, lookFar, began)
		return
	}
	ctx, cancel := qu.detached(ctx)
	defer cancel()
	row, err := qu.q.GetLaneIdentity(ctx, l.WorkID)
	if err != nil {
		return // the receivers' probes find it (see Announcement)
	}
	qu.announceSince(row.ScopeID, lookFar, began)
}

// Retry schedules another attempt after the policy's backoff for the item's
// consecutive safe-retry count (Claimed.SafeRetries) and returns the delay.
func (qu *Queue) Retry(ctx context.Context, c Claimed, f Failure) (time.Duration, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	delay := qu.cfg.Retry.jittered(c.SafeRetries)
	began := time.Now()
	err := qu.fencedWrite(ctx, c.Lease, "retry", StatePending, func(ctx context.Context) (int64, error) {
		return qu.q.RetryLater(ctx, gen.RetryLaterParams{
			DelayMicros: store.Micros(delay), FailureClass: store.NullString(f.Class), FailureSummary: store.NullString(f.Summary),
			WorkID: c.Lease.WorkID, LeaseToken: c.Lease.Token,
		})
	})
	if err != nil {
		return 0, err
	}
	// Due later: a process that dies before then takes its due timer with
	// it, so the others look far enough to arm theirs.
	if c.Scope != "" {
		qu.announceSince(c.Scope, true, began)
	} else {
		qu.announceLease(ctx, c.Lease, true, began)
	}
	return delay, nil
}

// ErrPermanent marks a failure that retrying cannot fix; Fail sends such an
// item straight to dead.
var ErrPermanent = errors.New("workqueue: permanent failure")

// FailOutcome is what Fail did.
type FailOutcome struct {
	Dead     bool
	Finished Finished      // followers promoted by a dead item
	RetryIn  time.Duration // the backoff of a safe retry
}

// Fail records a failed attempt: dead when cause wraps ErrPermanent, the
// item already made RetryPolicy.MaxSafeRetries consecutive safe retries, or
// this was its last attempt (Config.MaxAttempts); otherwise a safe retry.
func (qu *Queue) Fail(ctx context.Context, c Claimed, f Failure, cause error) (FailOutcome, error) {
	if qu.failsForGood(c, cause) {
		fin, err := qu.Dead(ctx, c.Lease, f)
		return FailOutcome{Dead: true, Finished: fin}, err
	}
	delay, err := qu.Retry(ctx, c, f)
	return FailOutcome{RetryIn: delay}, err
}

// failsForGood decides Fail: permanent causes and exhausted retry series or
// attempt budgets end in dead.
func (qu *Queue) failsForGood(c Claimed, cause error) bool {
	limit := qu.cfg.Retry.MaxSafeRetries
	return errors.Is(cause, ErrPermanent) || (limit > 0 && c.SafeRetries >= limit) || c.Attempt >= qu.cfg.MaxAttempts
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
	// Promoted counts followers that became claimable lane heads.
	Promoted int
	// PromotionsUnknown is set when the finish committed in a run whose
	// reply was lost: followers may have been promoted.
	PromotionsUnknown bool
	// Taken counts followers the finish claimed for its own process
	// instead of promoting them (Claimer.CompleteManyTaking).
	Taken int
}

// readCommitted is the isolation of the finish and enqueue transactions:
// every statement reads the latest commit (TiDB keeps it pessimistic), so
// lane checks need no locks beyond the rows they lock explicitly.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// finish terminalizes the claimed row and, in the same transaction, hands
// a projection generation's place to its queued successor (which enters its
// lane blocked) and promotes the next follower of each of its lanes when
// that follower now heads both of its own lanes (promoteAfter, the lane
// path of lanes.go). Locks: the finished row (CAS), then the follower
// (locking read); the follower's other lane is read without a lock (see
// rowsAhead). An item in no lane has no followers: one autocommit CAS
// finishes it. Transient failures are run again (see Queue.retryWrite).
func (qu *Queue) finish(ctx context.Context, l Lease, state string, f *Failure) (Finished, error) {
	p := gen.FinishParams{TerminalState: state, WorkID: l.WorkID, LeaseToken: l.Token}
	if f != nil {
		p.FailureClass, p.FailureSummary = store.NullString(f.Class), store.NullString(f.Summary)
	}
	if l.lanes != nil && !l.lanes.source.Valid && !l.lanes.target.Valid {
		err := qu.fencedWrite(ctx, l, "finish", state, func(ctx context.Context) (int64, error) {
			return qu.q.Finish(ctx, p)
		})
		return Finished{}, err
	}
	var res Finished
	var replyLost bool
	var scope string
	began := time.Now()
	err := qu.inTx(ctx, fmt.Sprintf("finish work %d", l.WorkID), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		res = Finished{}
		n, err := q.Finish(ctx, p)
		if err != nil {
			return err
		}
		if n == 0 {
			if replyLost && qu.committedEarlier(ctx, l, state) {
				res.PromotionsUnknown = true
				return nil
			}
			return leaseLost(l, "finish")
		}
		lanes := l.lanes
		if lanes == nil {
			row, err := q.GetLaneIdentity(ctx, l.WorkID)
			if err != nil {
				return fmt.Errorf("read lanes: %w", err)
			}
			lanes = &laneIdentity{workID: l.WorkID, scope: row.ScopeID, generation: row.Generation, ordinal: row.LaneOrdinal,
				source: row.SourceLaneKey, target: row.TargetLaneKey, projection: row.ProjectionKey}
		}
		scope = lanes.scope
		if err := handOff(ctx, q, lanes); err != nil {
			return err
		}
		res.Promoted, err = promoteAfter(ctx, q, nil, lanes)
		replyLost = true // a failure from here on (the commit) may have committed
		return err
	})
	if err == nil && (res.Promoted > 0 || res.PromotionsUnknown) {
		if scope != "" {
			qu.announceSince(scope, false, began)
		} else {
			qu.announceLease(ctx, l, false, began)
		}
	}
	return res, err
}

// endExpired ends an expired lease that must not be taken over: dead when
// its attempt budget is spent, skipped (FailureCancelled) when its
// cancellation was requested, promoting its lane followers in the same
// transaction. A lost CAS (another
// claimer got there first) is not an error worth reporting: the row is
// handled either way.
func (qu *Queue) endExpired(ctx context.Context, r gen.StaleCandidatesRow) error {
	state, f := StateDead, Failure{Class: FailureAttemptsExhausted,
		Summary: fmt.Sprintf("lease expired after attempt %d of %d (the process running it stopped or stalled each time)", r.AttemptCount, qu.cfg.MaxAttempts)}
	if r.CancelReason.Valid {
		// Cancelled while running, and its holder never finished it (it died,
		// or its handler ignored the cancellation): it ends as cancelled.
		state, f = StateSkipped, cancelFailure(r.CancelReason.String)
	}
	lanes := &laneIdentity{workID: r.WorkID, generation: r.Generation, ordinal: r.LaneOrdinal, source: r.SourceLaneKey, target: r.TargetLaneKey}
	promoted, began := 0, time.Now()
	err := qu.inTx(ctx, fmt.Sprintf("end expired work %d as %s", r.WorkID, state), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		promoted = 0
		n, err := q.FinishExpired(ctx, gen.FinishExpiredParams{
			TerminalState: state, FailureClass: store.NullString(f.Class), FailureSummary: store.NullString(f.Summary), WorkID: r.WorkID, LeaseToken: r.LeaseToken,
		})
		if err != nil || n == 0 {
			return err
		}
		row, err := q.GetLaneIdentity(ctx, r.WorkID)
		if err != nil {
			return fmt.Errorf("read lanes: %w", err)
		}
		lanes.scope, lanes.projection = row.ScopeID, row.ProjectionKey
		if err := handOff(ctx, q, lanes); err != nil {
			return err
		}
		promoted, err = promoteAfter(ctx, q, nil, lanes)
		return err
	})
	if err == nil && promoted > 0 {
		qu.announceSince(lanes.scope, false, began)
	}
	return err
}

// nextWorkSpans are the spans, after the database's now, that a next-work
// lookup reads one at a time, nearest first, stopping at the first that
// holds anything: each statement's range holds one span of the not-due
// backlog, not all of it.
var nextWorkSpans = []time.Duration{time.Second, 8 * time.Second, 64 * time.Second, 512 * time.Second, 4096 * time.Second}

// farFuture ends the last next-work span: far enough for any delay, near
// enough for DATE_ADD to stay within DATETIME's range.
const farFuture = 100 * 365 * 24 * time.Hour

// NextDue is the earliest strictly-future due time found by a next-work
// lookup: when, by the database clock, and how far that is from the
// database's now.
type NextDue struct {
	At time.Time
	In time.Duration
}

// NextWorkAt returns the scope's earliest strictly-future due time (a retry
// or delayed item coming due, or a lease expiring), by the database clock;
// ok is false when nothing is scheduled.
func (qu *Queue) NextWorkAt(ctx context.Context, scope string) (at time.Time, ok bool, err error) {
	next, ok, err := qu.NextWorkWithin(ctx, scope, 0)
	return next.At, ok, err
}

// NextWorkWithin is NextWorkAt looking no further than horizon past the
// database's now (0: no limit); a worker whose reconciliation backstop
// looks again later passes its period. The lookup reads spans of growing
// width, nearest first (1s, 8s, 64s, ...), and stops at the first span that
// holds a due time, so its cost follows how soon work is due, not how much
// is scheduled.
func (qu *Queue) NextWorkWithin(ctx context.Context, scope string, horizon time.Duration) (NextDue, bool, error) {
	return qu.NextWorkSince(ctx, scope, 0, horizon)
}

// MaxLookBack bounds NextWorkSince's lookBack: the first span then reads at
// most that much of what came due, whatever lies behind it.
const MaxLookBack = 5 * time.Second

// LookBackSlack widens a claimer's look-back (LookBackSince). The look-back
// is measured on the host just before the lookup is sent, but the lookup
// subtracts it from the NOW(6) the database reads when the statement runs:
// later by however long the statement took to get there (a pool
// connection, a busy machine, a slow network: hundreds of milliseconds
// beside two CPU hogs). A lease that ran out in that gap, after the turn's
// scan read it live, would fall before the window and be reported by no
// lookup (fresh-clone CI caught a router waiting an hour-long backstop for
// one). The slack is far more than such a delay and far less than
// MaxLookBack.
const LookBackSlack = time.Second

// LookBackSince is the lookBack a claimer whose last claim turn began at
// began (real time; zero: none yet) passes to its next-work lookup: the
// time since then plus LookBackSlack, at most MaxLookBack. A lease expiry
// it reports may lie up to the slack before the turn began; a claimer that
// does not take every expired lease it is shown (a worker serving some
// classes) reports such a repeat once more at most (see the worker's
// NextWorkAt).
func LookBackSince(began time.Time) time.Duration {
	if began.IsZero() {
		return 0
	}
	return min(time.Since(began)+LookBackSlack, MaxLookBack)
}

// NextWorkSince is NextWorkWithin that also reports a lease that expired
// up to lookBack (at most MaxLookBack) before the database's now, with
// In <= 0: a claimer passes the time since its last claim turn began, so a
// lease that ran out between that turn's reads and this lookup (a dead
// process's lease, read live a moment before) is reclaimed at once instead
// of waiting for a probe; nobody announces it. Pending rows that came due
// meanwhile are not looked back for: whoever made them due announced them
// (see Announcement). Each such expiry lies before the next turn, so a
// claimer that looks back only to its last turn hears of it once.
func (qu *Queue) NextWorkSince(ctx context.Context, scope string, lookBack, horizon time.Duration) (NextDue, bool, error) {
	if err := validScope(scope); err != nil {
		return NextDue{}, false, err
	}
	if horizon < 0 {
		return NextDue{}, false, invalidf("horizon must not be negative, got %s", horizon)
	}
	if lookBack < 0 || lookBack > MaxLookBack {
		return NextDue{}, false, invalidf("lookBack must be within 0..%s, got %s", MaxLookBack, lookBack)
	}
	var from time.Duration
	for i := 0; i <= len(nextWorkSpans); i++ {
		until := farFuture
		if i < len(nextWorkSpans) {
			until = nextWorkSpans[i]
		}
		if horizon > 0 && until >= horizon {
			until = horizon
		}
		leaseFrom := from
		if i == 0 {
			leaseFrom = -lookBack
		}
		rows, err := qu.q.NextWorkAt(ctx, gen.NextWorkAtParams{ScopeID: scope, FromMicros: store.Micros(from), LeaseFromMicros: store.Micros(leaseFrom), UntilMicros: store.Micros(until)})
		if err != nil {
			return NextDue{}, false, fmt.Errorf("workqueue: next work time of scope %q: %w", scope, err)
		}
		var next NextDue
		for _, r := range rows {
			if next.At.IsZero() || r.DueAt.Before(next.At) {
				next = NextDue{At: r.DueAt, In: time.Duration(r.DelayMicros) * time.Microsecond}
			}
		}
		if !next.At.IsZero() {
			return next, true, nil
		}
		if until == horizon || until == farFuture {
			break
		}
		from = until
	}
	return NextDue{}, false, nil
}
