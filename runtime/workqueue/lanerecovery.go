package workqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
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
// (BlockedPage), checks each with the same probes a finish uses (a live
// head, or in a headless lane a blocked row, ahead of it: liveBefore), and
// promotes the stranded by the finish path's CAS on the token it read. No
// row can enter a lane ahead of one already there (ordinals are handed out
// in admission order), so a row seen with nothing ahead stays that way; a
// concurrent promotion moves the token and the CAS matches nothing. A scope
// with nothing blocked costs one statement.
func (qu *Queue) RecoverLanes(ctx context.Context, scope string, from LaneCursor, limit int) (LaneRecovery, error) {
	if err := validScope(scope); err != nil {
		return LaneRecovery{}, err
	}
	if limit < 1 || limit > 10_000 {
		return LaneRecovery{}, invalidf("lane recovery page must be 1..10000 rows, got %d", limit)
	}
	if from.afterTime.IsZero() {
		from.afterTime = epochTime
	}
	out := LaneRecovery{Next: from}
	rows, err := qu.q.BlockedPage(ctx, gen.BlockedPageParams{ScopeID: scope, AfterTime: from.afterTime, AfterWorkID: from.afterID, Limit: int32(limit)})
	if err != nil {
		return out, fmt.Errorf("workqueue: blocked rows of scope %q: %w", scope, err)
	}
	for _, r := range rows {
		live, err := liveBefore(ctx, qu.q, scope, r.Generation, r.SourceLaneKey, r.TargetLaneKey, r.LaneOrdinal)
		if err != nil {
			return out, fmt.Errorf("workqueue: lane recovery of work %d: %w", r.WorkID, err)
		}
		if !live {
			n, err := qu.q.PromoteBlocked(ctx, gen.PromoteBlockedParams{WorkID: r.WorkID, LeaseToken: r.LeaseToken})
			if err != nil {
				return out, fmt.Errorf("workqueue: lane recovery: promote work %d: %w", r.WorkID, err)
			}
			out.Promoted += int(n)
		}
		out.Checked++
		out.Next = LaneCursor{afterTime: r.RunAfter, afterID: r.WorkID}
	}
	if len(rows) < limit {
		out.Next, out.Wrapped = LaneCursor{}, true
	}
	return out, nil
}
