package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
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
// token plus one, the lost run committed and the write succeeded; otherwise
// the lease was lost.
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
// simply run again.
func (qu *Queue) Renew(ctx context.Context, l Lease) error {
	return qu.retryWrite(ctx, fmt.Sprintf("renew work %d", l.WorkID), func(ctx context.Context) error {
		n, err := qu.q.RenewLease(ctx, gen.RenewLeaseParams{LeaseMicros: micros(qu.cfg.Lease), WorkID: l.WorkID, LeaseToken: l.Token})
		if err == nil && n == 0 {
			return leaseLost(l, "renew")
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
	return qu.fencedWrite(ctx, l, "release", StatePending, func(ctx context.Context) (int64, error) {
		return qu.q.ReleaseLease(ctx, gen.ReleaseLeaseParams{WorkID: l.WorkID, LeaseToken: l.Token})
	})
}

// Retry schedules another attempt after the policy's backoff for the item's
// consecutive safe-retry count (Claimed.SafeRetries) and returns the delay.
func (qu *Queue) Retry(ctx context.Context, c Claimed, f Failure) (time.Duration, error) {
	if err := f.validate(); err != nil {
		return 0, err
	}
	delay := qu.cfg.Retry.jittered(c.SafeRetries)
	err := qu.fencedWrite(ctx, c.Lease, "retry", StatePending, func(ctx context.Context) (int64, error) {
		return qu.q.RetryLater(ctx, gen.RetryLaterParams{
			DelayMicros: micros(delay), FailureClass: nullString(f.Class), FailureSummary: nullString(f.Summary),
			WorkID: c.Lease.WorkID, LeaseToken: c.Lease.Token,
		})
	})
	if err != nil {
		return 0, err
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
}

// readCommitted is the isolation of the finish and enqueue transactions:
// every statement reads the latest commit (TiDB keeps it pessimistic), so
// lane checks need no locks beyond the rows they lock explicitly.
var readCommitted = &sql.TxOptions{Isolation: sql.LevelReadCommitted}

// finish terminalizes the claimed row and, in the same transaction, hands
// a projection generation's place to its queued successor (which enters its
// lane blocked) and promotes the next follower of each of its lanes when
// that follower now heads both of its own lanes. Locks: the finished row (CAS), then the
// follower (locking read); the follower's other lane is read without a lock
// (see HeadBefore). An item in no lane has no followers: one autocommit CAS
// finishes it. Transient failures are run again (see Queue.retryWrite).
func (qu *Queue) finish(ctx context.Context, l Lease, state string, f *Failure) (Finished, error) {
	p := gen.FinishParams{TerminalState: state, WorkID: l.WorkID, LeaseToken: l.Token}
	if f != nil {
		p.FailureClass, p.FailureSummary = nullString(f.Class), nullString(f.Summary)
	}
	if l.lanes != nil && !l.lanes.source.Valid && !l.lanes.target.Valid {
		err := qu.fencedWrite(ctx, l, "finish", state, func(ctx context.Context) (int64, error) {
			return qu.q.Finish(ctx, p)
		})
		return Finished{}, err
	}
	var res Finished
	var replyLost bool
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
			lanes = &laneIdentity{scope: row.ScopeID, generation: row.Generation, ordinal: row.LaneOrdinal,
				source: row.SourceLaneKey, target: row.TargetLaneKey, projection: row.ProjectionKey}
		}
		if err := handOff(ctx, q, lanes); err != nil {
			return err
		}
		res.Promoted, err = promoteAfter(ctx, q, lanes, nil)
		replyLost = true // a failure from here on (the commit) may have committed
		return err
	})
	return res, err
}

// expireToDead sends an expired lease whose attempt budget is spent to dead,
// promoting its lane followers in the same transaction. A lost CAS (another
// claimer got there first) is not an error worth reporting: the row is
// handled either way.
func (qu *Queue) expireToDead(ctx context.Context, r gen.StaleCandidatesRow) error {
	f := Failure{Class: FailureAttemptsExhausted,
		Summary: fmt.Sprintf("lease expired after attempt %d of %d (the process running it stopped or stalled each time)", r.AttemptCount, qu.cfg.MaxAttempts)}
	lanes := &laneIdentity{generation: r.Generation, ordinal: r.LaneOrdinal, source: r.SourceLaneKey, target: r.TargetLaneKey}
	return qu.inTx(ctx, fmt.Sprintf("expire work %d to dead", r.WorkID), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		n, err := q.FinishExpired(ctx, gen.FinishExpiredParams{
			FailureClass: nullString(f.Class), FailureSummary: nullString(f.Summary), WorkID: r.WorkID, LeaseToken: r.LeaseToken,
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
		_, err = promoteAfter(ctx, q, lanes, nil)
		return err
	})
}

// follower is the first blocked item behind a finished one in one lane.
type follower struct {
	workID, token, ordinal int64
	source, target         sql.NullString
}

// followerWindow is the first ordinal window a finisher searches for the
// next follower of a lane: a lane's followers are usually close behind its
// head (within a thousand admissions of the scope), and a window keeps a
// lane of thousands of followers from costing a read of every one (the
// embedded engine reads every live entry of a range). When it finds none,
// one unbounded statement reads on. Measured on the two-process end-to-end
// test (lanes of 5 whose items sit 1,000 ordinals apart): a 64-ordinal
// window cost a second statement per finish and about 15% of throughput.
const followerWindow = 1024

// nextFollower finds the first blocked row after `after` in one lane.
func nextFollower(ctx context.Context, q *gen.Queries, lanes *laneIdentity, target bool, after int64) (*follower, error) {
	for _, until := range []int64{after + followerWindow, math.MaxInt64} {
		var rows []gen.NextBlockedInSourceLaneRow
		var err error
		if target {
			var t []gen.NextBlockedInTargetLaneRow
			t, err = q.NextBlockedInTargetLane(ctx, gen.NextBlockedInTargetLaneParams{
				ScopeID: lanes.scope, Generation: lanes.generation, LaneKey: lanes.target, AfterOrdinal: after, UntilOrdinal: until,
			})
			for _, r := range t { // both statements select the same columns
				rows = append(rows, gen.NextBlockedInSourceLaneRow(r))
			}
		} else {
			rows, err = q.NextBlockedInSourceLane(ctx, gen.NextBlockedInSourceLaneParams{
				ScopeID: lanes.scope, Generation: lanes.generation, LaneKey: lanes.source, AfterOrdinal: after, UntilOrdinal: until,
			})
		}
		if err != nil {
			return nil, err
		}
		if len(rows) > 0 {
			r := rows[0]
			return &follower{r.WorkID, r.LeaseToken, r.LaneOrdinal, r.SourceLaneKey, r.TargetLaneKey}, nil
		}
	}
	return nil, nil
}

// promotions collects, for a transaction that finishes several items
// (CompleteMany), the followers to promote, so that one statement
// (PromoteBlockedBatch) writes them at the end; meanwhile the lanes they
// will head are known here. A follower found in, or also in, such a lane is
// behind the head chosen for it (a row chosen heads its lanes: every
// blocked row before it in them was checked), so it stays blocked.
type promotions struct {
	headed map[laneRef]bool
	ids    []int64
}

func newPromotions() *promotions { return &promotions{headed: map[laneRef]bool{}} }

// behindChosen reports whether fw is in a lane a chosen follower will head.
func (p *promotions) behindChosen(fw *follower) bool {
	return slices.ContainsFunc(fw.lanes(), func(l laneRef) bool { return p.headed[l] })
}

func (p *promotions) choose(fw *follower) {
	p.ids = append(p.ids, fw.workID)
	for _, l := range fw.lanes() {
		p.headed[l] = true
	}
}

// lanes are the lanes fw is in.
func (fw *follower) lanes() []laneRef {
	return lanedItem{source: fw.source.String, target: fw.target.String}.lanes()
}

// write promotes the chosen followers, all still locked by this
// transaction, and returns how many it promoted.
func (p *promotions) write(ctx context.Context, q *gen.Queries) (int, error) {
	if len(p.ids) == 0 {
		return 0, nil
	}
	n, err := q.PromoteBlockedBatch(ctx, p.ids)
	if err != nil {
		return 0, fmt.Errorf("promote %d followers: %w", len(p.ids), err)
	}
	if n != int64(len(p.ids)) {
		// Each was read blocked under this transaction's lock.
		return 0, fmt.Errorf("promote %d locked followers: %d were blocked", len(p.ids), n)
	}
	return len(p.ids), nil
}

// promoteAfter promotes, for each lane the finished item leaves, the next
// blocked item of that lane if it now heads both of its lanes, and returns
// how many it promoted. In the lane it was found in it is the head already:
// the finished item headed that lane, everything before it is terminal, and
// every live item after a head is blocked. So only its other lane needs a
// look.
//
// With batch (a transaction finishing several items, every one of them
// already terminal), followers are chosen into batch instead of promoted
// at once, and one behind a follower already chosen stays blocked (see
// promotions); the count returned is then 0. Nil for a single finish.
func promoteAfter(ctx context.Context, q *gen.Queries, finished *laneIdentity, batch *promotions) (int, error) {
	var viaSource, viaTarget *follower
	var err error
	if finished.source.Valid {
		if viaSource, err = nextFollower(ctx, q, finished, false, finished.ordinal); err != nil {
			return 0, fmt.Errorf("next follower in source lane: %w", err)
		}
	}
	if finished.target.Valid {
		if viaTarget, err = nextFollower(ctx, q, finished, true, finished.ordinal); err != nil {
			return 0, fmt.Errorf("next follower in target lane: %w", err)
		}
	}
	promoted := 0
	promote := func(fw *follower, otherSource, otherTarget sql.NullString) error {
		if batch != nil && batch.behindChosen(fw) {
			return nil // the chosen follower's finish promotes it
		}
		blocked, err := liveBefore(ctx, q, finished.scope, finished.generation, otherSource, otherTarget, fw.ordinal)
		if err != nil || blocked {
			return err // when blocked, the other lane's predecessor promotes it on finishing
		}
		if batch != nil {
			batch.choose(fw)
			return nil
		}
		n, err := q.PromoteBlocked(ctx, gen.PromoteBlockedParams{WorkID: fw.workID, LeaseToken: fw.token})
		if err != nil {
			return fmt.Errorf("promote work %d: %w", fw.workID, err)
		}
		promoted += int(n)
		return nil
	}
	both := viaSource != nil && viaTarget != nil && viaSource.workID == viaTarget.workID
	if viaSource != nil {
		other := viaSource.target
		if both {
			other = sql.NullString{} // found through both lanes: it heads both
		}
		if err := promote(viaSource, sql.NullString{}, other); err != nil {
			return 0, err
		}
	}
	if viaTarget != nil && !both {
		if err := promote(viaTarget, viaTarget.source, sql.NullString{}); err != nil {
			return 0, err
		}
	}
	return promoted, nil
}

// liveBefore reports whether the given lanes (an invalid NullString: no such
// lane to check) hold a live item ahead of ordinal: a head, or, in a lane
// with no head, a blocked row. Plain reads for the READ COMMITTED finish
// transaction (see HeadBefore), each at its own latest commit: a row ahead
// that another finisher promotes between the head read and the blocked
// read is seen by neither. Rows never go back to blocked, so heads are read
// again after the blocked read: a row live at the blocked read and not
// blocked then is a head at the second read, or has finished (and ran
// first). The common case, a lane with a head, stays one statement; the
// third is paid only when the follower is about to be promoted
// (TestPromotionSeesARowPromotedBetweenItsReads).
func liveBefore(ctx context.Context, q *gen.Queries, scope string, generation int64, source, target sql.NullString, ordinal int64) (bool, error) {
	if !source.Valid && !target.Valid {
		return false, nil
	}
	headAhead := func() (bool, error) {
		heads, err := q.HeadBefore(ctx, gen.HeadBeforeParams{ScopeID: scope, Generation: generation, SourceLane: source, TargetLane: target, BeforeOrdinal: ordinal})
		if err != nil {
			return false, fmt.Errorf("probe lane heads: %w", err)
		}
		return len(heads) > 0, nil
	}
	if live, err := headAhead(); live || err != nil {
		return live, err
	}
	blocked, err := q.BlockedBefore(ctx, gen.BlockedBeforeParams{ScopeID: scope, Generation: generation, SourceLane: source, TargetLane: target, BeforeOrdinal: ordinal})
	if err != nil {
		return false, fmt.Errorf("probe blocked rows: %w", err)
	}
	if len(blocked) > 0 {
		return true, nil
	}
	return headAhead()
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
	if err := validScope(scope); err != nil {
		return NextDue{}, false, err
	}
	if horizon < 0 {
		return NextDue{}, false, invalidf("horizon must not be negative, got %s", horizon)
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
		rows, err := qu.q.NextWorkAt(ctx, gen.NextWorkAtParams{ScopeID: scope, FromMicros: micros(from), UntilMicros: micros(until)})
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
