package inspect

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Reasons an item is where it is: Why's Kind, exactly one per item.
const (
	WhyDue            = "due"            // pending and due: waiting for a claim
	WhyNotDue         = "not_due"        // pending, due later (a retry's backoff or a delayed enqueue)
	WhySourceLane     = "source_lane"    // blocked behind an item of its source lane
	WhyTargetLane     = "target_lane"    // blocked behind an item of its target lane
	WhyDependency     = "dependency"     // waiting for dependency keys
	WhyRegistering    = "registering"    // its dependency wait is being registered
	WhyProjection     = "projection"     // an inactive projection successor
	WhyLeased         = "leased"         // processing under a live lease
	WhyLeaseExpired   = "lease_expired"  // processing under a lease that ran out: the next claim turn reclaims it
	WhyOldGeneration  = "old_generation" // of a generation that is not the scope's active one: never claimed
	WhyFinished       = "finished"       // terminal: completed, skipped or dead
	WhyPaused         = "paused"         // due or reclaimable, but its class is paused in the scope
	maxLaneQueueCount = 1000             // LaneQueues counts to 1,001: "more than 1,000"
)

// Why says, in words and in fields, why an item is not running (or that
// it is, or finished): the first of its Kinds that holds.
type Why struct {
	Kind string
	// Text is the sentence an operator reads, for example "blocked in
	// source lane acct-7 behind item 42 (processing since 12:00:03Z, 5s);
	// 17 items wait in that lane".
	Text string
	// Until: when a not-due item becomes due, or a lease ends (or ended).
	Until time.Time
	// Lane and Behind: the lane and the item ahead that holds it back
	// (a lane Kind), or the active generation an inactive projection
	// successor queues behind (WhyProjection; Lane empty).
	Lane          string
	Behind        int64
	BehindState   string
	BehindSince   time.Time
	QueuedInLane  int  // blocked items of the lane (lane Kinds), at most 1,000
	MoreInLane    bool // more than 1,000 are
	MissingKeys   []string
	SatisfiedKeys []string
	Owner         string // the process holding the lease
}

// Why explains it (see Why), reading what it needs: the lane's head and
// queue, the dependency keys' satisfaction, the active projection
// generation; a few point gets and capped ranges, however long the lane.
func (r *Reader) Why(ctx context.Context, it Item) (Why, error) {
	at := it.At
	ago := func(t time.Time) string { return fmt.Sprintf("%s, %s ago", stamp(t), at.Sub(t).Round(time.Second)) }
	switch {
	case it.State == workqueue.StateCompleted || it.State == workqueue.StateSkipped || it.State == workqueue.StateDead:
		w := Why{Kind: WhyFinished, Text: fmt.Sprintf("%s at %s", it.State, ago(it.TerminalAt))}
		if it.State == workqueue.StateDead {
			w.Text += "; a replay runs it again"
		}
		return w, nil
	case it.Stale:
		return Why{Kind: WhyOldGeneration, Text: fmt.Sprintf("of generation %d, not the scope's active generation %d: never claimed", it.Generation, it.ActiveGeneration)}, nil
	case it.ClassPaused && (it.State == workqueue.StatePending || it.State == workqueue.StateProcessing && !it.RunAfter.After(at)):
		// Blocked, waiting and leased items are held by something else
		// first; what a claim would take is held by the pause.
		var when string
		switch {
		case it.State == workqueue.StateProcessing:
			when = "its lease ran out at " + ago(it.RunAfter)
		case it.RunAfter.After(at):
			when = fmt.Sprintf("due at %s, in %s", stamp(it.RunAfter), it.RunAfter.Sub(at).Round(time.Second))
		default:
			when = "due since " + ago(it.RunAfter)
		}
		return Why{Kind: WhyPaused, Until: it.RunAfter, Text: fmt.Sprintf("class %s is paused in this scope: no worker claims or takes over its items until it is resumed (%s)", it.QueueClass, when)}, nil
	}
	switch it.State {
	case workqueue.StatePending:
		if it.RunAfter.After(at) {
			what := "a delayed enqueue"
			if it.Attempts > 0 {
				what = fmt.Sprintf("a retry after attempt %d", it.Attempts)
			}
			return Why{Kind: WhyNotDue, Until: it.RunAfter, Text: fmt.Sprintf("not due until %s (in %s): %s", stamp(it.RunAfter), it.RunAfter.Sub(at).Round(time.Second), what)}, nil
		}
		return Why{Kind: WhyDue, Until: it.RunAfter, Text: fmt.Sprintf("due since %s and waiting for a claim by a worker of class %s that runs %s", ago(it.RunAfter), it.QueueClass, it.WorkType)}, nil
	case workqueue.StateProcessing:
		if it.RunAfter.After(at) {
			return Why{Kind: WhyLeased, Until: it.RunAfter, Owner: it.LeaseOwner, Text: fmt.Sprintf("running: leased by %s until %s (in %s), attempt %d", it.LeaseOwner, stamp(it.RunAfter), it.RunAfter.Sub(at).Round(time.Second), it.Attempts)}, nil
		}
		return Why{Kind: WhyLeaseExpired, Until: it.RunAfter, Owner: it.LeaseOwner, Text: fmt.Sprintf("the lease of %s ran out at %s: the next claim turn of a worker of class %s takes it over", it.LeaseOwner, ago(it.RunAfter), it.QueueClass)}, nil
	case workqueue.StateDependencyRegistration:
		return Why{Kind: WhyRegistering, Text: fmt.Sprintf("registering its wait for dependency keys %s (since %s)", strings.Join(it.DependencyKeys, ", "), ago(it.UpdatedAt))}, nil
	case workqueue.StateWaitingDependency:
		return r.whyDependency(ctx, it, ago)
	case workqueue.StateInactive:
		return r.whyProjection(ctx, it, ago)
	case workqueue.StateBlocked:
		return r.whyLane(ctx, it, ago)
	}
	return Why{}, fmt.Errorf("inspect: work item %d is in state %q, which this version does not know", it.WorkID, it.State)
}

func (r *Reader) whyDependency(ctx context.Context, it Item, ago func(time.Time) string) (Why, error) {
	w := Why{Kind: WhyDependency}
	if len(it.DependencyKeys) > 0 {
		got, err := r.q.SatisfiedDependencies(ctx, gen.SatisfiedDependenciesParams{ScopeID: it.Scope, DependencyKeys: it.DependencyKeys})
		if err != nil {
			return Why{}, fmt.Errorf("inspect: dependency keys of work item %d: %w", it.WorkID, err)
		}
		for _, k := range it.DependencyKeys {
			if slices.Contains(got, k) {
				w.SatisfiedKeys = append(w.SatisfiedKeys, k)
			} else {
				w.MissingKeys = append(w.MissingKeys, k)
			}
		}
	}
	switch {
	case len(w.SatisfiedKeys) > 0:
		// Satisfied but not woken yet: the wake is in flight, or was lost
		// and the safety pass finds it.
		w.Text = fmt.Sprintf("waiting for dependency keys %s since %s; %s is already recorded, so it is woken by the wake in flight or the next safety pass",
			strings.Join(it.DependencyKeys, ", "), ago(it.UpdatedAt), strings.Join(w.SatisfiedKeys, ", "))
	default:
		w.Text = fmt.Sprintf("waiting for dependency keys %s (any one; none recorded yet) since %s", strings.Join(it.DependencyKeys, ", "), ago(it.UpdatedAt))
	}
	return w, nil
}

func (r *Reader) whyProjection(ctx context.Context, it Item, ago func(time.Time) string) (Why, error) {
	rows, err := r.q.ActiveProjectionGeneration(ctx, store.NullString(it.Projection))
	if err != nil {
		return Why{}, fmt.Errorf("inspect: active generation of projection %q: %w", it.Projection, err)
	}
	if len(rows) == 0 {
		// The handoff moves the key from the active generation to this one
		// in one transaction: between two reads of a busy projection.
		return Why{Kind: WhyProjection, Text: fmt.Sprintf("an inactive successor of projection %s, whose active generation just finished: it becomes active in the same transaction", it.Projection)}, nil
	}
	a := rows[0]
	return Why{Kind: WhyProjection, Behind: a.WorkID, BehindState: a.State, BehindSince: a.UpdatedAt,
		Text: fmt.Sprintf("an inactive successor of projection %s, queued behind its active generation, item %d (%s since %s)", it.Projection, a.WorkID, a.State, ago(a.UpdatedAt))}, nil
}

func (r *Reader) whyLane(ctx context.Context, it Item, ago func(time.Time) string) (Why, error) {
	heads, err := r.q.HeadsAhead(ctx, []int64{it.WorkID})
	if err != nil || len(heads) != 1 {
		return Why{}, fmt.Errorf("inspect: lane heads ahead of work item %d: %d rows, %w", it.WorkID, len(heads), err)
	}
	kind, lane, behind := WhySourceLane, it.SourceLane, heads[0].SourceHead
	if !behind.Valid {
		kind, lane, behind = WhyTargetLane, it.TargetLane, heads[0].TargetHead
	}
	headless := !behind.Valid
	if headless {
		// No head ahead in either lane: a lane whose first rows are
		// blocked on their other lane. The first of them holds this one.
		src, err := r.q.FirstBlockedInSourceLanes(ctx, []int64{it.WorkID})
		if err != nil || len(src) != 1 {
			return Why{}, fmt.Errorf("inspect: first blocked item ahead of work item %d: %d rows, %w", it.WorkID, len(src), err)
		}
		kind, lane, behind = WhySourceLane, it.SourceLane, sql.NullInt64{Int64: src[0].BlockedAhead, Valid: src[0].BlockedAhead != 0}
		if !behind.Valid {
			tgt, err := r.q.FirstBlockedInTargetLanes(ctx, []int64{it.WorkID})
			if err != nil || len(tgt) != 1 {
				return Why{}, fmt.Errorf("inspect: first blocked item ahead of work item %d: %d rows, %w", it.WorkID, len(tgt), err)
			}
			kind, lane, behind = WhyTargetLane, it.TargetLane, sql.NullInt64{Int64: tgt[0].BlockedAhead, Valid: tgt[0].BlockedAhead != 0}
		}
	}
	w := Why{Kind: kind, Lane: lane}
	rows, err := r.q.LaneQueues(ctx, gen.LaneQueuesParams{ScopeID: it.Scope, Generation: it.Generation,
		SourceLaneKey: store.NullString(it.SourceLane), TargetLaneKey: store.NullString(it.TargetLane)})
	if err != nil {
		return Why{}, fmt.Errorf("inspect: lane queues of work item %d: %w", it.WorkID, err)
	}
	var n int64
	for _, q := range rows {
		if (q.Lane == "source") == (kind == WhySourceLane) {
			n = q.Blocked
		}
	}
	w.QueuedInLane, w.MoreInLane = int(min(n, maxLaneQueueCount)), n > maxLaneQueueCount
	var queued string
	switch {
	case w.MoreInLane:
		queued = fmt.Sprintf("more than %d items wait in that lane", maxLaneQueueCount)
	case w.QueuedInLane == 1:
		queued = "1 item waits in that lane"
	default:
		queued = fmt.Sprintf("%d items wait in that lane", w.QueuedInLane)
	}
	lanes := map[string]string{WhySourceLane: "source lane", WhyTargetLane: "target lane"}
	if !behind.Valid {
		// Nothing live ahead: the promotion that makes it the head is
		// committing, or lane recovery's next pass does it.
		w.Text = fmt.Sprintf("blocked, with nothing live ahead of it in its lanes: its promotion is in flight or lane recovery's next pass makes it the head of %s %s; %s",
			lanes[kind], lane, queued)
		return w, nil
	}
	head, err := r.q.ItemDetail(ctx, behind.Int64)
	if errors.Is(err, sql.ErrNoRows) {
		w.Behind = behind.Int64
		w.Text = fmt.Sprintf("blocked in %s %s behind item %d (gone since); %s", lanes[kind], lane, behind.Int64, queued)
		return w, nil
	}
	if err != nil {
		return Why{}, fmt.Errorf("inspect: item %d ahead of work item %d: %w", behind.Int64, it.WorkID, err)
	}
	w.Behind, w.BehindState, w.BehindSince = head.WorkID, head.State, head.UpdatedAt
	held := ""
	if headless {
		held = ", itself waiting for its other lane"
	}
	w.Text = fmt.Sprintf("blocked in %s %s behind item %d (%s since %s%s); %s", lanes[kind], lane, head.WorkID, head.State, ago(head.UpdatedAt), held, queued)
	return w, nil
}

// stamp is a database time as the sentences show it: UTC, to the second.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") }
