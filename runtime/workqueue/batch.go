package workqueue

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
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
// ErrLeaseLost: another owner has the item), and reports the lane
// followers the completions made claimable. Items in no lane
// (Lease.InNoLane) are finished by one autocommit statement per
// MaxCompleteBatch; items in lanes by one transaction per MaxCompleteBatch
// that finishes them with one statement and promotes their followers as
// Complete does. Each item stays fenced by its own token: a stale entry
// fails alone and the rest commit. Transient errors are retried as for
// every write; a lost reply is resolved by reading the rows back.
func (qu *Queue) CompleteMany(ctx context.Context, leases []Lease) ([]error, Finished) {
	return qu.completeMany(ctx, leases, nil)
}

// completeMany is CompleteMany; with tk, each laned batch takes the
// followers it may (Claimer.CompleteManyTaking).
func (qu *Queue) completeMany(ctx context.Context, leases []Lease, tk *taking) ([]error, Finished) {
	errs := make([]error, len(leases))
	var fin Finished
	var laneless, laned []int // indexes of leases
	for i, l := range leases {
		switch {
		case l.InNoLane():
			laneless = append(laneless, i)
		case l.lanes != nil:
			laned = append(laned, i)
		default: // lanes unknown (a Lease built by hand): Complete reads them
			one, err := qu.Complete(ctx, l)
			errs[i] = err
			fin.add(one)
		}
	}
	for batch := range slices.Chunk(laneless, MaxCompleteBatch) {
		qu.completeLaneless(ctx, leases, batch, errs)
	}
	for batch := range slices.Chunk(laned, MaxCompleteBatch) {
		began := time.Now()
		one := qu.completeLaned(ctx, leases, batch, errs, tk)
		if one.Promoted > 0 || one.PromotionsUnknown {
			qu.announceScopes(leases, batch, began)
		}
		fin.add(one)
	}
	return errs, fin
}

// announceScopes announces the scopes of leases[idx...] (known from their
// claims), each once.
func (qu *Queue) announceScopes(leases []Lease, idx []int, began time.Time) {
	var done []string
	for _, i := range idx {
		if l := leases[i].lanes; l != nil && l.scope != "" && !slices.Contains(done, l.scope) {
			done = append(done, l.scope)
			qu.announceSince(l.scope, false, began)
		}
	}
}

// completeLaneless finishes leases[idx...] in one statement and sets their
// errors.
func (qu *Queue) completeLaneless(ctx context.Context, leases []Lease, idx []int, errs []error) {
	qu.fencedBatch(ctx, "complete", true, leases, idx, errs,
		func(ctx context.Context, ids []int64, fences string) (int64, error) {
			return qu.q.FinishBatch(ctx, gen.FinishBatchParams{
				TerminalState: StateCompleted, WorkIDs: paddedIDs(ids), Fences: fences, Laneless: 1,
			})
		},
		func(r gen.LeaseStatesRow, l Lease) bool {
			return r.State == StateCompleted && r.LeaseToken == l.Token+1
		})
}

// errBatchShort ends a laned batch transaction whose finish matched fewer
// rows than entries: it is rolled back and each entry resolved alone.
var errBatchShort = errors.New("workqueue: batch finish matched fewer rows than entries")

// completeLaned finishes leases[idx...] (items in lanes, their lanes known
// from the claim) in one READ COMMITTED transaction: one fenced statement
// finishes them all, the projection handoff runs for them all, and the lane
// path judges every one's next followers at once and promotes them with
// one statement (promoteAfter; a follower behind another of the batch sees
// it ahead and stays blocked).
// When the statement matched fewer rows than entries (a stale entry, or a
// retry after a commit whose reply was lost), the transaction is rolled
// back and each entry resolved alone by its row: completed by an earlier
// run (followers may have been promoted), still ours (Complete), or lost.
// With tk, a batch of one takes this path too (Complete takes nothing).
func (qu *Queue) completeLaned(ctx context.Context, leases []Lease, idx []int, errs []error, tk *taking) Finished {
	if len(idx) == 1 && tk == nil {
		fin, err := qu.Complete(ctx, leases[idx[0]])
		errs[idx[0]] = err
		return fin
	}
	ids, fences := fenceList(leases, idx)
	what := fmt.Sprintf("complete %d items in lanes", len(idx))
	var fin Finished
	err := qu.inTx(ctx, what, readCommitted, func(ctx context.Context, q *gen.Queries) error {
		fin = Finished{}
		tk.reset(len(idx))
		n, err := q.FinishBatch(ctx, gen.FinishBatchParams{TerminalState: StateCompleted, WorkIDs: paddedIDs(ids), Fences: fences, Laneless: 0})
		if err != nil {
			return err
		}
		if n != int64(len(idx)) {
			return errBatchShort
		}
		finished := make([]*laneIdentity, len(idx))
		for k, i := range idx {
			finished[k] = leases[i].lanes
		}
		if err := handOff(ctx, q, finished...); err != nil {
			return err
		}
		fin.Promoted, err = promoteAfter(ctx, q, tk, finished...)
		return err
	})
	switch {
	case err == nil:
		return fin
	case errors.Is(err, errBatchShort):
		return qu.resolveLaned(ctx, leases, idx, errs)
	}
	for _, i := range idx {
		errs[i] = fmt.Errorf("workqueue: complete work %d: %w", leases[i].WorkID, err)
	}
	return Finished{PromotionsUnknown: true} // the commit may have happened
}

// resolveLaned settles each entry of a laned batch whose finish came up
// short, by its row: finished by an earlier run of the batch whose commit
// reply was lost (its followers may have been promoted), still ours
// (completed alone), or another owner's.
func (qu *Queue) resolveLaned(ctx context.Context, leases []Lease, idx []int, errs []error) Finished {
	ids, _ := fenceList(leases, idx)
	byID, err := qu.leaseStates(ctx, "read back a short laned batch", ids)
	if err != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("workqueue: complete work %d: %w", leases[i].WorkID, err)
		}
		return Finished{PromotionsUnknown: true}
	}
	var fin Finished
	for _, i := range idx {
		l := leases[i]
		r, ok := byID[l.WorkID]
		switch {
		case ok && r.State == StateCompleted && r.LeaseToken == l.Token+1:
			fin.PromotionsUnknown = true
		case ok && r.State == StateProcessing && r.LeaseToken == l.Token:
			one, err := qu.Complete(ctx, l)
			errs[i] = err
			fin.add(one)
		default:
			errs[i] = leaseLost(l, "complete")
		}
	}
	return fin
}

// paddedIDs returns ids lengthened to the next power of two by repeating
// its last id. Each length of an sqlc.slice list is a statement text of its
// own, prepared once per connection (internal/prepcache) and planned once
// per session: batches of every length from 1 to MaxCompleteBatch made a
// pool of connections prepare hundreds of texts (about a quarter of the
// statements of a lanes-of-five drain). Powers of two bound them to nine
// per statement. Repeats change no result: an IN list matches a row once,
// so affected-row counts and rows returned stay those of the distinct ids.
func paddedIDs(ids []int64) []int64 {
	n := len(ids)
	if n == 0 || n&(n-1) == 0 {
		return ids
	}
	padded := make([]int64, 1<<bits.Len(uint(n)), 1<<bits.Len(uint(n)))
	copy(padded, ids)
	for i := n; i < len(padded); i++ {
		padded[i] = ids[n-1]
	}
	return padded
}

// leaseStates reads the rows of ids by work id, retried after transient
// errors (the read is idempotent).
func (qu *Queue) leaseStates(ctx context.Context, what string, ids []int64) (map[int64]gen.LeaseStatesRow, error) {
	var rows []gen.LeaseStatesRow
	err := qu.retryWrite(ctx, what, func(ctx context.Context) error {
		var err error
		rows, err = qu.q.LeaseStates(ctx, paddedIDs(ids))
		return err
	})
	if err != nil {
		return nil, err
	}
	byID := make(map[int64]gen.LeaseStatesRow, len(rows))
	for _, r := range rows {
		byID[r.WorkID] = r
	}
	return byID, nil
}

// add folds another finish's report into f.
func (f *Finished) add(o Finished) {
	f.Promoted += o.Promoted
	f.PromotionsUnknown = f.PromotionsUnknown || o.PromotionsUnknown
	f.Taken += o.Taken
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
					LeaseMicros: store.Micros(qu.cfg.Lease), WorkIDs: paddedIDs(ids), Fences: fences,
				})
			},
			func(r gen.LeaseStatesRow, l Lease) bool {
				return r.State == StateProcessing && r.LeaseToken == l.Token && !r.CancelReason.Valid
			})
		idx = idx[n:]
	}
	return errs
}

// fenceList returns the ids of leases[idx...] and their "id:token" fences
// (see FinishBatch).
func fenceList(leases []Lease, idx []int) ([]int64, string) {
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
	return ids, fences.String()
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
	ids, fences := fenceList(leases, idx)
	var changed int64
	what := fmt.Sprintf("%s %d items", op, len(idx))
	err := qu.retryWrite(ctx, what, func(ctx context.Context) error {
		var err error
		changed, err = write(ctx, ids, fences)
		return err
	})
	if err == nil && changed == int64(len(idx)) {
		return // every entry matched in the run that returned
	}
	byID, readErr := qu.leaseStates(ctx, "read back "+what, ids)
	if readErr != nil {
		for _, i := range idx {
			errs[i] = fmt.Errorf("workqueue: %s work %d: outcome unknown (%v): %w", op, leases[i].WorkID, err, readErr)
		}
		return
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
		case ok && cancelRequestedIn(l, r.State, r.LeaseToken, r.CancelReason) != nil:
			errs[i] = cancelRequestedIn(l, r.State, r.LeaseToken, r.CancelReason) // refused for that (renewals)
		default:
			errs[i] = leaseLost(l, op)
		}
	}
}
