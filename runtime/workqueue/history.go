package workqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// HistorySample is one process's counts of one minute and work kind: the
// attempts it finished and the longest an item it claimed had been
// claimable (Claimed.DueFor). See queue_history's migration.
type HistorySample struct {
	Minute     time.Time // the minute's start, UTC
	QueueClass string
	WorkType   string
	Completed  int // completed or skipped
	Failed     int // failed with retries left: due again later
	Dead       int
	MaxDue     time.Duration
}

// MaxHistoryWriter bounds a history writer's name.
const MaxHistoryWriter = 64

// RecordHistory adds writer's samples to scope's history, one upsert each
// on rows only this writer writes (runtime/worker calls it once a minute
// with what it counted; see queue_history), and returns how many it is
// done with: on an error, the samples from that index on were not written
// (a sample whose reply was lost counts as done: it is lost rather than
// counted twice).
func (qu *Queue) RecordHistory(ctx context.Context, scope, writer string, samples []HistorySample) (int, error) {
	if err := validScope(scope); err != nil {
		return 0, err
	}
	if writer == "" || len(writer) > MaxHistoryWriter {
		return 0, invalidf("history writer must be 1..%d bytes, got %d", MaxHistoryWriter, len(writer))
	}
	for i, s := range samples {
		err := qu.q.RecordHistory(ctx, gen.RecordHistoryParams{
			ScopeID: scope, MinuteAt: s.Minute.UTC().Truncate(time.Minute), QueueClass: s.QueueClass, WorkType: s.WorkType, Writer: writer,
			Completed: int32(s.Completed), Failed: int32(s.Failed), Dead: int32(s.Dead), MaxDueMs: s.MaxDue.Milliseconds(),
		})
		if err != nil {
			if !serverRejected(err) {
				i++ // the reply was lost: it may have committed; counted once at most, rather than twice
			}
			return i, fmt.Errorf("workqueue: record history of scope %q: %w", scope, err)
		}
	}
	return len(samples), nil
}

// PruneHistory deletes up to limit of scope's history rows from before
// before, oldest first, and returns how many it deleted.
func (qu *Queue) PruneHistory(ctx context.Context, scope string, before time.Time, limit int32) (int64, error) {
	n, err := qu.q.PruneHistory(ctx, gen.PruneHistoryParams{ScopeID: scope, Before: before.UTC(), Limit: limit})
	if err != nil {
		return n, fmt.Errorf("workqueue: prune history of scope %q: %w", scope, err)
	}
	return n, nil
}
