package inspect

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/runtime/workqueue"
)

// UnclaimedStates are the states of items no process holds, in the order
// a bulk skip visits them: lane followers first, then dependency waiters,
// then lane heads (skipping a head promotes its follower, which by then
// was visited).
var UnclaimedStates = []string{workqueue.StateBlocked, workqueue.StateWaitingDependency, workqueue.StatePending}

// UnclaimedQuery pages one unclaimed state of a scope's active generation
// in due order.
type UnclaimedQuery struct {
	State      string // one of UnclaimedStates
	QueueClass string // "": every class
	WorkType   string // "": every work type
	// FailureClass: only items whose last attempt failed with it (retries
	// in backoff); "": any.
	FailureClass string
	// Due-time range (run_after): From inclusive, To exclusive; zero:
	// unbounded.
	From, To time.Time
	Cursor   string // continue after the page that returned it
	Limit    int    // entries read per page: default DefaultPageSize, at most MaxPageSize
}

// UnclaimedItem is one matching item of a page.
type UnclaimedItem struct {
	WorkID     int64
	QueueClass string
	WorkType   string
}

// UnclaimedPage is a page of UnclaimedItems.
type UnclaimedPage struct {
	Generation int64
	Items      []UnclaimedItem // the page's entries the filters match
	Scanned    int             // entries read
	Next       string          // "": the state's range ended
}

// Unclaimed reads one page of a state's items: Limit entries of the
// state's range of idx_work_item_due after the cursor, whatever the
// filters (UnclaimedPage), so a page's cost never grows with the backlog.
func (r *Reader) Unclaimed(ctx context.Context, scope string, q UnclaimedQuery) (UnclaimedPage, error) {
	if scope == "" {
		return UnclaimedPage{}, &InvalidError{Field: "scope", Reason: "empty"}
	}
	known := false
	for _, s := range UnclaimedStates {
		known = known || s == q.State
	}
	if !known {
		return UnclaimedPage{}, &InvalidError{Field: "State", Reason: fmt.Sprintf("%q is not one of %v", q.State, UnclaimedStates)}
	}
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageSize
	case q.Limit < 0 || q.Limit > MaxPageSize:
		return UnclaimedPage{}, &InvalidError{Field: "Limit", Reason: fmt.Sprintf("%d out of range 1..%d", q.Limit, MaxPageSize)}
	}
	after, afterID, err := decodeCursor(q.Cursor)
	if err != nil {
		return UnclaimedPage{}, err
	}
	if after.IsZero() {
		after, afterID = farPast, 0
		if !q.From.IsZero() {
			after = q.From.Add(-time.Microsecond) // the range starts after the cursor: From itself is in
		}
	}
	until := farFuture
	if !q.To.IsZero() {
		until = q.To
	}
	generation, err := r.generation(ctx, scope, 0)
	if err != nil {
		return UnclaimedPage{}, err
	}
	rows, err := r.q.UnclaimedPage(ctx, gen.UnclaimedPageParams{
		QueueClass: q.QueueClass, WorkType: q.WorkType, FailureClass: sql.NullString{String: q.FailureClass, Valid: true},
		ScopeID: scope, Generation: generation, State: q.State, AfterTime: after, AfterWorkID: afterID, UntilTime: until, Limit: int32(q.Limit),
	})
	if err != nil {
		return UnclaimedPage{}, fmt.Errorf("inspect: %s items of scope %q: %w", q.State, scope, err)
	}
	page := UnclaimedPage{Generation: generation, Scanned: len(rows)}
	for _, row := range rows {
		if row.Matches == 1 {
			page.Items = append(page.Items, UnclaimedItem{WorkID: row.WorkID, QueueClass: row.QueueClass, WorkType: row.WorkType})
		}
	}
	if len(rows) == q.Limit {
		last := rows[len(rows)-1]
		page.Next = encodeCursor(last.RunAfter, last.WorkID)
	}
	return page, nil
}
