package workqueue

import (
	"context"
	"database/sql"
	"fmt"
	"slices"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// MaxTakenInARow bounds claim on promote's runs: a follower is taken only
// while fewer than this many takes in a row led to the item it follows.
// The next one is promoted instead and waits its turn behind older
// claimable work, so a long lane cannot hold an executor while other work
// waits: a place runs at most MaxTakenInARow+1 items of one lane before a
// claim turn hands it out by due order again.
const MaxTakenInARow = 8

// TakePlace is room a finisher offers for lane followers it may take: up to
// Max items of QueueClasses (an executor shape of its process).
type TakePlace struct {
	QueueClasses []string
	Max          int
}

// CompleteManyTaking is CompleteMany for leases of this claimer's scope
// that also claims, in each laned batch's transaction, lane followers the
// batch makes heads: claim on promote. A follower is taken when its class
// fits a place with room, its type is one of workTypes, it is due, fewer
// than MaxTakenInARow takes in a row led to it, and the batch has taken
// fewer followers than it completed items in lanes. It goes from blocked
// straight to processing under a lease of this claimer
// (TakePromotedBatch) and comes back in taken, one list per place. What it
// takes is neither announced nor scanned for: no claim turn in any process
// spends a scan, a CAS and a read-back on it. Followers it does not take
// are promoted, counted in Finished.Promoted and announced, as
// CompleteMany does. Taken items are read back after the commit
// (ClaimedByRef) like a claim turn's, which also resolves a commit whose
// reply was lost; a row of a generation made inactive, or of a class
// paused, before that read is released unrun.
//
// readErr is the read-back's error, after retries: the taken rows then stay
// this claimer's until their leases expire, and a claim turn reclaims them.
func (c *Claimer) CompleteManyTaking(ctx context.Context, leases []Lease, places []TakePlace, workTypes []string) (errs []error, fin Finished, taken [][]Claimed, readErr error) {
	taken = make([][]Claimed, len(places))
	var tk *taking
	if len(places) > 0 && len(workTypes) > 0 {
		tk = &taking{places: places, workTypes: workTypes, ref: c.newRef(), leaseMicros: store.Micros(c.qu.cfg.Lease), chains: map[int64]int{}}
	}
	errs, fin = c.qu.completeMany(ctx, leases, tk)
	if tk == nil || len(tk.tried) == 0 {
		return errs, fin, taken, nil
	}
	won, _, err := c.readBack(ctx, tk.ref, tk.tried, false)
	if err != nil {
		return errs, fin, taken, fmt.Errorf("workqueue: read back %d followers taken on promote: %w", len(tk.tried), err)
	}
	laned := 0
	for _, l := range leases {
		if !l.InNoLane() {
			laned++
		}
	}
	left := make([]int, len(places))
	for i, p := range places {
		left[i] = p.Max
	}
	for _, item := range won {
		i := -1 // the first place of its class with room
		for k, p := range places {
			if left[k] > 0 && slices.Contains(p.QueueClasses, item.QueueClass) {
				i = k
				break
			}
		}
		if i < 0 || fin.Taken == laned {
			// Only when a transaction run again took other followers than
			// the run that committed chose (each run stays within both
			// bounds): give it back.
			_ = c.qu.Release(ctx, item.Lease)
			continue
		}
		item.Lease.lanes.chain = tk.chains[item.WorkID]
		left[i]--
		fin.Taken++
		taken[i] = append(taken[i], item)
	}
	return errs, fin, taken, nil
}

// taking is a finisher's offer to take the followers it promotes (see
// CompleteManyTaking).
type taking struct {
	places      []TakePlace
	workTypes   []string
	ref         sql.NullString
	leaseMicros int64
	left        []int         // room per place in the current run of the transaction
	batch       int           // followers the current batch may still take: one per item it completed
	tried       []int64       // every id any run asked TakePromotedBatch for: read back after the commit
	chains      map[int64]int // taken id -> its take chain
}

// reset starts a run of the finish transaction of a batch that completed
// n items in lanes (an earlier run rolled back).
func (tk *taking) reset(n int) {
	if tk == nil {
		return
	}
	tk.left = tk.left[:0]
	for _, p := range tk.places {
		tk.left = append(tk.left, max(p.Max, 0))
	}
	tk.batch = n
}

// take moves the heads that may be taken to processing under tk's
// reference and returns how many moved; nil tk takes none.
func (tk *taking) take(ctx context.Context, q *gen.Queries, heads []*follower) (int, error) {
	if tk == nil || len(heads) == 0 {
		return 0, nil
	}
	var ids []int64
	for _, fw := range heads {
		if tk.batch == 0 {
			break
		}
		if fw.chain >= MaxTakenInARow || !slices.Contains(tk.workTypes, fw.workType) {
			continue
		}
		for i, p := range tk.places {
			if tk.left[i] > 0 && slices.Contains(p.QueueClasses, fw.class) {
				tk.left[i]--
				tk.batch--
				ids = append(ids, fw.workID)
				tk.chains[fw.workID] = fw.chain + 1
				break
			}
		}
	}
	if len(ids) == 0 {
		return 0, nil
	}
	for _, id := range ids {
		if !slices.Contains(tk.tried, id) {
			tk.tried = append(tk.tried, id)
		}
	}
	n, err := q.TakePromotedBatch(ctx, gen.TakePromotedBatchParams{ClaimRef: tk.ref, LeaseMicros: tk.leaseMicros, WorkIDs: paddedIDs(ids)})
	if err != nil {
		return 0, fmt.Errorf("take %d promoted lane heads: %w", len(ids), err)
	}
	return int(n), nil
}
