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
	qu.fencedBatch(ctx, "complete", true, leases, idx, errs,
		func(ctx context.Context, ids []int64, fences string) (int64, error) {
			return qu.q.FinishLanelessBatch(ctx, gen.FinishLanelessBatchParams{
				TerminalState: StateCompleted, WorkIDs: ids, Fences: fences,
			})
		},
		func(r gen.LeaseStatesRow, l Lease) bool {
			return r.State == StateCompleted && r.LeaseToken == l.Token+1
		})
}

// RenewMany renews the leases of claimed items (heartbeats), one error per
// lease (nil: renewed, ErrLeaseLost: another owner has the item), by one
// autocommit statement per MaxCompleteBatch, each entry fenced by its own
// token: a stale entry fails alone and the rest are renewed.
func (qu *Queue) RenewMany(ctx context.Context, leases []Lease) []error {
	errs := make([]error, len(leases))
	if len(leases) == 1 {
		errs[0] = qu.Renew(ctx, leases[0])
		return errs
	}
	idx := make([]int, len(leases))
	for i := range idx {
		idx[i] = i
	}
	for len(idx) > 0 {
		n := min(len(idx), MaxCompleteBatch)
		qu.fencedBatch(ctx, "renew", false, leases, idx[:n], errs,
			func(ctx context.Context, ids []int64, fences string) (int64, error) {
				return qu.q.RenewLeaseBatch(ctx, gen.RenewLeaseBatchParams{
					LeaseMicros: micros(qu.cfg.Lease), WorkIDs: ids, Fences: fences,
				})
			},
			func(r gen.LeaseStatesRow, l Lease) bool { return r.State == StateProcessing && r.LeaseToken == l.Token })
		idx = idx[n:]
	}
	return errs
}

// fencedBatch runs write once over leases[idx...] (their ids, and their
// "id:token" fences) and sets each one's error. When fewer rows than
// entries matched, or no run returned, the rows read back say which
// entries took effect (took), in this run or in one whose reply was lost.
//
// visible says whether a row read back shows the write took effect even
// when its reply was lost: true for a finish (it moves the token), false
// for a renewal (the row looks the same before and after).
func (qu *Queue) fencedBatch(ctx context.Context, op string, visible bool, leases []Lease, idx []int, errs []error,
	write func(ctx context.Context, ids []int64, fences string) (int64, error), took func(gen.LeaseStatesRow, Lease) bool,
) {
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
	what := fmt.Sprintf("%s %d items", op, len(idx))
	err := qu.retryWrite(ctx, what, func(ctx context.Context) error {
		var err error
		changed, err = write(ctx, ids, fences.String())
		return err
	})
	if err == nil && changed == int64(len(idx)) {
		return // every entry matched in the run that returned
	}
	var rows []gen.LeaseStatesRow
	readErr := qu.retryWrite(ctx, "read back "+what, func(ctx context.Context) error {
		var err error
		rows, err = qu.q.LeaseStates(ctx, ids)
		return err
	})
	if readErr != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("workqueue: %s work %d: outcome unknown (%v): %w", op, leases[i].WorkID, err, readErr)
		}
		return
	}
	byID := make(map[int64]gen.LeaseStatesRow, len(rows))
	for _, r := range rows {
		byID[r.WorkID] = r
	}
	for _, i := range idx {
		l := leases[i]
		r, ok := byID[l.WorkID]
		done := ok && took(r, l)
		switch {
		case done && (err == nil || visible):
			// Taken effect, in this run or in one whose reply was lost.
		case err != nil && (visible || done):
			errs[i] = fmt.Errorf("workqueue: %s work %d: %w", op, l.WorkID, err)
		default:
			errs[i] = leaseLost(l, op)
		}
	}
}
