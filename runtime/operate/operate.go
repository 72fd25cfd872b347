// Package operate runs operator actions over many items at once, in
// bounded batches with progress: a bulk replay of a scope's dead letters
// chosen by the dead-letter filters (inspect.DeadLetterQuery), and a bulk
// skip of its unclaimed items chosen by class and work type. It reads
// with the dead-letter read path (one DeadLetterPage statement per batch)
// and writes with workqueue.Queue.Replay, one transaction per item, so it
// adds no statement of its own and each item's replay is as safe as a
// single one: an item replayed before, by this run or any other, is only
// counted, so running the same bulk replay again creates nothing.
// A bulk skip reads with UnclaimedPage and writes with
// workqueue.Queue.SkipUnclaimed, likewise.
//
// The laneq command (laneq dlq replay, laneq item skip-matching) and the
// dashboard's bulk actions run them.
package operate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/workqueue"
)

// DefaultBatch is how many dead-letter entries one batch reads (and at most
// replays) when BulkReplay.Batch is 0.
const DefaultBatch = 100

// BulkReplay chooses the dead letters to replay.
type BulkReplay struct {
	Scope string
	// Filter is the dead-letter filters (work type, failure class, death
	// time range); its Cursor and Limit are ignored: a bulk replay starts
	// at the newest entry and reads Batch entries per batch.
	Filter inspect.DeadLetterQuery
	// Batch is how many dead-letter entries one batch reads, 1..
	// inspect.MaxPageSize; default DefaultBatch.
	Batch int
}

// Progress is what a bulk replay did so far.
type Progress struct {
	Batches  int // batches read
	Scanned  int // dead-letter entries read
	Matched  int // entries the filters matched
	Replayed int // children created by this run
	// AlreadyReplayed counts matched items replayed before (by an earlier
	// bulk replay, one item's replay, or a concurrent run): nothing written.
	AlreadyReplayed int
	// Refused counts matched items Replay refused (workqueue.ErrNotReplayable:
	// for example a projection generation with a newer generation); the
	// last refusal is in LastRefusal.
	Refused     int
	LastRefusal string
	Done        bool // every entry of the range was read
}

// Replay replays every dead letter bulk's filters match that was not
// replayed before, newest first, one batch at a time, calling progress
// (when not nil) after each batch. It stops at the first error other than
// a refusal, returning the progress so far: what was replayed stays
// replayed, and running it again continues where it stopped (what it
// replayed is only counted).
func Replay(ctx context.Context, qu *workqueue.Queue, in *inspect.Reader, bulk BulkReplay, progress func(Progress)) (Progress, error) {
	var p Progress
	switch {
	case bulk.Batch == 0:
		bulk.Batch = DefaultBatch
	case bulk.Batch < 0 || bulk.Batch > inspect.MaxPageSize:
		return p, &inspect.InvalidError{Field: "Batch", Reason: fmt.Sprintf("%d out of range 1..%d", bulk.Batch, inspect.MaxPageSize)}
	}
	q := bulk.Filter
	q.Cursor, q.Limit = "", bulk.Batch
	for {
		page, err := in.DeadLetters(ctx, bulk.Scope, q)
		if err != nil {
			return p, fmt.Errorf("operate: bulk replay of %q after %d batches: %w", bulk.Scope, p.Batches, err)
		}
		// Later batches stay on the generation the first one read, even if
		// the scope moves on meanwhile (Replay then refuses them).
		q.Generation = page.Generation
		p.Batches++
		p.Scanned += page.Scanned
		for _, d := range page.Items {
			p.Matched++
			if d.Replayed {
				p.AlreadyReplayed++
				continue
			}
			_, err := qu.Replay(ctx, bulk.Scope, d.WorkID)
			switch {
			case err == nil:
				p.Replayed++
			case errors.Is(err, workqueue.ErrAlreadyReplayed):
				p.AlreadyReplayed++
			case errors.Is(err, workqueue.ErrNotReplayable):
				p.Refused++
				p.LastRefusal = err.Error()
			default:
				return p, fmt.Errorf("operate: bulk replay of %q, item %d: %w", bulk.Scope, d.WorkID, err)
			}
		}
		p.Done = page.Next == ""
		if progress != nil {
			progress(p)
		}
		if p.Done {
			return p, nil
		}
		q.Cursor = page.Next
	}
}

// BulkSkip chooses the unclaimed items to skip.
type BulkSkip struct {
	Scope string
	// QueueClass, WorkType and FailureClass (a retrying item's last
	// failure) filter; at least one must be set (skipping a whole scope is
	// not a bulk action this offers). From and To bound the due time
	// (From inclusive, To exclusive; zero: unbounded).
	QueueClass, WorkType, FailureClass string
	From, To                           time.Time
	Reason                             string // recorded on each item (see SkipUnclaimed)
	// Batch is how many entries one batch reads, 1..inspect.MaxPageSize;
	// default DefaultBatch.
	Batch int
}

// SkipProgress is what a bulk skip did so far.
type SkipProgress struct {
	Batches int // batches read
	Scanned int // entries read
	Matched int // entries the filters matched
	Skipped int
	// Refused counts matched items whose state moved on before their skip
	// (claimed, or finished); the last refusal is in LastRefusal.
	Refused     int
	LastRefusal string
	Done        bool // every unclaimed state's range was read
}

// Skip skips every unclaimed item (pending, blocked or waiting for a
// dependency; see inspect.UnclaimedStates for the order) of bulk's class
// and work type, a batch at a time, each with its lane handed on
// (workqueue.Queue.SkipUnclaimed), calling progress after each batch. It
// stops at the first error other than a refusal, returning the progress
// so far; running it again skips what is left (skipped items are no
// longer unclaimed). Items enqueued while it runs may be skipped or not.
func Skip(ctx context.Context, qu *workqueue.Queue, in *inspect.Reader, bulk BulkSkip, progress func(SkipProgress)) (SkipProgress, error) {
	var p SkipProgress
	switch {
	case bulk.QueueClass == "" && bulk.WorkType == "" && bulk.FailureClass == "":
		return p, &inspect.InvalidError{Field: "filter", Reason: "a bulk skip needs a queue class, a work type or a failure class"}
	case !bulk.From.IsZero() && !bulk.To.IsZero() && !bulk.From.Before(bulk.To):
		return p, &inspect.InvalidError{Field: "From", Reason: "not before To"}
	case bulk.QueueClass != "" && workqueue.ValidQueueClass(bulk.QueueClass) != nil:
		return p, workqueue.ValidQueueClass(bulk.QueueClass)
	case bulk.WorkType != "" && workqueue.ValidWorkType(bulk.WorkType) != nil:
		return p, workqueue.ValidWorkType(bulk.WorkType)
	case bulk.Batch == 0:
		bulk.Batch = DefaultBatch
	case bulk.Batch < 0 || bulk.Batch > inspect.MaxPageSize:
		return p, &inspect.InvalidError{Field: "Batch", Reason: fmt.Sprintf("%d out of range 1..%d", bulk.Batch, inspect.MaxPageSize)}
	}
	for _, state := range inspect.UnclaimedStates {
		q := inspect.UnclaimedQuery{State: state, QueueClass: bulk.QueueClass, WorkType: bulk.WorkType, FailureClass: bulk.FailureClass,
			From: bulk.From, To: bulk.To, Limit: bulk.Batch}
		for {
			page, err := in.Unclaimed(ctx, bulk.Scope, q)
			if err != nil {
				return p, fmt.Errorf("operate: bulk skip in %q after %d batches: %w", bulk.Scope, p.Batches, err)
			}
			p.Batches++
			p.Scanned += page.Scanned
			for _, it := range page.Items {
				p.Matched++
				_, err := qu.SkipUnclaimed(ctx, bulk.Scope, it.WorkID, bulk.Reason)
				switch {
				case err == nil:
					p.Skipped++
				case errors.Is(err, workqueue.ErrRefused):
					p.Refused++
					p.LastRefusal = err.Error()
				default:
					return p, fmt.Errorf("operate: bulk skip in %q, item %d: %w", bulk.Scope, it.WorkID, err)
				}
			}
			last := page.Next == "" && state == inspect.UnclaimedStates[len(inspect.UnclaimedStates)-1]
			p.Done = last
			if progress != nil {
				progress(p)
			}
			if page.Next == "" {
				break
			}
			q.Cursor = page.Next
		}
	}
	return p, nil
}
