package bench

import (
	"database/sql"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestKilledDuring: which attempts a process's kill explains. The kill's
// record can precede the last statements the process had already sent, so
// an attempt with neither an end nor a verdict counts as cut short even
// when its recorded start is after the kill; one that ended or got a
// verdict after the kill does not, nor does anything of a process that
// was never killed.
func TestKilledDuring(t *testing.T) {
	kill := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	fi := indexFaults([]benchdb.BenchFault{{Kind: faultKill, Process: "p1", StartedAt: kill}})
	at := func(d time.Duration) time.Time { return kill.Add(d) }
	ended := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	verdict := sql.NullString{String: "accepted", Valid: true}
	for _, tc := range []struct {
		name string
		a    benchdb.BenchAttempt
		want bool
	}{
		{"running at the kill", benchdb.BenchAttempt{Process: "p1", StartedAt: at(-time.Second)}, true},
		{"ended before the kill, verdict lost", benchdb.BenchAttempt{Process: "p1", StartedAt: at(-time.Second), EndedAt: ended(-time.Millisecond)}, true},
		{"start landed after the kill's record, nothing after it", benchdb.BenchAttempt{Process: "p1", StartedAt: at(30 * time.Millisecond)}, true},
		{"started after the kill and ended", benchdb.BenchAttempt{Process: "p1", StartedAt: at(time.Millisecond), EndedAt: ended(time.Second)}, false},
		{"started after the kill with a verdict", benchdb.BenchAttempt{Process: "p1", StartedAt: at(time.Millisecond), Finish: verdict}, false},
		{"a process never killed", benchdb.BenchAttempt{Process: "p2", StartedAt: at(-time.Second)}, false},
	} {
		if got := fi.killedDuring(tc.a); got != tc.want {
			t.Errorf("%s: killedDuring = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestStaleClaimStartedAfterAFreeze: a worker frozen holding a claim it
// had not started yet starts it on waking, after another process took the
// item over and completed it. In lease order the stale attempt comes
// first; its finalization was rejected, so the repeat is explained by the
// freeze. Had it been accepted, or had two attempts shared a lease, the
// verifier must say so.
func TestStaleClaimStartedAfterAFreeze(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ended := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	word := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	fi := indexFaults([]benchdb.BenchFault{{Kind: faultFreeze, Process: "p2", StartedAt: at(5 * time.Second), EndedAt: ended(9 * time.Second)}})
	item := benchdb.ListRunItemsRow{WorkID: 7, State: "completed", TerminalAt: ended(7500 * time.Millisecond)}
	takeover := benchdb.BenchAttempt{AttemptID: 1, Process: "p1", WorkID: 7, LeaseToken: 2, StartedAt: at(7 * time.Second),
		EndedAt: ended(7200 * time.Millisecond), Outcome: word("ok"), Finish: word("accepted")}
	stale := func(token int64, finish string) benchdb.BenchAttempt {
		return benchdb.BenchAttempt{AttemptID: 2, Process: "p2", WorkID: 7, LeaseToken: token, StartedAt: at(9100 * time.Millisecond),
			EndedAt: ended(9300 * time.Millisecond), Outcome: word("ok"), Finish: word(finish)}
	}
	for _, tc := range []struct {
		name        string
		stale       benchdb.BenchAttempt
		wantProblem string
	}{
		{"rejected on waking", stale(1, "rejected"), ""},
		{"accepted on waking", stale(1, "accepted"), "executed twice"},
		{"on the takeover's lease", stale(2, "rejected"), "same lease"},
	} {
		var v Verification
		verifyItem(&v, fi, item, []benchdb.BenchAttempt{takeover, tc.stale}, time.Second, false, false)
		got := strings.Join(v.Problems, "; ")
		switch {
		case tc.wantProblem == "" && v.ProblemCount != 0:
			t.Errorf("%s: problems %s, want none", tc.name, got)
		case tc.wantProblem == "" && v.RejectedWithFault != 1:
			t.Errorf("%s: %d rejected finalizations under a fault, want 1 (the freeze)", tc.name, v.RejectedWithFault)
		case tc.wantProblem != "" && !strings.Contains(got, tc.wantProblem):
			t.Errorf("%s: problems %q, want one saying %q", tc.name, got, tc.wantProblem)
		}
	}
}

// TestFreezeCatchesAnAttemptAwaitingItsVerdict: a process frozen after its
// handler returned but before its outcome's write was answered still holds
// the lease; the takeover raises the token and the write it makes on waking
// is rejected. The freeze caught that attempt even though its handler had
// ended before the freeze: its verdict was recorded after. An attempt whose
// verdict was recorded before the freeze was not caught.
func TestFreezeCatchesAnAttemptAwaitingItsVerdict(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	when := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	word := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	d := runData{
		faults: []benchdb.BenchFault{{Kind: faultFreeze, Process: "p3", StartedAt: at(5 * time.Second), EndedAt: when(10 * time.Second)}},
		attempts: []benchdb.BenchAttempt{
			{AttemptID: 1, Process: "p3", WorkID: 1, LeaseToken: 1, StartedAt: at(4 * time.Second), EndedAt: when(4900 * time.Millisecond),
				Outcome: word("ok"), Finish: word("rejected"), FinishAt: when(10100 * time.Millisecond)},
			{AttemptID: 2, Process: "p1", WorkID: 1, LeaseToken: 2, StartedAt: at(7 * time.Second), EndedAt: when(7200 * time.Millisecond),
				Outcome: word("ok"), Finish: word("accepted"), FinishAt: when(7300 * time.Millisecond)},
			{AttemptID: 3, Process: "p3", WorkID: 2, LeaseToken: 1, StartedAt: at(3 * time.Second), EndedAt: when(3200 * time.Millisecond),
				Outcome: word("ok"), Finish: word("accepted"), FinishAt: when(3300 * time.Millisecond)},
		},
	}
	got := faultReports(d, t0)
	if len(got) != 1 || got[0].Caught != 1 || got[0].Rejected != 1 || got[0].Recovery != 2*time.Second {
		t.Fatalf("freeze report %+v, want 1 caught, 1 rejected, recovered in 2s", got)
	}
}

// TestVerifierCatchesOverlapsByHandlerTime: a lane item's handler that
// ignored its cancellation was abandoned and its item finished while it
// still ran (the defect of issue 54), so its lane follower and a retry of
// the same item started beside it. Both became terminal in order, so only
// the attempts' handler times show it: the follower started before the
// head's handler ended, and the retry before the first attempt's did. A
// process that lost its lease as the rule allows (killed: no end; frozen;
// TiDB paused; its connections dropped) explains the overlap; a fault of
// another process does not.
func TestVerifierCatchesOverlapsByHandlerTime(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	when := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	word := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	const s = time.Second
	// Work 1 heads source lane src-0 and work 2 follows it; work 3 is in no
	// lane. p1 runs work 1 and work 3's first attempt for 6s, ignoring the
	// cancellation and the deadline that ended their contexts at 2s; the
	// defect finished both items at 3s.
	items := []benchdb.ListRunItemsRow{
		{WorkID: 1, ScopeID: "bench-0", WorkType: typeDeliver, State: "skipped", SourceLaneKey: word("src-0"), LaneOrdinal: 1, TerminalAt: when(3 * s)},
		{WorkID: 2, ScopeID: "bench-0", WorkType: typeDeliver, State: "completed", SourceLaneKey: word("src-0"), LaneOrdinal: 2, TerminalAt: when(3400 * time.Millisecond)},
		{WorkID: 3, ScopeID: "bench-0", WorkType: typeDeliver, State: "completed", TerminalAt: when(3400 * time.Millisecond)},
	}
	stubbornHead := benchdb.BenchAttempt{AttemptID: 1, Process: "p1", WorkID: 1, LeaseToken: 1, Attempt: 1, StartedAt: at(0), EndedAt: when(6 * s),
		Outcome: word("canceled"), Finish: word("accepted"), FinishAt: when(3 * s)}
	follower := benchdb.BenchAttempt{AttemptID: 2, Process: "p2", WorkID: 2, LeaseToken: 1, Attempt: 1, StartedAt: at(3100 * time.Millisecond),
		EndedAt: when(3200 * time.Millisecond), Outcome: word("ok"), Finish: word("accepted"), FinishAt: when(3400 * time.Millisecond)}
	stubbornFirst := benchdb.BenchAttempt{AttemptID: 3, Process: "p1", WorkID: 3, LeaseToken: 1, Attempt: 1, StartedAt: at(0), EndedAt: when(6 * s),
		Outcome: word("canceled"), Finish: word("accepted"), FinishAt: when(3 * s)}
	retry := benchdb.BenchAttempt{AttemptID: 4, Process: "p2", WorkID: 3, LeaseToken: 2, Attempt: 2, StartedAt: at(3100 * time.Millisecond),
		EndedAt: when(3200 * time.Millisecond), Outcome: word("ok"), Finish: word("accepted"), FinishAt: when(3400 * time.Millisecond)}
	wl := workload{events: make([]scopedEvent, len(items)), perEvent: len(items)}
	run := func(faults []benchdb.BenchFault, attempts ...benchdb.BenchAttempt) Verification {
		d := runData{items: items, attempts: attempts, faults: faults, events: int64(len(items))}
		return verify(d, wl, 3*s, false, false)
	}
	mentions := func(v Verification, words string) bool {
		for _, p := range v.Problems {
			if strings.Contains(p, words) {
				return true
			}
		}
		return false
	}
	v := run(nil, stubbornHead, follower, stubbornFirst, retry)
	if !mentions(v, "work 2 (ordinal 2) started") || !mentions(v, "before work 1's handler") {
		t.Errorf("lane overlap by handler time not caught: problems %q", v.Problems)
	}
	if !mentions(v, "work 3: attempt by p2 (token 2) started") {
		t.Errorf("same-item overlap by handler time not caught: problems %q", v.Problems)
	}
	if v.LaneOverlaps != 1 || v.SameItemOverlaps != 1 || v.OverlapsExplained != 0 {
		t.Errorf("%d lane overlaps, %d same-item overlaps, %d explained; want 1, 1, 0", v.LaneOverlaps, v.SameItemOverlaps, v.OverlapsExplained)
	}

	killed := func(a benchdb.BenchAttempt) benchdb.BenchAttempt {
		a.EndedAt, a.Outcome, a.Finish, a.FinishAt = sql.NullTime{}, sql.NullString{}, sql.NullString{}, sql.NullTime{}
		return a
	}
	for _, tc := range []struct {
		name      string
		faults    []benchdb.BenchFault
		head      benchdb.BenchAttempt
		first     benchdb.BenchAttempt
		explained bool
	}{
		{"its process killed (no end)", []benchdb.BenchFault{{Kind: faultKill, Process: "p1", StartedAt: at(s)}}, killed(stubbornHead), killed(stubbornFirst), true},
		{"its process frozen", []benchdb.BenchFault{{Kind: faultFreeze, Process: "p1", StartedAt: at(s), EndedAt: when(5 * s)}}, stubbornHead, stubbornFirst, true},
		{"TiDB paused", []benchdb.BenchFault{{Kind: faultPause, StartedAt: at(s), EndedAt: when(4 * s)}}, stubbornHead, stubbornFirst, true},
		{"its connections dropped", []benchdb.BenchFault{{Kind: faultDrop, Process: "p1", StartedAt: at(s), EndedAt: when(s)}}, stubbornHead, stubbornFirst, true},
		{"another process frozen", []benchdb.BenchFault{{Kind: faultFreeze, Process: "p3", StartedAt: at(s), EndedAt: when(5 * s)}}, stubbornHead, stubbornFirst, false},
		{"its process frozen after the handler ended", []benchdb.BenchFault{{Kind: faultFreeze, Process: "p1", StartedAt: at(7 * s), EndedAt: when(12 * s)}}, stubbornHead, stubbornFirst, false},
	} {
		v := run(tc.faults, tc.head, follower, tc.first, retry)
		if caught := mentions(v, "before work 1's handler") || mentions(v, "work 3: attempt by p2"); caught == tc.explained {
			t.Errorf("%s: explained %v, but problems are %q", tc.name, tc.explained, v.Problems)
		}
		overlaps := v.LaneOverlaps + v.SameItemOverlaps
		if tc.explained && (overlaps != 0 || (tc.head.EndedAt.Valid && v.OverlapsExplained != 2)) || !tc.explained && overlaps != 2 {
			t.Errorf("%s: %d lane and %d same-item overlaps, %d explained", tc.name, v.LaneOverlaps, v.SameItemOverlaps, v.OverlapsExplained)
		}
	}
}

// TestVerifierAcceptsCancelledItems: an item the bench cancelled may end
// skipped as cancelled (at once, unrun, or when its handler returned) or
// completed (its handler returned success first); one that ended
// cancelled without a cancellation the queue accepted, or a cancelled one
// that ended otherwise, is a problem.
func TestVerifierAcceptsCancelledItems(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	when := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	word := func(s string) sql.NullString { return sql.NullString{String: s, Valid: true} }
	const s = time.Second
	item := func(id int64, state, class string) benchdb.ListRunItemsRow {
		it := benchdb.ListRunItemsRow{WorkID: id, ScopeID: "bench-0", WorkType: typeDeliver, State: state, TerminalAt: when(5 * s)}
		if class != "" {
			it.FailureClass = word(class)
		}
		return it
	}
	attempt := func(id int64, outcome string) benchdb.BenchAttempt {
		return benchdb.BenchAttempt{AttemptID: id, Process: "p1", WorkID: id, LeaseToken: 1, Attempt: 1, StartedAt: at(s), EndedAt: when(4 * s),
			Outcome: word(outcome), Finish: word("accepted"), FinishAt: when(4 * s), Stubborn: true}
	}
	asked := func(id int64, outcome string) benchdb.BenchCancel {
		c := benchdb.BenchCancel{CancelID: id, WorkID: id, Process: "p1", RequestedAt: at(2 * s), AnsweredAt: when(2 * s)}
		if outcome != "" {
			c.Outcome = word(outcome)
		}
		return c
	}
	const cancelledClass = workqueue.FailureCancelled
	d := runData{
		items: []benchdb.ListRunItemsRow{
			item(1, "skipped", cancelledClass),  // ended at once, never ran
			item(2, "skipped", cancelledClass),  // ended when its stubborn handler returned
			item(3, "skipped", cancelledClass),  // the answer was lost, the request committed
			item(4, "completed", ""),            // its handler returned success first
			item(5, "skipped", cancelledClass),  // never asked
			item(6, "skipped", cancelledClass),  // asked, but Cancel refused
			item(7, "dead", "designed-failure"), // asked, ended otherwise
		},
		attempts: []benchdb.BenchAttempt{attempt(2, "canceled"), attempt(3, "canceled"), attempt(4, "ok"), attempt(5, "canceled"), attempt(6, "canceled"), attempt(7, "error")},
		cancels:  []benchdb.BenchCancel{asked(1, cancelEnded), asked(2, cancelRunning), asked(3, ""), asked(4, cancelRunning), asked(6, cancelRefused), asked(7, cancelRunning)},
		events:   7,
	}
	v := verify(d, workload{events: make([]scopedEvent, 7), perEvent: 7}, 3*s, false, false)
	got := strings.Join(v.Problems, "; ")
	for _, want := range []string{"work 5 (no lane) ended cancelled, but the bench never asked", "work 6 (no lane) ended cancelled, but the bench never asked", "work 7 (no lane) was cancelled but ended dead"} {
		if !strings.Contains(got, want) {
			t.Errorf("no problem says %q: %q", want, v.Problems)
		}
	}
	if v.ProblemCount != 3 {
		t.Errorf("%d problems, want 3 (works 5, 6, 7): %q", v.ProblemCount, v.Problems)
	}
	want := CancelReport{Requested: 5, Running: 3, EndedAtOnce: 1, Unanswered: 1, Refused: 1, ItemsCancelled: 5, CompletedAnyway: 1}
	if r := cancelReport(d); !reflect.DeepEqual(r, want) {
		t.Errorf("cancel report %+v, want %+v", r, want)
	}
	// Each stubborn attempt ran from 1s to 4s. With a 2s deadline (at 3s),
	// the cancellations at 2s told works 2, 3, 4 and 7 to stop (work 6's
	// was refused) and the deadline works 5 and 6; with a 500ms deadline
	// (at 1.5s) the deadline told every one, before any cancellation.
	if r := stubbornReport(d, 2*s); r != (StubbornReport{Attempts: 6, Cancelled: 4, PastDeadline: 2}) {
		t.Errorf("stubborn report with a 2s deadline %+v, want 6 attempts, 4 cancelled, 2 past the deadline", r)
	}
	if r := stubbornReport(d, s/2); r != (StubbornReport{Attempts: 6, Cancelled: 0, PastDeadline: 6}) {
		t.Errorf("stubborn report with a 500ms deadline %+v, want 6 attempts, all 6 past the deadline", r)
	}
}
