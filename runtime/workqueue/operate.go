package workqueue

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// Operator actions: what the laneq command and the dashboard's write
// actions run (queries/operate.sql). Each refuses, with ErrRefused and the
// reason, when the item's state no longer allows it, and writes nothing
// then; each that makes work claimable announces the scope after its
// commit, as every write of this package does (announce.go).

// ErrRefused reports an operator action the item's (or scope's) current
// state does not allow: retry-now of an item that is running or already
// due, a skip of an item a process holds or that is terminal. Nothing was
// written; the error says what the state is.
var ErrRefused = errors.New("workqueue: refused")

// FailureSkippedByOperator is the failure class SkipUnclaimed records.
const FailureSkippedByOperator = "skipped_by_operator"

// lockForAction reads the item under its row lock and checks it belongs to
// scope.
func lockForAction(ctx context.Context, q *gen.Queries, scope string, workID int64) (gen.LockWorkItemForActionRow, error) {
	it, err := q.LockWorkItemForAction(ctx, workID)
	if errors.Is(err, sql.ErrNoRows) || err == nil && it.ScopeID != scope {
		return it, fmt.Errorf("%w: scope %q has no work item %d", ErrRefused, scope, workID)
	}
	if err != nil {
		return it, fmt.Errorf("lock work item %d: %w", workID, err)
	}
	return it, nil
}

// RetryNow makes a pending item that is not due yet (a retry in backoff, a
// delayed item) due at once, keeping its attempts and failure budget, and
// announces it so a worker claims it now. It refuses (ErrRefused) an item
// in any other state: one already due waits only for a claim, a running one
// is held by its process, a blocked one waits for its lane, a terminal one
// is done (replay a dead one).
func (qu *Queue) RetryNow(ctx context.Context, scope string, workID int64) error {
	if err := validScope(scope); err != nil {
		return err
	}
	began := time.Now()
	var done bool
	err := qu.inTx(ctx, fmt.Sprintf("retry work %d now", workID), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		it, err := lockForAction(ctx, q, scope, workID)
		if err != nil {
			return err
		}
		if done && it.State == StatePending && it.NotDue == 0 {
			return nil // an earlier run committed; its reply was lost
		}
		if it.State != StatePending || it.NotDue == 0 {
			return fmt.Errorf("%w: work item %d is %s: retry-now applies to a pending item that is not due yet", ErrRefused, workID, describeState(it))
		}
		n, err := q.RetryNow(ctx, workID)
		if err != nil {
			return fmt.Errorf("retry now: %w", err)
		}
		if n != 1 { // the row is locked and was seen pending and not due
			return fmt.Errorf("retry now: matched %d rows under its lock", n)
		}
		done = true // a failure from here on (the commit) may have committed
		return nil
	})
	if err != nil {
		return err
	}
	qu.announceSince(scope, false, began)
	return nil
}

// describeState says an item's state for a refusal.
func describeState(it gen.LockWorkItemForActionRow) string {
	switch {
	case it.State == StatePending && it.NotDue == 0:
		return "pending and already due"
	case it.State == StatePending:
		return "pending until " + it.RunAfter.UTC().Format(time.RFC3339Nano)
	default:
		return it.State
	}
}

// SkipUnclaimed ends an item no process holds (pending, blocked behind its
// lane, or waiting for a dependency) as skipped, recording reason (at most
// 1,000 bytes; "skipped by an operator" when empty), and in the same
// transaction hands its lanes to their next followers and a projection's
// place to its queued successor, as a finish does. Whatever that made
// claimable is announced. It refuses (ErrRefused) an item that is
// processing (its handler runs; the lease is its process's: Cancel tells
// it), terminal, or an inactive projection successor (skip the active
// generation instead).
func (qu *Queue) SkipUnclaimed(ctx context.Context, scope string, workID int64, reason string) (Finished, error) {
	if err := validScope(scope); err != nil {
		return Finished{}, err
	}
	if err := validReason(reason); err != nil {
		return Finished{}, err
	}
	summary := "skipped by an operator"
	if reason != "" {
		summary += ": " + reason
	}
	var res Finished
	err := qu.actOnItem(ctx, scope, workID, "skip", StateSkipped, func(ctx context.Context, q *gen.Queries, it gen.LockWorkItemForActionRow) error {
		switch it.State {
		case StatePending, StateBlocked, StateWaitingDependency:
		default:
			return fmt.Errorf("%w: work item %d is %s: skip applies to a pending, blocked or waiting item", ErrRefused, workID, it.State)
		}
		var err error
		res, err = endUnclaimed(ctx, q, scope, it, Failure{Class: FailureSkippedByOperator, Summary: summary})
		return err
	}, &res)
	return res, err
}

// validReason checks an operator's reason: at most 1,000 bytes of UTF-8
// (it is stored in a utf8mb4 column, which refuses other bytes).
func validReason(reason string) error {
	if len(reason) > 1000 {
		return invalidf("reason must be at most 1000 bytes, got %d", len(reason))
	}
	if !utf8.ValidString(reason) {
		return invalidf("reason must be UTF-8")
	}
	return nil
}

// actOnItem runs an operator action on one item in a READ COMMITTED
// transaction, retried after transient errors: act gets the item under its
// row lock (lockForAction) and writes. A run whose reply was lost after act
// wrote is recognised by its item's state on the next run (done: the state
// the action leaves, with an earlier run's write committed), which then
// reports PromotionsUnknown in res instead of refusing. Whatever the action
// made claimable (res) is announced after the commit.
func (qu *Queue) actOnItem(ctx context.Context, scope string, workID int64, what, done string,
	act func(ctx context.Context, q *gen.Queries, it gen.LockWorkItemForActionRow) error, res *Finished,
) error {
	var replyLost bool
	began := time.Now()
	err := qu.inTx(ctx, fmt.Sprintf("%s work %d", what, workID), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		*res = Finished{}
		it, err := lockForAction(ctx, q, scope, workID)
		if err != nil {
			return err
		}
		if replyLost && it.State == done {
			res.PromotionsUnknown = true // an earlier run committed; its reply was lost
			return nil
		}
		err = act(ctx, q, it)
		replyLost = true // a failure from here on (the commit) may have committed
		return err
	})
	if err == nil && (res.Promoted > 0 || res.PromotionsUnknown) {
		qu.announceSince(scope, false, began)
	}
	return err
}

// endUnclaimed ends an item no process holds (read under its lock, in a
// skippable state) as skipped with f, hands a projection's place to its
// queued successor and promotes the followers it leaves in its lanes, all in
// the caller's transaction.
func endUnclaimed(ctx context.Context, q *gen.Queries, scope string, it gen.LockWorkItemForActionRow, f Failure) (Finished, error) {
	n, err := q.SkipUnclaimed(ctx, gen.SkipUnclaimedParams{
		FailureClass: store.NullString(f.Class), FailureSummary: store.NullString(f.Summary), WorkID: it.WorkID,
	})
	if err != nil {
		return Finished{}, fmt.Errorf("skip: %w", err)
	}
	if n != 1 { // the row is locked and was seen in a skippable state
		return Finished{}, fmt.Errorf("skip: matched %d rows under its lock", n)
	}
	lanes := &laneIdentity{workID: it.WorkID, scope: scope, generation: it.Generation, ordinal: it.LaneOrdinal,
		source: it.SourceLaneKey, target: it.TargetLaneKey}
	if it.ProjectionActiveKey.Valid {
		lanes.projection = it.ProjectionKey
	}
	if err := handOff(ctx, q, lanes); err != nil {
		return Finished{}, err
	}
	promoted, err := promoteBehind(ctx, q, lanes)
	return Finished{Promoted: promoted}, err
}

// promoteBehind promotes the next follower of each lane a skipped row
// leaves when nothing live is ahead of it in either of its lanes. Unlike a
// finished head's (promoteAfter), a skipped row may have been a follower
// itself, with a live head still ahead in the lane its follower was found
// through: each follower is therefore asked about both of its lanes, not
// only the lanes it was not found through. The locks are a finish's: the
// skipped row, then each follower (nextFollower); the rows ahead are read
// without locks (rowsAhead), so a skip never waits for a head whose
// finisher waits for the skipped row. A follower is locked, so a head
// that finishes meanwhile waits for this commit and then sees the skip.
func promoteBehind(ctx context.Context, q *gen.Queries, skipped *laneIdentity) (int, error) {
	var followers []*follower
	for _, lane := range lanesOf(skipped.source.String, skipped.target.String) {
		fw, err := nextFollower(ctx, q, skipped, lane)
		if err != nil {
			return 0, err
		}
		if fw != nil && !slices.ContainsFunc(followers, func(f *follower) bool { return f.workID == fw.workID }) {
			followers = append(followers, fw)
		}
	}
	var asks []laneAsk
	for _, fw := range followers {
		for _, l := range lanesOf(fw.source, fw.target) {
			asks = append(asks, laneAsk{fw.workID, l.kind})
		}
	}
	ahead, err := rowsAhead(ctx, q, asks)
	if err != nil {
		return 0, err
	}
	var heads []int64
	for _, fw := range followers {
		head := true
		for _, l := range lanesOf(fw.source, fw.target) {
			head = head && ahead[laneAsk{fw.workID, l.kind}] == 0
		}
		if head {
			heads = append(heads, fw.workID)
		}
	}
	return promoteHeads(ctx, q, heads, true)
}

// PauseClass pauses a queue class of scope: from their next claim turn, no
// process claims its work or takes over its expired leases (a lease
// running out stays expired until the class is resumed); items already
// running finish as usual. Durable and idempotent. Claimers read it on the
// scope read every claim turn and probe already makes, so pausing costs
// them no statement.
func (qu *Queue) PauseClass(ctx context.Context, scope, class string) error {
	_, err := qu.setPaused(ctx, scope, class, true)
	return err
}

// ResumeClass undoes PauseClass and announces the scope, so workers claim
// the class's due work, and take over the leases that ran out meanwhile,
// at once. Resuming a class that is not paused
// changes nothing.
func (qu *Queue) ResumeClass(ctx context.Context, scope, class string) error {
	changed, err := qu.setPaused(ctx, scope, class, false)
	if err == nil && changed {
		// Rewind: the class's leases that ran out while it was paused lie
		// behind every stale floor; a rewind makes the next claim turn
		// look for expired leases from the front.
		qu.send(Announcement{Scope: scope, LookFar: true, Rewind: true})
	}
	return err
}

// PausedClasses returns the scope's paused classes, sorted.
func (qu *Queue) PausedClasses(ctx context.Context, scope string) ([]string, error) {
	if err := validScope(scope); err != nil {
		return nil, err
	}
	sc, err := qu.q.GetScope(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return nil, fmt.Errorf("workqueue: read scope %q: %w", scope, err)
	}
	return ParsePausedClasses(sc.PausedClasses)
}

func (qu *Queue) setPaused(ctx context.Context, scope, class string, pause bool) (changed bool, err error) {
	if err := validScope(scope); err != nil {
		return false, err
	}
	if err := ValidQueueClass(class); err != nil {
		return false, err
	}
	err = qu.inTx(ctx, fmt.Sprintf("pause %q of %q", class, scope), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		changed = false
		raw, err := q.LockScopePause(ctx, scope)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownScope, scope)
		}
		if err != nil {
			return fmt.Errorf("lock scope: %w", err)
		}
		paused, err := ParsePausedClasses(raw)
		if err != nil {
			return err
		}
		if slices.Contains(paused, class) == pause {
			return nil
		}
		if pause {
			paused = append(paused, class)
			slices.Sort(paused)
		} else {
			paused = slices.DeleteFunc(paused, func(c string) bool { return c == class })
		}
		var value []byte
		if len(paused) > 0 {
			value, _ = json.Marshal(paused) // strings always marshal
		}
		if _, err := q.SetPausedClasses(ctx, gen.SetPausedClassesParams{PausedClasses: value, ScopeID: scope}); err != nil {
			return fmt.Errorf("set paused classes: %w", err)
		}
		changed = true
		return nil
	})
	return changed, err
}

// ParsePausedClasses reads the scope row's paused_classes (GetScope):
// NULL or a JSON array of class names.
func ParsePausedClasses(raw []byte) ([]string, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var out []string
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("workqueue: scope.paused_classes is not a JSON array of names: %w", err)
	}
	return out, nil
}

// ValidQueueClass returns an error wrapping ErrInvalid unless s can name a
// queue class: 1..32 printable ASCII characters without spaces (Enqueue's
// rule).
func ValidQueueClass(s string) error {
	if len(s) < 1 || len(s) > 32 {
		return invalidf("queue class must be 1..32 ASCII characters, got %d bytes", len(s))
	}
	for k := 0; k < len(s); k++ {
		if s[k] < 0x21 || s[k] > 0x7e {
			return invalidf("queue class must be printable ASCII without spaces")
		}
	}
	return nil
}
