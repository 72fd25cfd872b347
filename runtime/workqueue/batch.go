package workqueue

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/laneq/laneq/gen"
)

// InNoLane reports whether the claim showed the item in no lane: its finish
// promotes nothing, so CompleteMany can finish it with others in one
// statement. False for a Lease built by hand (its lanes are unknown).
func (l Lease) InNoLane() bool {
	return l.lanes != nil && !l.lanes.source.Valid && !l.lanes.target.Valid
}

// MaxCompleteBatch bounds the leases one CompleteMany statement finishes.
const MaxCompleteBatch = 256

// CompleteMany completes claimed items, one error per lease (nil: completed,
// ErrLeaseLost: another owner has the item). Items in no lane (Lease.InNoLane)
// are finished by one autocommit statement per MaxCompleteBatch, each still
// fenced by its own token: a stale entry fails alone and the rest commit.
// Other items are completed one by one, as Complete does. Transient errors
// are retried as for every write; a lost reply is resolved by reading the
// rows back.
func (qu *Queue) CompleteMany(ctx context.Context, leases []Lease) []error {
	errs := make([]error, len(leases))
	var batch []int // indexes of leases in no lane
	for i, l := range leases {
		if l.InNoLane() {
			batch = append(batch, i)
			continue
		}
		_, errs[i] = qu.Complete(ctx, l)
	}
	for len(batch) > 0 {
		n := min(len(batch), MaxCompleteBatch)
		qu.completeLaneless(ctx, leases, batch[:n], errs)
		batch = batch[n:]
	}
	return errs
}

// completeLaneless finishes leases[idx...] in one statement and sets their
// errors.
func (qu *Queue) completeLaneless(ctx context.Context, leases []Lease, idx []int, errs []error) {
	ids := make([]int64, len(idx))
	var fences strings.Builder
	for k, i := range idx {
		ids[k] = leases[i].WorkID
		if k > 0 {
			fences.WriteByte(',')
		}
		fences.WriteString(strconv.FormatInt(leases[i].WorkID, 10))
		fences.WriteByte(':')
		fences.WriteString(strconv.FormatInt(leases[i].Token, 10))
	}
	var changed int64
	what := fmt.Sprintf("complete %d items in no lane", len(idx))
	err := qu.retryWrite(ctx, what, func(ctx context.Context) error {
		var err error
		changed, err = qu.q.FinishLanelessBatch(ctx, gen.FinishLanelessBatchParams{
			TerminalState: StateCompleted, WorkIDs: ids, Fences: fences.String(),
		})
		return err
	})
	if err == nil && changed == int64(len(idx)) {
		return // every entry matched in the run that returned
	}
	// Fewer rows changed than entries (stale tokens), or no run returned: the
	// rows say which entries committed, in this run or in one whose reply
	// was lost.
	var rows []gen.LeaseStatesRow
	readErr := qu.retryWrite(ctx, "read back "+what, func(ctx context.Context) error {
		var err error
		rows, err = qu.q.LeaseStates(ctx, ids)
		return err
	})
	if readErr != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("workqueue: complete work %d: outcome unknown (%v): %w", leases[i].WorkID, err, readErr)
		}
		return
	}
	byID := make(map[int64]gen.LeaseStatesRow, len(rows))
	for _, r := range rows {
		byID[r.WorkID] = r
	}
	for _, i := range idx {
		l := leases[i]
		if r, ok := byID[l.WorkID]; ok && r.State == StateCompleted && r.LeaseToken == l.Token+1 {
			continue
		}
		if err != nil { // not committed: the write failed
			errs[i] = fmt.Errorf("workqueue: complete work %d: %w", l.WorkID, err)
			continue
		}
		errs[i] = leaseLost(l, "complete")
	}
}
