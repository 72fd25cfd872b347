package workqueue

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/laneq/laneq/gen"
)

// Lane reconciliation, the one path every lane transition takes (seed 002):
// enqueue and replay (settleLanes), every finish and the projection handoff
// before it (promoteAfter), and lane recovery (RecoverLanes). Each finds its
// candidate rows where it stands (its new rows, the next blocked row behind
// a finished head, a page of blocked rows) and asks rowsAhead which of
// their lanes hold a live row ahead of them; the candidates with none are
// promoted by one statement (promoteHeads), in the caller's transaction.
//
// Nothing enters a lane ahead of a live row already there: ordinals follow
// admission, a replay takes a new one, and a projection successor becomes
// blocked only behind the generation it queued behind. So no path ever
// needs to demote a head (README, "Lanes").

// laneRef names a lane: its kind ("source" or "target") and key.
type laneRef struct{ kind, key string }

// lanesOf are the lanes of a row with these keys ("": none).
func lanesOf(source, target string) []laneRef {
	var out []laneRef
	if source != "" {
		out = append(out, laneRef{"source", source})
	}
	if target != "" {
		out = append(out, laneRef{"target", target})
	}
	return out
}

// laneAsk asks about one lane of a candidate row: is a live row ahead of it
// there?
type laneAsk struct {
	candidate int64
	kind      string // "source" or "target"
}

// rowsAhead answers asks: a live row ahead of the candidate in that lane
// (its work id), or 0. First the heads (HeadsAhead, one statement for every
// candidate); in lanes without one, the first blocked row
// (FirstBlockedIn*Lanes). Each statement reads its own latest commit: a row
// ahead that another finisher promotes between the head read and the
// blocked read is seen by neither. Rows never go back to blocked, so the
// heads of the lanes where both found nothing are read again: a row live at
// the blocked read and not blocked then is a head at this read, or has
// finished (and ran first). The common case, a lane with a head, costs one
// statement (TestPromotionSeesARowPromotedBetweenItsReads,
// TestEnqueueSeesARowPromotedBetweenItsReads).
func rowsAhead(ctx context.Context, q *gen.Queries, asks []laneAsk) (map[laneAsk]int64, error) {
	out := make(map[laneAsk]int64, len(asks))
	if len(asks) == 0 {
		return out, nil
	}
	heads, err := headsAhead(ctx, q, asks)
	if err != nil {
		return nil, err
	}
	var headless []laneAsk
	for _, a := range asks {
		if id := heads[a]; id != 0 {
			out[a] = id
		} else {
			headless = append(headless, a)
		}
	}
	if len(headless) == 0 {
		return out, nil
	}
	blocked, err := firstBlockedAhead(ctx, q, headless)
	if err != nil {
		return nil, err
	}
	var empty []laneAsk
	for _, a := range headless {
		if id := blocked[a]; id != 0 {
			out[a] = id
		} else {
			empty = append(empty, a)
		}
	}
	if len(empty) == 0 {
		return out, nil
	}
	late, err := headsAhead(ctx, q, empty)
	if err != nil {
		return nil, err
	}
	for _, a := range empty {
		out[a] = late[a]
	}
	return out, nil
}

// candidates are the distinct candidate rows of asks, of one kind or ("")
// of any.
func candidates(asks []laneAsk, kind string) []int64 {
	var ids []int64
	seen := make(map[int64]bool, len(asks))
	for _, a := range asks {
		if (kind == "" || a.kind == kind) && !seen[a.candidate] {
			seen[a.candidate] = true
			ids = append(ids, a.candidate)
		}
	}
	return ids
}

// headsAhead runs HeadsAhead for the candidates of asks.
func headsAhead(ctx context.Context, q *gen.Queries, asks []laneAsk) (map[laneAsk]int64, error) {
	ids := candidates(asks, "")
	rows, err := q.HeadsAhead(ctx, paddedIDs(ids))
	if err != nil {
		return nil, fmt.Errorf("read the lane heads ahead of %d rows: %w", len(ids), err)
	}
	out := map[laneAsk]int64{}
	for _, r := range rows {
		if r.SourceHead.Valid {
			out[laneAsk{r.WorkID, "source"}] = r.SourceHead.Int64
		}
		if r.TargetHead.Valid {
			out[laneAsk{r.WorkID, "target"}] = r.TargetHead.Int64
		}
	}
	return out, nil
}

// firstBlockedAhead runs FirstBlockedIn*Lanes for asks, only for the lanes
// asked about: a lane's blocked range is what these statements read.
func firstBlockedAhead(ctx context.Context, q *gen.Queries, asks []laneAsk) (map[laneAsk]int64, error) {
	out := map[laneAsk]int64{}
	for _, kind := range []string{"source", "target"} {
		ids := candidates(asks, kind)
		if len(ids) == 0 {
			continue
		}
		var rows []gen.FirstBlockedInSourceLanesRow
		var err error
		if kind == "target" {
			var t []gen.FirstBlockedInTargetLanesRow
			t, err = q.FirstBlockedInTargetLanes(ctx, paddedIDs(ids))
			for _, r := range t { // both statements select the same columns
				rows = append(rows, gen.FirstBlockedInSourceLanesRow(r))
			}
		} else {
			rows, err = q.FirstBlockedInSourceLanes(ctx, paddedIDs(ids))
		}
		if err != nil {
			return nil, fmt.Errorf("read the first blocked rows of %d %s lanes: %w", len(ids), kind, err)
		}
		for _, r := range rows {
			out[laneAsk{r.WorkID, kind}] = r.BlockedAhead
		}
	}
	return out, nil
}

// lockRows locks the given rows (0 and repeats skipped) by primary key, in
// id order: one lock order for every enqueue and batch of finishes.
func lockRows(ctx context.Context, q *gen.Queries, ids []int64) ([]gen.LockWorkItemsRow, int, error) {
	var lock []int64
	seen := map[int64]bool{}
	for _, id := range ids {
		if id != 0 && !seen[id] {
			seen[id] = true
			lock = append(lock, id)
		}
	}
	if len(lock) == 0 {
		return nil, 0, nil
	}
	slices.Sort(lock)
	locked, err := q.LockWorkItems(ctx, paddedIDs(lock))
	if err != nil {
		return nil, 0, fmt.Errorf("lock %d lane rows: %w", len(lock), err)
	}
	return locked, len(lock), nil
}

// promoteHeads makes the given blocked rows, each found heading both of
// its lanes, pending, and returns how many it promoted. With locked, the
// caller holds every row's lock and read it blocked, so each must be
// promoted; without (lane recovery), a row promoted meanwhile stays as it
// is.
func promoteHeads(ctx context.Context, q *gen.Queries, heads []int64, locked bool) (int, error) {
	return promoteUntaken(ctx, q, heads, locked, 0)
}

// promoteUntaken is promoteHeads after taken of the heads went to
// processing in this transaction (TakePromotedBatch): the state guard skips
// those, so a locked batch promotes exactly the rest.
func promoteUntaken(ctx context.Context, q *gen.Queries, heads []int64, locked bool, taken int) (int, error) {
	if len(heads) == taken {
		return 0, nil
	}
	n, err := q.PromoteBlockedBatch(ctx, paddedIDs(heads))
	if err != nil {
		return 0, fmt.Errorf("promote %d lane heads: %w", len(heads)-taken, err)
	}
	if locked && n != int64(len(heads)-taken) {
		return 0, fmt.Errorf("promote %d locked lane heads (%d taken): %d were blocked", len(heads), taken, n)
	}
	return int(n), nil
}

// lanedItem is a work item an enqueue (or a replay) wrote into a lane,
// blocked, in ordinal order.
type lanedItem struct {
	workID         int64
	source, target string
	event, work    int // its place in Enqueue's result
}

// maxLaneSettleRounds bounds settleLanes' re-checks; each re-check means a
// row ahead finished between reading and locking it.
const maxLaneSettleRounds = 8

// settleLanes decides which of the batch's laned items head their lanes,
// and promotes them. The candidates are the batch's first item in each
// lane: an item is a head when it is the batch's first in each of its lanes
// and no live row is ahead of it there.
//
// The row found ahead in a lane is locked, so it cannot leave the lane
// unseen before this transaction commits (its finisher would not see the
// new, uncommitted follower and would promote nothing): a head's finish
// then waits for this commit, a blocked row's promotion too. The locks are
// taken last, after every insert, so they are held for the batch's final
// statements only; a row found ahead that finished before its lock means
// reading again.
func settleLanes(ctx context.Context, q *gen.Queries, items []lanedItem) ([]lanedItem, error) {
	if len(items) == 0 {
		return nil, nil
	}
	first := map[laneRef]int{} // lane -> index in items of the batch's first item in it
	var asks []laneAsk
	for i, it := range items {
		for _, l := range lanesOf(it.source, it.target) {
			if _, ok := first[l]; !ok {
				first[l] = i
				asks = append(asks, laneAsk{it.workID, l.kind})
			}
		}
	}
	var ahead map[laneAsk]int64
	for round := 1; ; round++ {
		var settled bool
		var err error
		ahead, settled, err = lockRowsAhead(ctx, q, asks)
		if err != nil {
			return nil, err
		}
		if settled {
			break
		}
		if round == maxLaneSettleRounds {
			return nil, fmt.Errorf("settle lanes: rows ahead kept finishing while %d rounds locked them", round)
		}
	}
	var heads []lanedItem
	var ids []int64
	for i, it := range items {
		head := true
		for _, l := range lanesOf(it.source, it.target) {
			head = head && first[l] == i && ahead[laneAsk{it.workID, l.kind}] == 0
		}
		if head {
			heads = append(heads, it)
			ids = append(ids, it.workID)
		}
	}
	if _, err := promoteHeads(ctx, q, ids, true); err != nil {
		return nil, err
	}
	return heads, nil
}

// lockRowsAhead finds the live row ahead in each asked lane (rowsAhead),
// locks them all by primary key in one statement, and checks they are
// still live. settled is false when one left its lane between the read and
// the lock, and the caller reads again.
func lockRowsAhead(ctx context.Context, q *gen.Queries, asks []laneAsk) (ahead map[laneAsk]int64, settled bool, err error) {
	ahead, err = rowsAhead(ctx, q, asks)
	if err != nil {
		return nil, false, err
	}
	locked, asked, err := lockRows(ctx, q, slices.Collect(maps.Values(ahead)))
	if err != nil {
		return nil, false, fmt.Errorf("rows ahead: %w", err)
	}
	live := 0
	for _, r := range locked {
		if slices.Contains(liveStates, r.State) {
			live++
		}
	}
	return ahead, live == asked, nil
}

// liveStates are the states of the rows in a lane: its head's or blocked.
var liveStates = []string{StateBlocked, StatePending, StateProcessing, StateDependencyRegistration, StateWaitingDependency}

// follower is the first blocked row behind a finished head in a lane it
// left, and the lanes it was found through.
type follower struct {
	workID               int64
	source, target       string
	class, workType      string // what a finisher taking it checks (taking.take)
	viaSource, viaTarget bool
	// chain is the longest run of takes that led to a finished item ahead
	// of it (laneIdentity.chain): taking it makes the run one longer.
	chain int
}

// unasked are the lanes of fw it was not found through: a finished row
// headed each lane it was found through, so it heads those now.
func (fw *follower) unasked() []laneAsk {
	var asks []laneAsk
	if fw.source != "" && !fw.viaSource {
		asks = append(asks, laneAsk{fw.workID, "source"})
	}
	if fw.target != "" && !fw.viaTarget {
		asks = append(asks, laneAsk{fw.workID, "target"})
	}
	return asks
}

// followerWindow is the first ordinal window a finisher searches for the
// next follower of a lane: a lane's followers are usually close behind its
// head (within a thousand admissions of the scope), and a window keeps a
// lane of thousands of followers from costing a read of every one (the
// embedded engine reads every live entry of a range). When it finds none,
// one unbounded statement reads on. Measured on the two-process end-to-end
// test (lanes of 5 whose items sit 1,000 ordinals apart): a 64-ordinal
// window cost a second statement per finish and about 15% of throughput.
const followerWindow = 1024

// nextFollower finds, and locks, the first blocked row after the finished
// row in one of its lanes.
func nextFollower(ctx context.Context, q *gen.Queries, finished *laneIdentity, lane laneRef) (*follower, error) {
	after := finished.ordinal
	for _, until := range []int64{after + followerWindow, math.MaxInt64} {
		var rows []gen.NextBlockedInSourceLaneRow
		var err error
		if lane.kind == "target" {
			var t []gen.NextBlockedInTargetLaneRow
			t, err = q.NextBlockedInTargetLane(ctx, gen.NextBlockedInTargetLaneParams{
				ScopeID: finished.scope, Generation: finished.generation, LaneKey: finished.target, AfterOrdinal: after, UntilOrdinal: until,
			})
			for _, r := range t { // both statements select the same columns
				rows = append(rows, gen.NextBlockedInSourceLaneRow(r))
			}
		} else {
			rows, err = q.NextBlockedInSourceLane(ctx, gen.NextBlockedInSourceLaneParams{
				ScopeID: finished.scope, Generation: finished.generation, LaneKey: finished.source, AfterOrdinal: after, UntilOrdinal: until,
			})
		}
		if err != nil {
			return nil, fmt.Errorf("next follower in %s lane %q: %w", lane.kind, lane.key, err)
		}
		if len(rows) > 0 {
			r := rows[0]
			return &follower{workID: r.WorkID, source: r.SourceLaneKey.String, target: r.TargetLaneKey.String, class: r.QueueClass, workType: r.WorkType}, nil
		}
	}
	return nil, nil
}

// foundVia is a follower, the kind of lane it was found through and the
// take chain of the finished row it was found behind.
type foundVia struct {
	follower *follower
	kind     string
	chain    int
}

// followersOf finds, and locks, the next follower in every lane a batch of
// finished rows leaves, with two statements and a lock for the whole batch
// instead of a locking read per lane: each finished row headed its lanes,
// and a head is ahead of every blocked row of its lane, so the next
// follower is the lane's first blocked row (FirstBlockedIn*Lanes, asked
// about the finished row). The followers are then locked by primary key in
// id order, as NextBlocked* would lock each. None can have been promoted
// between the read and the lock: the finished row ahead of it is still
// processing to every other transaction (this one holds its lock).
func followersOf(ctx context.Context, q *gen.Queries, finished []*laneIdentity) ([]foundVia, error) {
	var asks []laneAsk
	chain := map[int64]int{}
	for _, l := range finished {
		chain[l.workID] = l.chain
		for _, lane := range lanesOf(l.source.String, l.target.String) {
			asks = append(asks, laneAsk{l.workID, lane.kind})
		}
	}
	first, err := firstBlockedAhead(ctx, q, asks)
	if err != nil {
		return nil, fmt.Errorf("next followers of %d finished rows: %w", len(finished), err)
	}
	locked, _, err := lockRows(ctx, q, slices.Collect(maps.Values(first)))
	if err != nil {
		return nil, fmt.Errorf("followers: %w", err)
	}
	byID := map[int64]*follower{}
	for _, r := range locked {
		if r.State == StateBlocked {
			byID[r.WorkID] = &follower{workID: r.WorkID, source: r.SourceLaneKey.String, target: r.TargetLaneKey.String, class: r.QueueClass, workType: r.WorkType}
		}
	}
	var out []foundVia
	for _, a := range asks {
		if fw := byID[first[a]]; fw != nil {
			out = append(out, foundVia{fw, a.kind, chain[a.candidate]})
		}
	}
	return out, nil
}

// promoteAfter promotes, for each lane the finished rows leave (all
// terminal in this transaction, each the head of its lanes until now), the
// next blocked row of that lane if it now heads both of its lanes, and
// returns how many it promoted. One finished row finds its followers with
// NextBlocked* (a window of ordinals, one locking read per lane); a batch
// finds them all at once (followersOf). Only the lanes a follower was not
// found through are asked about, all followers at once; a follower behind
// another of the same batch sees it (blocked, live) ahead and stays
// blocked for that one's finish.
//
// With tk, the heads it chooses (taking.choose) go to processing under its
// claim reference instead (claim on promote); only the rest are promoted,
// and counted.
func promoteAfter(ctx context.Context, q *gen.Queries, tk *taking, finished ...*laneIdentity) (int, error) {
	found := map[int64]*follower{}
	var order []int64
	via := func(fw *follower, kind string, chain int) {
		if seen, ok := found[fw.workID]; ok {
			fw = seen
		} else {
			found[fw.workID] = fw
			order = append(order, fw.workID)
		}
		fw.chain = max(fw.chain, chain)
		if kind == "source" {
			fw.viaSource = true
		} else {
			fw.viaTarget = true
		}
	}
	if len(finished) == 1 {
		l := finished[0]
		for _, lane := range lanesOf(l.source.String, l.target.String) {
			fw, err := nextFollower(ctx, q, l, lane)
			if err != nil {
				return 0, err
			}
			if fw != nil {
				via(fw, lane.kind, l.chain)
			}
		}
	} else {
		followers, err := followersOf(ctx, q, finished)
		if err != nil {
			return 0, err
		}
		for _, f := range followers {
			via(f.follower, f.kind, f.chain)
		}
	}
	var asks []laneAsk
	for _, id := range order {
		asks = append(asks, found[id].unasked()...)
	}
	ahead, err := rowsAhead(ctx, q, asks)
	if err != nil {
		return 0, err
	}
	var heads []int64
	var chosen []*follower
	for _, id := range order {
		if !slices.ContainsFunc(found[id].unasked(), func(a laneAsk) bool { return ahead[a] != 0 }) {
			heads = append(heads, id)
			chosen = append(chosen, found[id])
		}
	}
	taken, err := tk.take(ctx, q, chosen)
	if err != nil {
		return 0, err
	}
	return promoteUntaken(ctx, q, heads, true, taken)
}
