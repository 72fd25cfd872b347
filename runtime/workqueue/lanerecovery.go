package workqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/scanfloor"
)

// LaneCursor is where the next RecoverLanes call resumes; the zero value
// starts from the front.
type LaneCursor struct {
	afterTime time.Time
	afterID   int64
}

// LaneRecovery is what one RecoverLanes call did.
type LaneRecovery struct {
	Next     LaneCursor // pass it to the next call
	Checked  int        // blocked rows examined
	Promoted int        // stranded rows made lane heads
	Wrapped  bool       // the page reached the end: Next starts from the front again
}

// RecoverLanes is the bounded, resumable repair pass over one scope's
// blocked rows (seed 002's recovery of a blocked row whose lanes have no
// live predecessor). Finishing a lane head promotes its followers in the
// same transaction, so a stranded row means something bypassed that: a row
// finished or deleted by hand, a writer outside laneq. The pass reads one
// page of at most limit blocked rows of the active generation after from
// (BlockedPage), asks the lane path's reads (rowsAhead) about the whole
// page at once, and promotes the rows with no live row ahead in either lane
// with one statement whose state guard skips a row promoted meanwhile. No
// row can enter a lane ahead of one already there (see lanes.go), so a row
// seen with nothing ahead stays that way. A page costs two to six
// statements, a scope with nothing blocked one.
func (qu *Queue) RecoverLanes(ctx context.Context, scope string, from LaneCursor, limit int) (LaneRecovery, error) {
	if err := validScope(scope); err != nil {
		return LaneRecovery{}, err
	}
	if limit < 1 || limit > 10_000 {
		return LaneRecovery{}, invalidf("lane recovery page must be 1..10000 rows, got %d", limit)
	}
	if from.afterTime.IsZero() {
		from.afterTime = scanfloor.Front
	}
	out := LaneRecovery{Next: from}
	rows, err := qu.q.BlockedPage(ctx, gen.BlockedPageParams{ScopeID: scope, AfterTime: from.afterTime, AfterWorkID: from.afterID, Limit: int32(limit)})
	if err != nil {
		return out, fmt.Errorf("workqueue: blocked rows of scope %q: %w", scope, err)
	}
	var asks []laneAsk
	for _, r := range rows {
		for _, l := range lanesOf(r.SourceLaneKey.String, r.TargetLaneKey.String) {
			asks = append(asks, laneAsk{r.WorkID, l.kind})
		}
	}
	ahead, err := rowsAhead(ctx, qu.q, asks)
	if err != nil {
		return out, fmt.Errorf("workqueue: lane recovery of scope %q: %w", scope, err)
	}
	var stranded []int64
	for _, r := range rows {
		live := false
		for _, l := range lanesOf(r.SourceLaneKey.String, r.TargetLaneKey.String) {
			live = live || ahead[laneAsk{r.WorkID, l.kind}] != 0
		}
		if !live {
			stranded = append(stranded, r.WorkID)
		}
	}
	began := time.Now()
	out.Promoted, err = promoteHeads(ctx, qu.q, stranded, false)
	if out.Promoted > 0 || (err != nil && len(stranded) > 0) {
		qu.announceSince(scope, false, began) // an error may follow a commit
	}
	if err != nil {
		return out, fmt.Errorf("workqueue: lane recovery of scope %q: %w", scope, err)
	}
	if len(rows) > 0 {
		last := rows[len(rows)-1]
		out.Checked, out.Next = len(rows), LaneCursor{afterTime: last.RunAfter, afterID: last.WorkID}
	}
	if len(rows) < limit {
		out.Next, out.Wrapped = LaneCursor{}, true
	}
	return out, nil
}
