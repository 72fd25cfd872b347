package workqueue_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/laneq/laneq/runtime/workqueue"
)

// projEvent is an event whose "project" work is a source projection of
// source, plus any extra work.
func projEvent(key, source string, extra ...workqueue.Work) workqueue.Event {
	return workqueue.Event{
		IdempotencyKey: key, RouteID: "route", RouteVersion: 1, EventKind: "state", SourceKind: "crm", SourceID: source,
		Payload: []byte(key),
		Work:    append([]workqueue.Work{{WorkType: "project", SourceLane: source, Projection: true}}, extra...),
	}
}

// project enqueues one projected event and returns its result.
func (f *fixture) project(key, source string) workqueue.EnqueuedWork {
	f.t.Helper()
	res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{projEvent(key, source)})
	if err != nil {
		f.t.Fatalf("enqueue %s: %v", key, err)
	}
	return res[0].Work[0]
}

var projectTypes = workqueue.ClaimRequest{WorkTypes: []string{"project"}}

// inputKeys is a claimed generation's input, as idempotency keys in order.
func (f *fixture) inputKeys(c workqueue.Claimed) []string {
	f.t.Helper()
	in, err := f.qu.ProjectionInput(f.ctx, c)
	if err != nil {
		f.t.Fatalf("projection input of %d: %v", c.WorkID, err)
	}
	var out []string
	for _, e := range in {
		out = append(out, e.IdempotencyKey)
	}
	return out
}

// generations counts a projection's rows by state, and its active and
// queued generations.
type generations struct {
	byState        map[string]int
	active, queued int
}

func (f *fixture) generations(source string) generations {
	f.t.Helper()
	rows, err := f.db.Query(`SELECT w.state, w.projection_active_key IS NOT NULL, w.projection_queued_key IS NOT NULL
		FROM work_item w JOIN event e ON e.event_id = w.event_id
		WHERE w.work_type = 'project' AND e.source_id = ?`, source)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	g := generations{byState: map[string]int{}}
	for rows.Next() {
		var state string
		var active, queued bool
		if err := rows.Scan(&state, &active, &queued); err != nil {
			f.t.Fatal(err)
		}
		g.byState[state]++
		if active {
			g.active++
		}
		if queued {
			g.queued++
		}
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return g
}

func (f *fixture) claimOne(c *workqueue.Claimer, req workqueue.ClaimRequest) workqueue.Claimed {
	f.t.Helper()
	got := f.claim(c, req)
	if len(got) != 1 {
		f.t.Fatalf("claimed %v, want one item", ids(got))
	}
	return got[0]
}

// Before its claim, the active generation advances to each newer event; its
// input is every event through the one it selects, and the next generation
// starts after it (seed 004 steps 1-2, invariant 9).
func TestProjectionAdvancesBeforeClaim(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	first := f.project("e1", "src")
	if first.Projection != workqueue.ProjectionCreated || !first.Created || first.State != workqueue.StatePending {
		t.Fatalf("first event: %+v, want a created pending generation", first)
	}
	for _, k := range []string{"e2", "e3"} {
		got := f.project(k, "src")
		if got.Projection != workqueue.ProjectionAdvanced || got.WorkID != first.WorkID || got.Created {
			t.Fatalf("%s: %+v, want generation %d advanced", k, got, first.WorkID)
		}
	}
	if g := f.generations("src"); g.active != 1 || g.queued != 0 || len(g.byState) != 1 || g.byState[workqueue.StatePending] != 1 {
		t.Fatalf("generations %+v, want one active pending", g)
	}
	gen1 := f.claimOne(c, projectTypes)
	if gen1.WorkID != first.WorkID || gen1.Event.IdempotencyKey != "e3" || gen1.ProjectionKey == "" {
		t.Fatalf("claimed %d selecting %q (key %q), want %d selecting e3", gen1.WorkID, gen1.Event.IdempotencyKey, gen1.ProjectionKey, first.WorkID)
	}
	if diff := cmp.Diff([]string{"e1", "e2", "e3"}, f.inputKeys(gen1)); diff != "" {
		t.Fatalf("first generation's input (-want +got):\n%s", diff)
	}
	f.complete(gen1)

	second := f.project("e4", "src")
	if second.Projection != workqueue.ProjectionCreated || second.WorkID == first.WorkID {
		t.Fatalf("after the terminal: %+v, want a new generation", second)
	}
	f.project("e5", "src")
	gen2 := f.claimOne(c, projectTypes)
	if diff := cmp.Diff([]string{"e4", "e5"}, f.inputKeys(gen2)); diff != "" {
		t.Fatalf("second generation's input (-want +got):\n%s", diff)
	}
	// Another source is another projection, with its own input.
	other := f.project("o1", "src ") // differs by a trailing space: another source lane
	if other.WorkID == second.WorkID || other.Projection != workqueue.ProjectionCreated {
		t.Fatalf("another source lane joined the projection: %+v", other)
	}
}

// While the active generation is claimed, newer events collapse into one
// inactive successor that neither runs nor blocks; completing the claimed
// generation activates it in its lane place, ahead of later lane followers
// (seed 004 steps 3 and 5).
func TestProjectionSuccessorWhileClaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	f.project("e1", "src")
	gen1 := f.claimOne(c, projectTypes)

	queued := f.project("e2", "src")
	if queued.Projection != workqueue.ProjectionQueued || !queued.Created || queued.State != workqueue.StateInactive {
		t.Fatalf("while claimed: %+v, want a queued inactive successor", queued)
	}
	replaced := f.project("e3", "src")
	if replaced.Projection != workqueue.ProjectionReplaced || replaced.WorkID != queued.WorkID {
		t.Fatalf("second event while claimed: %+v, want successor %d replaced", replaced, queued.WorkID)
	}
	// A per-event item in the same source lane, admitted after the
	// successor: behind the claimed generation, and behind the successor
	// once it activates.
	follower := f.one(workqueue.Work{SourceLane: "src"})
	if got := f.claim(c, workqueue.ClaimRequest{WorkTypes: []string{"project", "deliver"}}); len(got) != 0 {
		t.Fatalf("claimed %v while the lane's head runs: the successor must not run, the follower is blocked", ids(got))
	}
	if g := f.generations("src"); g.active != 1 || g.queued != 1 || g.byState[workqueue.StateInactive] != 1 {
		t.Fatalf("generations %+v, want one active and one queued inactive", g)
	}
	if diff := cmp.Diff([]string{"e1"}, f.inputKeys(gen1)); diff != "" {
		t.Fatalf("the claimed generation's input changed (-want +got):\n%s", diff)
	}

	fin := f.complete(gen1)
	if fin.Promoted != 1 || f.state(queued.WorkID) != workqueue.StatePending || f.state(follower) != workqueue.StateBlocked {
		t.Fatalf("after completing: promoted %d, successor %s, follower %s; want the successor promoted ahead of the follower",
			fin.Promoted, f.state(queued.WorkID), f.state(follower))
	}
	if g := f.generations("src"); g.active != 1 || g.queued != 0 || g.byState[workqueue.StateCompleted] != 1 {
		t.Fatalf("generations %+v, want the completed one and one active", g)
	}
	gen2 := f.claimOne(c, workqueue.ClaimRequest{WorkTypes: []string{"project", "deliver"}})
	if gen2.WorkID != queued.WorkID {
		t.Fatalf("claimed %d, want the activated successor %d", gen2.WorkID, queued.WorkID)
	}
	if diff := cmp.Diff([]string{"e2", "e3"}, f.inputKeys(gen2)); diff != "" {
		t.Fatalf("successor's input (-want +got):\n%s", diff)
	}
	f.complete(gen2)
	if got := f.claimOne(c, workqueue.ClaimRequest{WorkTypes: []string{"project", "deliver"}}); got.WorkID != follower {
		t.Fatalf("claimed %d, want the follower %d", got.WorkID, follower)
	}
}

// A retry keeps the successor inactive through the backoff; the retried
// generation runs again first, and its dead end activates the successor
// (seed 004 step 6).
func TestProjectionRetryKeepsSuccessorInactive(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	f.project("e1", "src")
	gen1 := f.claimOne(c, projectTypes)
	queued := f.project("e2", "src")
	if _, err := f.qu.Retry(f.ctx, gen1, workqueue.Failure{Class: "flaky", Summary: "try again"}); err != nil {
		t.Fatal(err)
	}
	// During the backoff a newer event still goes to the successor: the
	// retrying generation was claimed, so it is immutable.
	if got := f.project("e3", "src"); got.Projection != workqueue.ProjectionReplaced || got.WorkID != queued.WorkID {
		t.Fatalf("during the backoff: %+v, want successor %d replaced", got, queued.WorkID)
	}
	if got := f.state(queued.WorkID); got != workqueue.StateInactive {
		t.Fatalf("successor is %s during the retry backoff, want inactive", got)
	}
	f.makeDue(gen1.WorkID)
	again := f.claimOne(c, projectTypes)
	if again.WorkID != gen1.WorkID || again.Event.IdempotencyKey != "e1" {
		t.Fatalf("claimed %d selecting %q, want the retried generation %d still selecting e1", again.WorkID, again.Event.IdempotencyKey, gen1.WorkID)
	}
	if _, err := f.qu.Dead(f.ctx, again.Lease, workqueue.Failure{Class: "broken", Summary: "gave up"}); err != nil {
		t.Fatal(err)
	}
	if got := f.state(queued.WorkID); got != workqueue.StatePending {
		t.Fatalf("successor is %s after the claimed generation died, want pending", got)
	}
	gen2 := f.claimOne(c, projectTypes)
	if diff := cmp.Diff([]string{"e2", "e3"}, f.inputKeys(gen2)); diff != "" {
		t.Fatalf("successor's input (-want +got):\n%s", diff)
	}
}

// A lease that expires with its attempt budget spent goes to dead through
// the stale path, which hands off to the successor too.
func TestProjectionExpiredToDeadActivatesSuccessor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{MaxAttempts: 1})
	c := f.claimer("w1")
	f.project("e1", "src")
	gen1 := f.claimOne(c, projectTypes)
	queued := f.project("e2", "src")
	f.expireLease(gen1.WorkID)
	c.NoteDue()
	// The claim that finds the expired lease sends it to dead (its budget is
	// spent); the successor it activates is claimable from then on.
	if got := f.claim(c, projectTypes); len(got) > 1 || len(got) == 1 && got[0].WorkID != queued.WorkID {
		t.Fatalf("claimed %v, want nothing or the successor %d", ids(got), queued.WorkID)
	}
	if s := f.state(queued.WorkID); s != workqueue.StatePending {
		t.Fatalf("successor is %s after the expired generation went to dead, want pending", s)
	}
	got := f.claimOne(c, projectTypes)
	if got.WorkID != queued.WorkID {
		t.Fatalf("claimed %d, want the successor %d activated when %d expired to dead", got.WorkID, queued.WorkID, gen1.WorkID)
	}
	if s := f.state(gen1.WorkID); s != workqueue.StateDead {
		t.Fatalf("expired generation is %s, want dead", s)
	}
}

// A duplicate delivery is coverage, not advancement: it writes nothing,
// before the claim, while claimed and after the terminal (seed 004 step 11,
// invariant 11).
func TestProjectionDuplicateIsCovered(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	f.project("e1", "src")
	f.project("e2", "src")
	rows := func() (n int) {
		if err := f.db.QueryRow("SELECT COUNT(*) FROM work_item").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(when string) {
		t.Helper()
		before := rows()
		for _, k := range []string{"e1", "e2"} {
			got := f.project(k, "src")
			if got.Projection != workqueue.ProjectionCovered || got.Created {
				t.Fatalf("%s: duplicate %s = %+v, want covered", when, k, got)
			}
		}
		if after := rows(); after != before {
			t.Fatalf("%s: duplicates changed the work items from %d to %d", when, before, after)
		}
	}
	check("before the claim")
	gen1 := f.claimOne(c, projectTypes)
	check("while claimed")
	if g := f.generations("src"); g.queued != 0 {
		t.Fatalf("a duplicate created a successor: %+v", g)
	}
	f.complete(gen1)
	check("after the terminal")
	if got := f.claim(c, projectTypes); len(got) != 0 {
		t.Fatalf("a duplicate made work runnable again: %v", ids(got))
	}
}

// One batch: each projection selects its newest event once; every event is
// stored; per-event work in the same events is created as usual.
func TestProjectionBatchCollapses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	var batch []workqueue.Event
	for i := range 10 {
		for _, src := range []string{"a", "b", "c"} {
			batch = append(batch, projEvent(fmt.Sprintf("%s-%d", src, i), src, workqueue.Work{WorkType: "deliver"}))
		}
	}
	res, err := f.qu.Enqueue(f.ctx, scope, batch)
	if err != nil {
		t.Fatal(err)
	}
	selected := map[string]int64{}
	for i, r := range res {
		src := batch[i].SourceID
		w := r.Work[0]
		want := workqueue.ProjectionCollapsed
		if i >= 27 {
			want = workqueue.ProjectionCreated
		}
		if w.Projection != want || w.WorkID == 0 {
			t.Fatalf("event %d (%s): %+v, want %s", i, batch[i].IdempotencyKey, w, want)
		}
		if id, ok := selected[src]; ok && id != w.WorkID {
			t.Fatalf("source %s has generations %d and %d", src, id, w.WorkID)
		}
		selected[src] = w.WorkID
		if !r.Work[1].Created {
			t.Fatalf("event %d: per-event work not created: %+v", i, r.Work[1])
		}
	}
	var events, project, deliver int
	if err := f.db.QueryRow(`SELECT (SELECT COUNT(*) FROM event), (SELECT COUNT(*) FROM work_item WHERE work_type = 'project'),
		(SELECT COUNT(*) FROM work_item WHERE work_type = 'deliver')`).Scan(&events, &project, &deliver); err != nil {
		t.Fatal(err)
	}
	if events != 30 || project != 3 || deliver != 30 {
		t.Fatalf("events %d, projection items %d, per-event items %d; want 30, 3, 30", events, project, deliver)
	}
	c := f.claimer("w1")
	got := f.claim(c, projectTypes)
	if len(got) != 3 {
		t.Fatalf("claimed %d projection generations, want 3", len(got))
	}
	for _, g := range got {
		src := g.Event.SourceID
		var want []string
		for i := range 10 {
			want = append(want, fmt.Sprintf("%s-%d", src, i))
		}
		if diff := cmp.Diff(want, f.inputKeys(g)); diff != "" {
			t.Fatalf("source %s input (-want +got):\n%s", src, diff)
		}
	}
}

func TestProjectionRejectsWhatItCannotOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	for name, ev := range map[string]workqueue.Event{
		"target lane":        projEvent("x1", "src"),
		"dependency":         projEvent("x2", "src"),
		"two projected work": projEvent("x3", "src", workqueue.Work{WorkType: "mirror", SourceLane: "src", Projection: true}),
	} {
		switch name {
		case "target lane":
			ev.Work[0].TargetLane = "acct"
		case "dependency":
			ev.Work[0].WaitFor = &workqueue.Dependency{WakeKey: "w", Keys: []string{"k"}}
		}
		if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev}); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Without a source lane a projection is per-event work (seed 004 step 7).
	for i := range 2 {
		ev := projEvent(fmt.Sprintf("n%d", i), "src")
		ev.Work[0].SourceLane = ""
		res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev})
		if err != nil {
			t.Fatal(err)
		}
		if w := res[0].Work[0]; w.Projection != "" || !w.Created {
			t.Fatalf("laneless projection %d: %+v, want a per-event item", i, w)
		}
	}
	// An event first enqueued without the projection cannot join it later.
	plain := projEvent("p1", "src")
	plain.Work[0].Projection = false
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{plain}); err != nil {
		t.Fatal(err)
	}
	late := projEvent("p1", "src")
	late.Work[0].WorkType = "project2"
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{late}); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("a projection added to an existing event: err = %v, want ErrInvalid", err)
	}
}

// TestProjectionSuccessorRace: an event enqueued while the claimed
// generation completes: enqueue first, completion first, and both released
// together by a barrier, each order at least five times (sixteen rounds).
// Whichever commits first, no input is lost or run twice: the generations
// executed cover every event exactly once, in order, and exactly one
// generation is active after each round.
func TestProjectionSuccessorRace(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	const rounds = 16
	var executed []string
	for round := range rounds {
		src := fmt.Sprintf("src-%d", round)
		f.project(src+"/e1", src)
		gen1 := f.claimOne(c, projectTypes)
		executed = append(executed, f.inputKeys(gen1)...)
		var enqErr, finErr error
		enqueue := func() { _, enqErr = f.qu.Enqueue(f.ctx, scope, []workqueue.Event{projEvent(src+"/e2", src)}) }
		complete := func() { _, finErr = f.qu.Complete(f.ctx, gen1.Lease) }
		switch round % 3 {
		case 0:
			enqueue()
			complete()
		case 1:
			complete()
			enqueue()
		default:
			start := make(chan struct{})
			var wg sync.WaitGroup
			wg.Add(2)
			go func() { defer wg.Done(); <-start; enqueue() }()
			go func() { defer wg.Done(); <-start; complete() }()
			close(start)
			wg.Wait()
		}
		if enqErr != nil || finErr != nil {
			t.Fatalf("round %d: enqueue %v, complete %v", round, enqErr, finErr)
		}
		if g := f.generations(src); g.active != 1 || g.queued != 0 || g.byState[workqueue.StateCompleted] != 1 {
			t.Fatalf("round %d: generations %+v, want the completed one and exactly one active, none queued", round, g)
		}
		gen2 := f.claimOne(c, projectTypes)
		executed = append(executed, f.inputKeys(gen2)...)
		f.complete(gen2)
	}
	var want []string
	for round := range rounds {
		want = append(want, fmt.Sprintf("src-%d/e1", round), fmt.Sprintf("src-%d/e2", round))
	}
	if diff := cmp.Diff(want, executed); diff != "" {
		t.Fatalf("executed inputs (-want +got):\n%s", diff)
	}
}

// TestProjectionAcceptance (seed 004's acceptance evidence): 400 sources ×
// 10 events plus 400 per-event actions in one batch give 4,400 events, 400
// active projection generations (one per source) and 400 action items.
// Then, while more projection traffic arrives (five more batches of one
// event per source), a consumer claims and completes actions and
// generations together until everything is done: every action completes,
// and each source's executed generations cover its 15 events exactly once,
// in order.
func TestProjectionAcceptance(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{MaxEnqueueBatch: 4400})
	const sources, perSource, later = 400, 10, 5
	var batch []workqueue.Event
	for i := range perSource {
		for s := range sources {
			batch = append(batch, projEvent(fmt.Sprintf("s%d/e%02d", s, i), fmt.Sprintf("s%d", s)))
		}
	}
	for a := range sources {
		batch = append(batch, workqueue.Event{IdempotencyKey: fmt.Sprintf("action-%d", a), RouteID: "route", RouteVersion: 1,
			EventKind: "action", SourceKind: "api", SourceID: fmt.Sprint(a), Work: []workqueue.Work{{WorkType: "act"}}})
	}
	if _, err := f.qu.Enqueue(f.ctx, scope, batch); err != nil {
		t.Fatal(err)
	}
	var events, active, actions, maxPerSource int
	if err := f.db.QueryRow(`SELECT (SELECT COUNT(*) FROM event),
		(SELECT COUNT(*) FROM work_item WHERE work_type = 'project' AND projection_active_key IS NOT NULL),
		(SELECT COUNT(*) FROM work_item WHERE work_type = 'act'),
		(SELECT COALESCE(MAX(n), 0) FROM (SELECT COUNT(*) AS n FROM work_item WHERE work_type = 'project' GROUP BY projection_key) g)`).
		Scan(&events, &active, &actions, &maxPerSource); err != nil {
		t.Fatal(err)
	}
	if events != 4400 || active != 400 || actions != 400 || maxPerSource != 1 {
		t.Fatalf("events %d, active generations %d, actions %d, most generations of one source %d; want 4400, 400, 400, 1",
			events, active, actions, maxPerSource)
	}

	traffic := make(chan error, 1)
	go func() {
		for i := range later {
			var more []workqueue.Event
			for s := range sources {
				more = append(more, projEvent(fmt.Sprintf("s%d/e%02d", s, perSource+i), fmt.Sprintf("s%d", s)))
			}
			if _, err := f.qu.Enqueue(f.ctx, scope, more); err != nil {
				traffic <- err
				return
			}
		}
		traffic <- nil
	}()
	c := f.claimer("w1")
	executed := map[string][]string{}
	actionsDone := 0
	trafficDone := false
	for idle := 0; idle < 2; {
		got := f.claim(c, workqueue.ClaimRequest{WorkTypes: []string{"act", "project"}, Max: 64})
		if len(got) == 0 {
			if !trafficDone { // nothing to claim until more traffic commits
				if err := <-traffic; err != nil {
					t.Fatalf("projection traffic: %v", err)
				}
				trafficDone = true
			} else {
				idle++ // the second empty claim, from the front of the range, ends the drain
			}
			c.Rewind()
			continue
		}
		idle = 0
		var leases []workqueue.Lease
		for _, g := range got {
			if g.WorkType == "act" {
				actionsDone++
			} else {
				executed[g.Event.SourceID] = append(executed[g.Event.SourceID], f.inputKeys(g)...)
			}
			leases = append(leases, g.Lease)
		}
		errs, _ := f.qu.CompleteMany(f.ctx, leases)
		for i, err := range errs {
			if err != nil {
				t.Fatalf("complete %d: %v", got[i].WorkID, err)
			}
		}
	}
	if actionsDone != sources {
		t.Fatalf("completed %d actions, want %d", actionsDone, sources)
	}
	for s := range sources {
		var want []string
		for i := range perSource + later {
			want = append(want, fmt.Sprintf("s%d/e%02d", s, i))
		}
		if diff := cmp.Diff(want, executed[fmt.Sprintf("s%d", s)]); diff != "" {
			t.Fatalf("source s%d executed inputs (-want +got):\n%s", s, diff)
		}
	}
}

// Replaying a dead projection generation (seed 004 step 9) makes a child
// that keeps the projection, becomes its active generation and runs the
// parent's input again; newer events queue behind it instead of advancing
// it. A generation with a newer one is refused.
func TestProjectionReplay(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	f.project("e1", "src")
	f.project("e2", "src")
	gen1 := f.claimOne(c, projectTypes)
	if _, err := f.qu.Dead(f.ctx, gen1.Lease, workqueue.Failure{Class: "broken", Summary: "handler refused"}); err != nil {
		t.Fatal(err)
	}
	child, err := f.qu.Replay(f.ctx, scope, gen1.WorkID)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if g := f.generations("src"); g.active != 1 || g.byState[workqueue.StateDead] != 1 {
		t.Fatalf("generations after the replay %+v, want the dead parent and one active child", g)
	}
	if got := f.project("e3", "src"); got.Projection != workqueue.ProjectionQueued {
		t.Fatalf("an event after the replay: %+v, want a queued successor (a replay child is not advanced)", got)
	}
	again := f.claimOne(c, projectTypes)
	if again.WorkID != child.WorkID {
		t.Fatalf("claimed %d, want the child %d", again.WorkID, child.WorkID)
	}
	if diff := cmp.Diff([]string{"e1", "e2"}, f.inputKeys(again)); diff != "" {
		t.Fatalf("the child's input (-want +got):\n%s", diff)
	}
	f.complete(again)
	next := f.claimOne(c, projectTypes)
	if diff := cmp.Diff([]string{"e3"}, f.inputKeys(next)); diff != "" {
		t.Fatalf("the successor's input (-want +got):\n%s", diff)
	}
	if _, err := f.qu.Dead(f.ctx, next.Lease, workqueue.Failure{Class: "broken", Summary: "again"}); err != nil {
		t.Fatal(err)
	}
	// A dead generation with a newer one is refused, and writes nothing.
	f.project("o1", "old")
	old := f.claimOne(c, projectTypes)
	if _, err := f.qu.Dead(f.ctx, old.Lease, workqueue.Failure{Class: "broken", Summary: "old"}); err != nil {
		t.Fatal(err)
	}
	f.project("o2", "old")
	if _, err := f.qu.Replay(f.ctx, scope, old.WorkID); !errors.Is(err, workqueue.ErrNotReplayable) {
		t.Fatalf("replay of a generation with a newer one: %v, want ErrNotReplayable", err)
	}
	if r := f.replayFacts(old.WorkID); r.replayedAt {
		t.Fatalf("a refused replay reserved the generation: %+v", r)
	}
	newer := f.claimOne(c, projectTypes)
	if diff := cmp.Diff([]string{"o2"}, f.inputKeys(newer)); diff != "" {
		t.Fatalf("the newer generation's input (-want +got):\n%s", diff)
	}
	f.complete(newer)
	// The newest dead generation can be replayed, and runs its own input.
	if _, err := f.qu.Replay(f.ctx, scope, next.WorkID); err != nil {
		t.Fatalf("replay of the newest generation: %v", err)
	}
	last := f.claimOne(c, projectTypes)
	if diff := cmp.Diff([]string{"e3"}, f.inputKeys(last)); diff != "" {
		t.Fatalf("the second child's input (-want +got):\n%s", diff)
	}
}

// One batch mixing duplicates (covered) with new events of the same
// projection, another source and another route version: duplicates neither
// advance nor select; the newest new event of each projection is selected;
// a route version is its own projection (seed 004's key).
func TestProjectionMixedBatch(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	f.project("a1", "A")
	f.project("a2", "A")
	v2 := func(key string) workqueue.Event {
		ev := projEvent(key, "A")
		ev.RouteVersion = 2
		return ev
	}
	res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{
		projEvent("a3", "A"), projEvent("a1", "A"), projEvent("b1", "B"), v2("v1"), projEvent("a4", "A"), projEvent("a2", "A"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var outcomes []string
	for _, r := range res {
		outcomes = append(outcomes, r.Work[0].Projection)
	}
	want := []string{workqueue.ProjectionCollapsed, workqueue.ProjectionCovered, workqueue.ProjectionCreated, workqueue.ProjectionCreated, workqueue.ProjectionAdvanced, workqueue.ProjectionCovered}
	if diff := cmp.Diff(want, outcomes); diff != "" {
		t.Fatalf("outcomes (-want +got):\n%s", diff)
	}
	if res[0].Work[0].WorkID != res[4].Work[0].WorkID || res[3].Work[0].WorkID == res[4].Work[0].WorkID {
		t.Fatalf("a3 reported generation %d, a4 %d, v1 %d: want a3 and a4 on one generation, v1 on its own",
			res[0].Work[0].WorkID, res[4].Work[0].WorkID, res[3].Work[0].WorkID)
	}
	// v1's generation shares source lane A, so it runs after A's: drain.
	inputs := map[string][]string{}
	for batch := f.claim(c, projectTypes); len(batch) > 0; batch = f.claim(c, projectTypes) {
		for _, g := range batch {
			inputs[g.Event.IdempotencyKey] = f.inputKeys(g)
			f.complete(g)
		}
	}
	wantInputs := map[string][]string{"a4": {"a1", "a2", "a3", "a4"}, "b1": {"b1"}, "v1": {"v1"}}
	if diff := cmp.Diff(wantInputs, inputs); diff != "" {
		t.Fatalf("inputs by selected event (-want +got):\n%s", diff)
	}
}
