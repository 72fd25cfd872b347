package inspect

import (
	"context"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// HistoryPoint is one minute of one work kind of a scope's history, summed
// over the processes that wrote it (see runtime/worker's HistoryConfig).
type HistoryPoint struct {
	Minute     time.Time // UTC
	QueueClass string
	WorkType   string
	Completed  int64 // completed or skipped attempts
	Failed     int64 // failed attempts due again later
	Dead       int64
	// MaxDue is the longest any item claimed in the minute had been due
	// (claims take due order: the oldest due age the claims saw).
	MaxDue time.Duration
}

// MaxHistoryRows bounds the rows one History call reads.
const MaxHistoryRows = 20000

// History reads scope's history from since, oldest minute first (at most
// MaxHistoryRows rows of minutes x kinds x writers, the newest: truncated
// says the window was cut at its old end, and the minute the cut fell in
// is left out). It reads queue_history only, never work items.
func (r *Reader) History(ctx context.Context, scope string, since time.Time) (points []HistoryPoint, truncated bool, err error) {
	if scope == "" {
		return nil, false, &InvalidError{Field: "scope", Reason: "empty"}
	}
	rows, err := r.q.HistorySince(ctx, gen.HistorySinceParams{ScopeID: scope, Since: since.UTC(), Limit: MaxHistoryRows})
	if err != nil {
		return nil, false, fmt.Errorf("inspect: history of scope %q: %w", scope, err)
	}
	read := int64(0)
	for _, row := range rows {
		read += row.WriterRows
		points = append(points, HistoryPoint{Minute: row.MinuteAt.UTC(), QueueClass: row.QueueClass, WorkType: row.WorkType,
			Completed: row.Completed, Failed: row.Failed, Dead: row.Dead, MaxDue: time.Duration(row.MaxDueMs) * time.Millisecond})
	}
	if read < MaxHistoryRows {
		return points, false, nil
	}
	// Cut at the old end: the oldest minute read may be partial; drop it.
	oldest := points[0].Minute
	for len(points) > 0 && points[0].Minute.Equal(oldest) {
		points = points[1:]
	}
	return points, true, nil
}
