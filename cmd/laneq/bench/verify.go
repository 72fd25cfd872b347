package bench

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Verification is what the database says about a finished run.
type Verification struct {
	// OK is true when Problems is empty.
	OK bool `json:"ok"`
	// Problems are violations: an item not finished, an execution not
	// explained by a fault, a lane order broken, an event or item lost.
	// The first 50 are kept; ProblemCount counts them all.
	Problems     []string `json:"problems"`
	ProblemCount int      `json:"problem_count"`
	// Repeated executions and what explains each: a designed failure
	// retried, an attempt whose process was killed (no end, or no
	// verdict), an attempt whose finalization the queue rejected (its
	// lease had expired), split by whether a fault overlapped it.
	RepeatsRetried        int `json:"repeats_retried"`
	RepeatsKilled         int `json:"repeats_killed"`
	RejectedWithFault     int `json:"rejected_with_fault"`
	RejectedWithoutFault  int `json:"rejected_without_fault"`
	OverlappingExecutions int `json:"overlapping_executions"`
	// LaneOverlaps counts attempts of lane items that started before the
	// handler of an earlier item of the lane had returned (its attempt's
	// end is later than their start), and SameItemOverlaps pairs of
	// attempts of one item whose handlers ran at the same time, that no
	// lost lease explains: each is a violation of "a lane runs one item at
	// a time, whatever the handler does". OverlapsExplained counts those a
	// lost lease does explain (the earlier attempt's process was killed,
	// frozen or lost the database while it held the item).
	LaneOverlaps           int `json:"lane_overlaps"`
	SameItemOverlaps       int `json:"same_item_overlaps"`
	OverlapsExplained      int `json:"overlaps_explained"`
	LanePairsChecked       int `json:"lane_pairs_checked"`
	ItemsChecked           int `json:"items_checked"`
	AttemptsChecked        int `json:"attempts_checked"`
	ItemsWithoutAnyAttempt int `json:"items_without_attempt"`
	// Unfinished counts items a baseline phase left live at its deadline
	// (not a violation there; in the fault phase each one is a problem).
	Unfinished              int `json:"unfinished"`
	CompletedByKilledHolder int `json:"completed_by_killed_holder"`
	// Ticks counts the periodic schedule's stored ticks (Spec.Periodic);
	// TicksAfterDrain those stored after the queue was seen drained,
	// which the stop may leave pending.
	Ticks           int `json:"ticks"`
	TicksAfterDrain int `json:"ticks_after_drain"`
	// RateBusiestWindow and RateBusiestSecond are the most starts the rate
	// limit's budget granted in one window and in ten consecutive ones
	// (Spec.RateLimit); RateBusiestStarts the most limited attempts that
	// started, by the database's clock, in any span of one second.
	RateBusiestWindow int `json:"rate_busiest_window"`
	RateBusiestSecond int `json:"rate_busiest_second"`
	RateBusiestStarts int `json:"rate_busiest_starts"`
}

const keptProblems = 50

func (v *Verification) problem(format string, args ...any) {
	v.ProblemCount++
	if len(v.Problems) < keptProblems {
		v.Problems = append(v.Problems, fmt.Sprintf(format, args...))
	}
}

// runData is a finished run as read back from its database.
type runData struct {
	items    []benchdb.ListRunItemsRow
	attempts []benchdb.BenchAttempt
	faults   []benchdb.BenchFault
	events   int64
	cancels  []benchdb.BenchCancel
	ticks    []benchdb.ListTickKeysRow
	grants   benchdb.RateGrantsRow
	// drainedAt is when the queue was seen drained (database clock).
	drainedAt time.Time
}

func readRun(ctx context.Context, bq *benchdb.Queries) (runData, error) {
	var d runData
	var err error
	if d.items, err = bq.ListRunItems(ctx); err != nil {
		return d, fmt.Errorf("bench: read items: %w", err)
	}
	if d.attempts, err = bq.ListAttempts(ctx); err != nil {
		return d, fmt.Errorf("bench: read attempts: %w", err)
	}
	if d.faults, err = bq.ListFaults(ctx); err != nil {
		return d, fmt.Errorf("bench: read faults: %w", err)
	}
	if d.cancels, err = bq.ListCancels(ctx); err != nil {
		return d, fmt.Errorf("bench: read cancellations: %w", err)
	}
	if d.events, err = bq.CountRunEvents(ctx); err != nil {
		return d, fmt.Errorf("bench: count events: %w", err)
	}
	if d.ticks, err = bq.ListTickKeys(ctx); err != nil {
		return d, fmt.Errorf("bench: read ticks: %w", err)
	}
	if d.grants, err = bq.RateGrants(ctx); err != nil {
		return d, fmt.Errorf("bench: read rate limit budget: %w", err)
	}
	return d, nil
}

// interval is a fault's span in database time (open-ended: zero end).
type interval struct{ from, to time.Time }

func (i interval) overlaps(from, to time.Time) bool {
	end := i.to
	if end.IsZero() {
		end = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return !to.Before(i.from) && !from.After(end)
}

// faultIndex answers "was this attempt hit by a fault?".
type faultIndex struct {
	killedAt map[string]time.Time   // process -> kill
	frozen   map[string][]interval  // process -> freezes
	dropped  map[string][]time.Time // process -> connection drops
	paused   []interval             // TiDB pauses
}

func indexFaults(faults []benchdb.BenchFault) faultIndex {
	fi := faultIndex{killedAt: map[string]time.Time{}, frozen: map[string][]interval{}, dropped: map[string][]time.Time{}}
	for _, f := range faults {
		iv := interval{f.StartedAt, f.EndedAt.Time}
		switch f.Kind {
		case faultKill:
			fi.killedAt[f.Process] = f.StartedAt
		case faultFreeze:
			fi.frozen[f.Process] = append(fi.frozen[f.Process], iv)
		case faultDrop:
			fi.dropped[f.Process] = append(fi.dropped[f.Process], f.StartedAt)
		case faultPause:
			fi.paused = append(fi.paused, iv)
		}
	}
	return fi
}

// killedDuring: the attempt's process was killed after it started, or
// was killed at all and the attempt has neither an end nor a verdict. The
// kill is recorded once SIGKILL was sent, but a statement the process had
// already written to its socket can still reach TiDB after that record
// (seen on a loaded machine: an attempt row started after its process's
// recorded kill); a process that lives writes its attempt's end (or, when
// that fails, gets a verdict for the failure), so an attempt with neither
// was cut short by the process's death, whatever the clock says.
func (fi faultIndex) killedDuring(a benchdb.BenchAttempt) bool {
	t, ok := fi.killedAt[a.Process]
	return ok && (!t.Before(a.StartedAt) || (!a.EndedAt.Valid && !a.Finish.Valid))
}

// killText says when process was killed, if it was.
func (fi faultIndex) killText(process string) string {
	if t, ok := fi.killedAt[process]; ok {
		return fmt.Sprintf(" (%s killed at %s)", process, t.Format(time.StampMicro))
	}
	return ""
}

// hit: some fault overlapped the attempt (a kill or freeze of its process,
// a TiDB pause, a drop of its connections while it ran or within a lease
// after).
func (fi faultIndex) hit(a benchdb.BenchAttempt, lease time.Duration) bool {
	if fi.killedDuring(a) {
		return true
	}
	end := a.StartedAt.Add(24 * time.Hour)
	if a.EndedAt.Valid {
		end = a.EndedAt.Time
	}
	// A frozen process stalls others too: the transactions it froze in
	// hold their row locks, so another process's renewal or finish can
	// wait past its lease. And its own claims taken before the freeze can
	// start after it (a lease before the start).
	for _, ivs := range fi.frozen {
		for _, iv := range ivs {
			if iv.overlaps(a.StartedAt.Add(-lease), end.Add(lease)) {
				return true
			}
		}
	}
	for _, iv := range fi.paused {
		if iv.overlaps(a.StartedAt, end.Add(lease)) {
			return true
		}
	}
	for _, t := range fi.dropped[a.Process] {
		if (interval{t, t.Add(lease)}).overlaps(a.StartedAt, end) {
			return true
		}
	}
	return false
}

// lostLease says whether a's process lost its lease on a's item in a way
// the lane rule allows, so that the item (and its lanes) could go on
// while a's handler still ran: the process was killed (a has no end), was
// frozen, or lost the database (TiDB paused, its connections dropped)
// while it held the item. The claim can come up to a lease before the
// start (a process frozen holding a claim it had not started yet starts
// it on waking), so the window opens a lease before it. Unlike hit, a
// freeze of another process does not count: a process that can still
// reach the database keeps its item while its handler runs.
func (fi faultIndex) lostLease(a benchdb.BenchAttempt, lease time.Duration) bool {
	if !a.EndedAt.Valid {
		return true // its process died with the handler: nothing ran on after it
	}
	from, to := a.StartedAt.Add(-lease), a.EndedAt.Time
	for _, iv := range fi.frozen[a.Process] {
		if iv.overlaps(from, to) {
			return true
		}
	}
	for _, iv := range fi.paused {
		if iv.overlaps(from, to) {
			return true
		}
	}
	for _, t := range fi.dropped[a.Process] {
		if (interval{t, t.Add(lease)}).overlaps(from, to) {
			return true
		}
	}
	return false
}

// handlersOverlap: a's handler had not returned when b's started, and b's
// had not returned when a's started (an attempt without an end is taken
// to run on).
func handlersOverlap(a, b benchdb.BenchAttempt) bool {
	running := func(x benchdb.BenchAttempt, t time.Time) bool {
		return !x.StartedAt.After(t) && (!x.EndedAt.Valid || x.EndedAt.Time.After(t))
	}
	return running(a, b.StartedAt) || running(b, a.StartedAt)
}

func terminal(state string) bool {
	return state == "completed" || state == "skipped" || state == "dead"
}

// verify checks a finished run. naive runs carry no lease tokens.
func verify(d runData, wl workload, lease time.Duration, naive, allowUnfinished bool) Verification {
	v := Verification{ItemsChecked: len(d.items), AttemptsChecked: len(d.attempts)}
	fi := indexFaults(d.faults)
	byItem := map[int64][]benchdb.BenchAttempt{}
	for _, a := range d.attempts {
		byItem[a.WorkID] = append(byItem[a.WorkID], a)
	}
	// Nothing lost: every event stored, one item per per-event event.
	if d.events-int64(len(d.ticks)) != int64(len(wl.events)) {
		v.problem("lost events: %d enqueued, %d stored besides %d ticks", len(wl.events), d.events-int64(len(d.ticks)), len(d.ticks))
	}
	perEvent, tickItems := 0, 0
	known := map[int64]bool{}
	for _, it := range d.items {
		known[it.WorkID] = true
		switch it.WorkType {
		case typeProject:
		case typeTick:
			tickItems++
		default:
			perEvent++
		}
	}
	verifyTicks(&v, d.ticks, tickItems, wl.periodic)
	verifyRate(&v, d, wl.rateLimit)
	if perEvent != wl.perEvent {
		v.problem("lost work: %d per-event items expected, %d stored", wl.perEvent, perEvent)
	}
	for id := range byItem {
		if !known[id] {
			v.problem("attempts recorded for work %d, which is not a work item of the run", id)
		}
	}
	// Items the bench asked to cancel: every request Cancel did not refuse,
	// its answer lost included (the request may have committed).
	cancelAsked := map[int64]bool{}
	for _, c := range d.cancels {
		if c.Outcome.String != cancelRefused {
			cancelAsked[c.WorkID] = true
		}
	}
	for _, it := range d.items {
		atts := byItem[it.WorkID]
		if allowUnfinished && !terminal(it.State) {
			v.Unfinished++
			continue
		}
		if it.WorkType == typeTick && !terminal(it.State) && !d.drainedAt.IsZero() && !it.CreatedAt.Before(d.drainedAt) {
			v.TicksAfterDrain++ // stored while the processes were being stopped
			continue
		}
		verifyItem(&v, fi, it, atts, lease, naive, cancelAsked[it.WorkID])
	}
	verifyLanes(&v, fi, d.items, byItem, lease)
	v.OK = v.ProblemCount == 0
	return v
}

// cancelled is an item that ended as a cancellation ends it.
func cancelled(it benchdb.ListRunItemsRow) bool {
	return it.State == "skipped" && it.FailureClass.String == workqueue.FailureCancelled
}

// verifyItem checks one item's end and attempts. cancelAsked: the bench
// asked to cancel it, so it may end cancelled (skipped, failure class
// cancelled), at once when it was not running, or when its handler
// returned; or completed, when its handler returned success first.
func verifyItem(v *Verification, fi faultIndex, it benchdb.ListRunItemsRow, atts []benchdb.BenchAttempt, lease time.Duration, naive, cancelAsked bool) {
	// In lease order: each claim or takeover raises the token, so this
	// is the order the queue handed the item out. A process that was
	// frozen holding a claim it had not started yet can start it on
	// waking, after the takeover's attempt: by time it comes later,
	// by lease it comes first (and its finalization must have been
	// rejected).
	slices.SortFunc(atts, func(a, b benchdb.BenchAttempt) int {
		return cmp.Or(cmp.Compare(a.LeaseToken, b.LeaseToken), a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.AttemptID, b.AttemptID))
	})
	if !terminal(it.State) {
		v.problem("work %d (%s, %s) is %s at the end: not finished", it.WorkID, it.WorkType, laneText(it), it.State)
		return
	}
	switch {
	case cancelled(it) && !cancelAsked:
		v.problem("work %d (%s) ended cancelled, but the bench never asked to cancel it", it.WorkID, laneText(it))
	case cancelAsked && !cancelled(it) && it.State != "completed":
		v.problem("work %d (%s) was cancelled but ended %s (failure class %q): want skipped as cancelled, or completed by a handler that returned success first",
			it.WorkID, laneText(it), it.State, it.FailureClass.String)
	}
	if len(atts) == 0 {
		if it.State != "dead" && !cancelled(it) {
			v.problem("work %d is %s but no attempt of it ever ran", it.WorkID, it.State)
		}
		v.ItemsWithoutAnyAttempt++
		return
	}
	completions := 0
	for i, a := range atts {
		accepted := a.Finish.String == "accepted"
		ok := a.Outcome.String == "ok"
		if ok && accepted {
			completions++
		}
		if !naive && i > 0 && a.LeaseToken == atts[i-1].LeaseToken {
			v.problem("work %d: attempts by %s and %s ran on the same lease (token %d)",
				it.WorkID, atts[i-1].Process, a.Process, a.LeaseToken)
		}
		last := i == len(atts)-1
		if last {
			continue
		}
		next := atts[i+1]
		if !a.EndedAt.Valid || next.StartedAt.Before(a.EndedAt.Time) {
			v.OverlappingExecutions++
		}
		switch {
		case accepted && ok:
			v.problem("work %d executed twice: %s's attempt (token %d) completed and was accepted, then %s ran it again (token %d)",
				it.WorkID, a.Process, a.LeaseToken, next.Process, next.LeaseToken)
		case accepted:
			v.RepeatsRetried++ // a designed failure or a release, written as such
		case a.Finish.String == "rejected":
			if fi.hit(a, lease) {
				v.RejectedWithFault++
			} else {
				v.RejectedWithoutFault++
			}
		case fi.killedDuring(a):
			v.RepeatsKilled++
		default:
			v.problem("work %d executed again by %s (token %d) at %s after %s's attempt (token %d, started %s, outcome %q, finish %q)%s that no kill, rejection or retry explains",
				it.WorkID, next.Process, next.LeaseToken, next.StartedAt.Format(time.StampMicro), a.Process, a.LeaseToken,
				a.StartedAt.Format(time.StampMicro), a.Outcome.String, a.Finish.String, fi.killText(a.Process))
		}
	}
	verifySameItemOverlaps(v, fi, it, atts, lease)
	if it.State != "completed" {
		return
	}
	last := atts[len(atts)-1]
	switch {
	case completions > 1:
		v.problem("work %d completed %d times", it.WorkID, completions)
	case last.Outcome.String == "ok" && last.Finish.String == "accepted":
	case last.Finish.String == "" && fi.killedDuring(last):
		v.CompletedByKilledHolder++ // its verdict died with its process
	default:
		v.problem("work %d is completed but its last attempt (%s, token %d) has outcome %q and finish %q",
			it.WorkID, last.Process, last.LeaseToken, last.Outcome.String, last.Finish.String)
	}
}

// verifySameItemOverlaps checks that no two attempts of an item ran their
// handlers at the same time unless the one the queue handed out first (the
// lower lease token, atts' order) lost its lease as the rule allows. Its
// finish being accepted or rejected does not matter: a handler that ran on
// beside another attempt of its item is the violation, whatever the fence
// then did with its writes.
func verifySameItemOverlaps(v *Verification, fi faultIndex, it benchdb.ListRunItemsRow, atts []benchdb.BenchAttempt, lease time.Duration) {
	for i, a := range atts {
		for _, b := range atts[i+1:] {
			if !handlersOverlap(a, b) {
				continue
			}
			if fi.lostLease(a, lease) {
				v.OverlapsExplained++
				continue
			}
			v.SameItemOverlaps++
			v.problem("work %d: attempt by %s (token %d) started at %s while the handler of %s's attempt (token %d, started %s) ran until %s: two attempts of one item at a time, and no kill, freeze or lost database of %s explains it",
				it.WorkID, b.Process, b.LeaseToken, b.StartedAt.Format(time.StampMicro), a.Process, a.LeaseToken,
				a.StartedAt.Format(time.StampMicro), a.EndedAt.Time.Format(time.StampMicro), a.Process)
		}
	}
}

func laneText(it benchdb.ListRunItemsRow) string {
	switch {
	case it.SourceLaneKey.Valid && it.TargetLaneKey.Valid:
		return "lanes " + it.SourceLaneKey.String + " and " + it.TargetLaneKey.String
	case it.SourceLaneKey.Valid:
		return "lane " + it.SourceLaneKey.String
	default:
		return "no lane"
	}
}

// verifyLanes checks FIFO order in every source and target lane: every
// attempt of an item started after its predecessor in the lane became
// terminal (its finish committed), so no two items of a lane overlapped
// and they ran in ordinal order. Terminal is not enough: an item can end
// while its handler still runs (the defect of issue 54: a handler that
// ignored its cancellation was abandoned and its item finished), so it
// also checks handler time: no attempt started before the handler of an
// earlier item of the lane returned, unless that handler's process lost
// its lease (lostLease).
func verifyLanes(v *Verification, fi faultIndex, items []benchdb.ListRunItemsRow, byItem map[int64][]benchdb.BenchAttempt, lease time.Duration) {
	type laneID struct{ scope, kind, key string }
	lanes := map[laneID][]benchdb.ListRunItemsRow{}
	for _, it := range items {
		if it.SourceLaneKey.Valid {
			id := laneID{it.ScopeID, "source", it.SourceLaneKey.String}
			lanes[id] = append(lanes[id], it)
		}
		if it.TargetLaneKey.Valid {
			id := laneID{it.ScopeID, "target", it.TargetLaneKey.String}
			lanes[id] = append(lanes[id], it)
		}
	}
	for id, its := range lanes {
		slices.SortFunc(its, func(a, b benchdb.ListRunItemsRow) int {
			return cmp.Or(cmp.Compare(a.LaneOrdinal, b.LaneOrdinal), cmp.Compare(a.WorkID, b.WorkID))
		})
		// The earlier items' handler that returned last, among those whose
		// lease no fault took (running) and among all (anyRunning).
		var running, anyRunning laneHandler
		for i, cur := range its {
			for _, a := range byItem[cur.WorkID] {
				switch {
				case running.endsAfter(a.StartedAt):
					v.LaneOverlaps++
					v.problem("%s lane %q of %s: work %d (ordinal %d) started at %s, before work %d's handler (ordinal %d, %s's attempt, token %d) returned at %s: a lane overlap that no kill, freeze or lost database of %s explains",
						id.kind, id.key, id.scope, cur.WorkID, cur.LaneOrdinal, a.StartedAt.Format(time.RFC3339Nano),
						running.item.WorkID, running.item.LaneOrdinal, running.attempt.Process, running.attempt.LeaseToken,
						running.attempt.EndedAt.Time.Format(time.RFC3339Nano), running.attempt.Process)
				case anyRunning.endsAfter(a.StartedAt):
					v.OverlapsExplained++
				}
			}
			if i > 0 {
				verifyLaneOrder(v, id.kind, id.key, id.scope, its[i-1], cur, byItem[cur.WorkID])
			}
			for _, a := range byItem[cur.WorkID] {
				anyRunning.fold(cur, a)
				if !fi.lostLease(a, lease) {
					running.fold(cur, a)
				}
			}
		}
	}
}

// laneHandler is the attempt, among a lane's earlier items, whose handler
// returned last.
type laneHandler struct {
	item    benchdb.ListRunItemsRow
	attempt benchdb.BenchAttempt
}

func (h *laneHandler) fold(it benchdb.ListRunItemsRow, a benchdb.BenchAttempt) {
	if a.EndedAt.Valid && (!h.attempt.EndedAt.Valid || a.EndedAt.Time.After(h.attempt.EndedAt.Time)) {
		*h = laneHandler{it, a}
	}
}

// endsAfter: the handler had not returned at t.
func (h laneHandler) endsAfter(t time.Time) bool {
	return h.attempt.EndedAt.Valid && h.attempt.EndedAt.Time.After(t)
}

// verifyLaneOrder checks that every attempt of cur started after prev,
// its predecessor in the lane, became terminal.
func verifyLaneOrder(v *Verification, kind, key, scope string, prev, cur benchdb.ListRunItemsRow, atts []benchdb.BenchAttempt) {
	if !prev.TerminalAt.Valid {
		return // reported as not finished
	}
	v.LanePairsChecked++
	for _, a := range atts {
		if a.StartedAt.Before(prev.TerminalAt.Time) {
			v.problem("%s lane %q of %s: work %d (ordinal %d) started at %s, before work %d (ordinal %d) finished at %s",
				kind, key, scope, cur.WorkID, cur.LaneOrdinal, a.StartedAt.Format(time.RFC3339Nano),
				prev.WorkID, prev.LaneOrdinal, prev.TerminalAt.Time.Format(time.RFC3339Nano))
			return
		}
	}
}

// tickLayout is the instant in a periodic tick's idempotency key.
const tickLayout = "2006-01-02T15:04:05.000000Z"

// verifyTicks checks the periodic schedule: one item per stored tick, and
// in each scope the ticks one period apart from the first to the last (a
// gap is a tick lost).
func verifyTicks(v *Verification, ticks []benchdb.ListTickKeysRow, items int, every time.Duration) {
	v.Ticks = len(ticks)
	if every <= 0 {
		if len(ticks) > 0 {
			v.problem("%d ticks stored without a schedule", len(ticks))
		}
		return
	}
	if len(ticks) == 0 {
		v.problem("no periodic tick stored (one every %s)", every)
		return
	}
	if items != len(ticks) {
		v.problem("%d periodic ticks stored with %d items: want one each", len(ticks), items)
	}
	prefix := "periodic/" + tickSchedule + "/"
	var prev time.Time
	for i, t := range ticks {
		at, err := time.Parse(tickLayout, strings.TrimPrefix(t.IdempotencyKey, prefix))
		if err != nil {
			v.problem("tick key %q: %v", t.IdempotencyKey, err)
			continue
		}
		if i > 0 && ticks[i-1].ScopeID == t.ScopeID && at.Sub(prev) != every {
			v.problem("scope %s: ticks %s and %s are %s apart: a tick lost", t.ScopeID, prev.Format(tickLayout), at.Format(tickLayout), at.Sub(prev))
		}
		prev = at
	}
}

// verifyRate checks the rate limit's budget rows (at most the window's
// share in one window, at most perSecond in any ten consecutive ones) and
// reports the busiest second of limited starts by the database's clock.
func verifyRate(v *Verification, d runData, perSecond int) {
	v.RateBusiestWindow, v.RateBusiestSecond = int(d.grants.BusiestWindow), int(d.grants.BusiestSecond)
	if perSecond <= 0 {
		return
	}
	if share := (perSecond + 9) / 10; v.RateBusiestWindow > share || v.RateBusiestSecond > perSecond {
		v.problem("rate limit %d a second: a window granted %d (at most %d) and ten consecutive ones %d", perSecond, v.RateBusiestWindow, share, v.RateBusiestSecond)
	}
	limited := map[int64]bool{}
	for _, it := range d.items {
		if it.WorkType == typeLimited {
			limited[it.WorkID] = true
		}
	}
	var starts []time.Time
	for _, a := range d.attempts {
		if limited[a.WorkID] {
			starts = append(starts, a.StartedAt)
		}
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	j := 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= time.Second {
			j++
		}
		v.RateBusiestStarts = max(v.RateBusiestStarts, i-j+1)
	}
}
