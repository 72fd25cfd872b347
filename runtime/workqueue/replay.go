package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

var (
	// ErrNotReplayable reports an item Replay refuses, and why: it is not
	// dead, it belongs to another scope, or replaying it cannot be proven
	// safe (it is of another generation than the scope's active one, or it
	// is a projection generation with a newer generation). Nothing was
	// written.
	ErrNotReplayable = errors.New("workqueue: not replayable")
	// ErrAlreadyReplayed reports a dead item that was replayed before:
	// Replay returns the child that replay made and writes nothing.
	ErrAlreadyReplayed = errors.New("workqueue: already replayed")
)

// Replayed is the child a replay made (or, with ErrAlreadyReplayed, the
// child an earlier replay made).
type Replayed struct {
	WorkID int64
	State  string // pending (it heads its lanes, or has none) or blocked
}

// Replay gives a dead item of scope a new attempt: a child work item for
// the same event and work type, with its own id, replay_of_work_id set to
// the item, a fresh failure budget and replay depth one past the item's.
// The dead original is never reopened: it only gets replayed_at, the
// reservation that lets exactly one replay create a child, however many
// run at once. The child joins its lanes behind everything admitted before
// it (a fresh lane ordinal, as an enqueue), and a running worker of this
// Queue hears of it after the commit.
//
// A projection generation's child (seed 004 step 9) keeps its projection
// key, selects the same event and becomes the projection's active
// generation; its input (ProjectionInput) is the parent's input again, so
// newer events never advance it: they go to a queued successor.
//
// Replay fails closed with ErrNotReplayable when the item is not dead,
// belongs to another scope, is of a generation other than the scope's
// active one (its route and pack may have changed since), or is a
// projection generation that is not its projection's newest (a newer
// generation ran or waits: replaying would run older input after newer).
func (qu *Queue) Replay(ctx context.Context, scope string, workID int64) (Replayed, error) {
	if err := validScope(scope); err != nil {
		return Replayed{}, err
	}
	var out Replayed
	began := time.Now()
	err := qu.inTx(ctx, "replay", readCommitted, func(ctx context.Context, q *gen.Queries) error {
		var err error
		out, err = replayTx(ctx, q, scope, workID)
		return err
	})
	if err != nil {
		return out, err
	}
	qu.announceSince(scope, false, began)
	return out, nil
}

// replayTx takes enqueue's locks in enqueue's order (scope, then the
// item), reserves the item, writes the child and settles its lanes.
func replayTx(ctx context.Context, q *gen.Queries, scope string, workID int64) (Replayed, error) {
	head, err := q.LockScopeForEnqueue(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return Replayed{}, fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return Replayed{}, fmt.Errorf("lock scope: %w", err)
	}
	parent, err := q.LockWorkItemForReplay(ctx, workID)
	if errors.Is(err, sql.ErrNoRows) || err == nil && parent.ScopeID != scope {
		return Replayed{}, fmt.Errorf("%w: scope %q has no work item %d", ErrNotReplayable, scope, workID)
	}
	if err != nil {
		return Replayed{}, fmt.Errorf("lock work item %d: %w", workID, err)
	}
	switch {
	case parent.ReplayedAt.Valid:
		child, err := q.ReplayChild(ctx, gen.ReplayChildParams{EventID: parent.EventID, WorkType: parent.WorkType, ReplayDepth: parent.ReplayDepth + 1})
		if err != nil {
			return Replayed{}, fmt.Errorf("%w: work item %d; reading its child: %w", ErrAlreadyReplayed, workID, err)
		}
		return Replayed{WorkID: child.WorkID, State: child.State}, fmt.Errorf("%w: work item %d has child %d", ErrAlreadyReplayed, workID, child.WorkID)
	case parent.State != StateDead:
		return Replayed{}, fmt.Errorf("%w: work item %d is %s; only dead items are replayed", ErrNotReplayable, workID, parent.State)
	case parent.Generation != head.ActiveGeneration:
		return Replayed{}, fmt.Errorf("%w: work item %d is of generation %d, the scope's active generation is %d", ErrNotReplayable, workID, parent.Generation, head.ActiveGeneration)
	}
	if parent.ProjectionKey.Valid {
		// A projection's child re-runs the parent's input and becomes the
		// active generation: only safe while nothing newer of the
		// projection exists (no live generation, no later input run).
		newest, err := q.NewestProjectionGeneration(ctx, parent.ProjectionKey)
		if err != nil {
			return Replayed{}, fmt.Errorf("read projection of %d: %w", workID, err)
		}
		if newest != workID {
			return Replayed{}, fmt.Errorf("%w: work item %d is a projection generation with a newer generation (%d): replaying it would run older input after newer", ErrNotReplayable, workID, newest)
		}
	}
	if n, err := q.ReserveReplay(ctx, workID); err != nil {
		return Replayed{}, fmt.Errorf("reserve replay of %d: %w", workID, err)
	} else if n != 1 { // the row is locked and was seen dead and unreserved
		return Replayed{}, fmt.Errorf("reserve replay of %d: matched %d rows under its lock", workID, n)
	}
	laned := parent.SourceLaneKey.Valid || parent.TargetLaneKey.Valid
	state := StatePending
	if laned {
		state = StateBlocked // settleLanes promotes it if it heads its lanes
	}
	child, err := q.InsertReplay(ctx, gen.InsertReplayParams{State: state, LaneOrdinal: head.NextEnqueueOrdinal, ParentWorkID: workID})
	if err != nil {
		return Replayed{}, fmt.Errorf("insert replay of %d: %w", workID, err)
	}
	if laned {
		heads, err := settleLanes(ctx, q, []lanedItem{{workID: child, source: parent.SourceLaneKey.String, target: parent.TargetLaneKey.String}})
		if err != nil {
			return Replayed{}, err
		}
		if len(heads) == 1 {
			state = StatePending
		}
	}
	if err := q.AdvanceEnqueueOrdinal(ctx, gen.AdvanceEnqueueOrdinalParams{Reserved: 1, ScopeID: scope}); err != nil {
		return Replayed{}, fmt.Errorf("advance enqueue ordinal: %w", err)
	}
	return Replayed{WorkID: child, State: state}, nil
}
