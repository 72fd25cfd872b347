package workqueue_test

import (
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// otherQueue is a Queue on its own pool to the fixture's database, as
// another process has.
func (f *fixture) otherQueue() *workqueue.Queue {
	f.t.Helper()
	db, err := sql.Open("mysql", f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close() })
	// Its writers queue on the scope row's lock (every enqueue takes it
	// first): on a loaded machine the last of 32 waits past the session's
	// 5s lock wait more than the default six runs allow. The test is about
	// the unique key, not that budget.
	q, err := workqueue.New(db, workqueue.Config{TxAttempts: 40})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = q.Close() })
	return q
}

// enqueueUnique enqueues one event with one "deliver" item of unique key
// and returns the item's report.
func (f *fixture) enqueueUnique(q *workqueue.Queue, idempotencyKey, unique string) (workqueue.EnqueuedWork, error) {
	res, err := q.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: idempotencyKey, RouteID: "r", RouteVersion: 1,
		EventKind: "k", SourceKind: "s", SourceID: idempotencyKey, Payload: []byte("{}"),
		Work: []workqueue.Work{{WorkType: "deliver", UniqueKey: unique}}}})
	if err != nil {
		return workqueue.EnqueuedWork{}, err
	}
	return res[0].Work[0], nil
}

// TestUniqueWhileLiveRace: 32 concurrent enqueues of one unique key, each
// through its own Queue (its own pool, as separate processes have), create
// one live item; the other 31 are refused with that item (each stores a
// terminal record naming it). Completing it frees the key: one more
// enqueue is accepted, and refused again behind the new item. A key with a trailing space is refused as invalid, never
// taken for the key without it.
func TestUniqueWhileLiveRace(t *testing.T) {
	// Not parallel: its 32 writers queue on one scope lock, and beside
	// other tests the last of them waits past the session's 5s lock wait.
	f := newFixture(t, workqueue.Config{})
	const writers = 32
	queues := make([]*workqueue.Queue, writers)
	for i := range queues {
		queues[i] = f.otherQueue()
	}
	results := make([]workqueue.EnqueuedWork, writers)
	errs := make([]error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = f.enqueueUnique(queues[i], fmt.Sprintf("race-%d", i), "sync:account-7")
		}()
	}
	close(start)
	wg.Wait()
	var created []workqueue.EnqueuedWork
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("writer %d: %v", i, errs[i])
		}
		if r.Created {
			created = append(created, r)
		}
	}
	if len(created) != 1 {
		t.Fatalf("%d items created for one unique key, want 1: %+v", len(created), results)
	}
	live := created[0]
	for i, r := range results {
		if !r.Created && (!r.Refused || r.WorkID != live.WorkID || r.State != workqueue.StatePending) {
			t.Fatalf("writer %d: %+v, want refused with the live item %d (pending)", i, r, live.WorkID)
		}
	}
	if n := f.count("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND refused_by_work_id IS NULL", scope); n != 1 {
		t.Fatalf("%d work items besides refusal records, want the one live item", n)
	}
	if n := f.count("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND refused_by_work_id = ? AND state = 'skipped'", scope, live.WorkID); n != writers-1 {
		t.Fatalf("%d refusal records naming the live item, want one per refused enqueue (%d)", n, writers-1)
	}
	if n := f.count("SELECT COUNT(*) FROM event WHERE scope_id = ?", scope); n != writers {
		t.Fatalf("%d events, want every enqueue's event stored (%d)", n, writers)
	}
	if _, err := f.enqueueUnique(f.qu, "spaced", "sync:account-7 "); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("a key with a trailing space: %v, want ErrInvalid (never merged with the key without it)", err)
	}

	c := f.claimer("w")
	got := f.claim(c, workqueue.ClaimRequest{Max: 1})
	if len(got) != 1 || got[0].WorkID != live.WorkID {
		t.Fatalf("claimed %v, want the live item %d", ids(got), live.WorkID)
	}
	if again, err := f.enqueueUnique(f.qu, "while-running", "sync:account-7"); err != nil || !again.Refused || again.State != workqueue.StateProcessing {
		t.Fatalf("while it runs: %+v (%v), want refused with a processing item", again, err)
	}
	f.complete(got[0])
	next, err := f.enqueueUnique(f.qu, "after", "sync:account-7")
	if err != nil || !next.Created || next.WorkID == live.WorkID {
		t.Fatalf("after the live item completed: %+v (%v), want a new item", next, err)
	}
	if again, err := f.enqueueUnique(f.qu, "after-2", "sync:account-7"); err != nil || !again.Refused || again.WorkID != next.WorkID {
		t.Fatalf("behind the new item: %+v (%v), want refused with %d", again, err, next.WorkID)
	}
}

// TestUniqueKeyInOneBatchAndDead: within one batch the first item of a key
// is created and later ones are refused with it; a dead item frees its
// key, a duplicate event keeps its own item and is not refused, a moved
// generation starts afresh, and bad keys are refused before anything is
// written.
func TestUniqueKeyInOneBatchAndDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	ev := func(key, unique string) workqueue.Event {
		return workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", UniqueKey: unique}}}
	}
	res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev("b1", "u"), ev("b2", "u"), ev("b3", "v")})
	if err != nil {
		t.Fatal(err)
	}
	first, second, other := res[0].Work[0], res[1].Work[0], res[2].Work[0]
	if !first.Created || !second.Refused || second.WorkID != first.WorkID || second.State != first.State || !other.Created {
		t.Fatalf("one batch: %+v, %+v, %+v; want the second refused with the first", first, second, other)
	}
	// The same event again (a retried enqueue) is a duplicate, not refused.
	if dup, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev("b1", "u")}); err != nil || !dup[0].Duplicate || dup[0].Work[0].Refused || dup[0].Work[0].WorkID != first.WorkID {
		t.Fatalf("duplicate event: %+v (%v)", dup, err)
	}
	c := f.claimer("w")
	got := f.claim(c, workqueue.ClaimRequest{Max: 10})
	for _, it := range got {
		if it.WorkID == first.WorkID {
			if _, err := f.qu.Dead(f.ctx, it.Lease, workqueue.Failure{Class: "broken", Summary: "refused"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if after, err := f.enqueueUnique(f.qu, "after-dead", "u"); err != nil || !after.Created {
		t.Fatalf("after the item went dead: %+v (%v), want a new item", after, err)
	}
	if err := f.qu.SetGeneration(f.ctx, scope, 2); err != nil {
		t.Fatal(err)
	}
	if fresh, err := f.enqueueUnique(f.qu, "gen-2", "u"); err != nil || !fresh.Created {
		t.Fatalf("in the next generation: %+v (%v), want a new item", fresh, err)
	}
	for name, w := range map[string]workqueue.Work{
		"too long":   {WorkType: "deliver", UniqueKey: string(make([]byte, workqueue.MaxUniqueKey+1))},
		"newline":    {WorkType: "deliver", UniqueKey: "a\nb"},
		"non-ascii":  {WorkType: "deliver", UniqueKey: "ключ"},
		"projection": {WorkType: "deliver", UniqueKey: "p", SourceLane: "L", Projection: true},
	} {
		_, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: "bad-" + name, Payload: []byte("{}"), Work: []workqueue.Work{w}}})
		if !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestUniqueWhileLiveAcrossProcesses: two OS processes, 16 goroutines
// each, enqueue one unique key at once: one item is created, and every
// other enqueue, in either process, is refused with it.
func TestUniqueWhileLiveAcrossProcesses(t *testing.T) {
	// Not parallel: its 32 writers queue on one scope lock, and beside
	// other tests the last of them waits past the session's 5s lock wait.
	f := newFixture(t, workqueue.Config{})
	procs := runHelpers(t, 2, "enqueuer", helperDSNEnv+"="+f.dsn, helperScopeEnv+"="+scope, helperUniqueEnv+"=nightly-report")
	created, refusedWith := map[string]int{}, map[string]int{}
	for _, p := range procs {
		for _, line := range strings.Split(strings.TrimSpace(p.out.String()), "\n") {
			what, id, _ := strings.Cut(line, " ")
			switch what {
			case "created":
				created[id]++
			case "refused":
				refusedWith[id]++
			default:
				t.Fatalf("enqueuer printed %q", line)
			}
		}
	}
	if len(created) != 1 {
		t.Fatalf("created %v, want exactly one item", created)
	}
	for id := range created {
		if len(refusedWith) != 1 || refusedWith[id] != 31 {
			t.Fatalf("refused with %v, want all 31 others with %s", refusedWith, id)
		}
	}
}

// TestUniqueRefusalSurvivesIdempotentRetry: an enqueue refused by a unique
// key stores its item's record, terminal at once (skipped, failure class
// unique_refused, naming the live item that held the key). Enqueued again
// with the same idempotency key (a redeploy re-enqueueing the latest
// periodic tick), it gets the same refusal: while that item is live, and
// once it completed and the key is free, so the refused work never runs
// late. A batch whose refusals are written with one load, and its repeat,
// behave the same. A new idempotency key then takes the free key.
func TestUniqueRefusalSurvivesIdempotentRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const unique = "nightly-report"
	tick := func(key string) workqueue.Event {
		return workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", UniqueKey: unique}}}
	}
	enqueue := func(keys ...string) []workqueue.EnqueuedEvent {
		t.Helper()
		evs := make([]workqueue.Event, len(keys))
		for i, k := range keys {
			evs[i] = tick(k)
		}
		res, err := f.qu.Enqueue(f.ctx, scope, evs)
		if err != nil {
			t.Fatalf("enqueue %v: %v", keys, err)
		}
		return res
	}
	// refusedWith fails unless every event of res was refused with the
	// item holder, in holderState, and created nothing.
	refusedWith := func(what string, res []workqueue.EnqueuedEvent, duplicate bool, holder int64, holderState string) {
		t.Helper()
		for i, ev := range res {
			w := ev.Work[0]
			if ev.Duplicate != duplicate || !w.Refused || w.Created || w.WorkID != holder || w.State != holderState {
				t.Fatalf("%s, event %d: duplicate=%v %+v; want duplicate=%v, refused with item %d (%s), nothing created",
					what, i, ev.Duplicate, w, duplicate, holder, holderState)
			}
		}
	}

	first := enqueue("tick-1")[0].Work[0]
	if !first.Created {
		t.Fatalf("the first tick: %+v, want its item created", first)
	}
	refusedWith("a second tick while the first runs", enqueue("tick-2"), false, first.WorkID, workqueue.StatePending)
	batch := []string{"tick-3", "tick-4", "tick-5", "tick-6", "tick-7"} // more refusals than a load's minimum
	refusedWith("a batch of ticks", enqueue(batch...), false, first.WorkID, workqueue.StatePending)
	refusedWith("tick-2 again while the key is held", enqueue("tick-2"), true, first.WorkID, workqueue.StatePending)

	c := f.claimer("w")
	got := f.claim(c, workqueue.ClaimRequest{Max: 10})
	if len(got) != 1 || got[0].WorkID != first.WorkID {
		t.Fatalf("claimed %v, want only the first tick's item %d", ids(got), first.WorkID)
	}
	f.complete(got[0])

	refusedWith("tick-2 again once the key is free", enqueue("tick-2"), true, first.WorkID, workqueue.StateCompleted)
	refusedWith("the batch again once the key is free", enqueue(batch...), true, first.WorkID, workqueue.StateCompleted)
	if n := f.count("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND state <> 'skipped' AND work_id <> ?", scope, first.WorkID); n != 0 {
		t.Fatalf("%d items besides the first tick's that are not refusal records: a refused tick's work was created late", n)
	}
	if late := f.claim(c, workqueue.ClaimRequest{Max: 10}); len(late) != 0 {
		t.Fatalf("claimed %v after the repeats: a refused tick's work runs late", ids(late))
	}

	// Each refused tick's record says it was refused, and by which item.
	rows, err := f.db.Query(`SELECT e.idempotency_key, w.state, COALESCE(w.failure_class, ''), COALESCE(w.refused_by_work_id, 0),
		w.terminal_at IS NOT NULL, w.unique_live_key IS NULL
		FROM event e JOIN work_item w ON w.event_id = e.event_id
		WHERE e.scope_id = ? AND e.idempotency_key <> 'tick-1' ORDER BY e.idempotency_key`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	records := 0
	for rows.Next() {
		var key, state, class string
		var by int64
		var terminal, keyless bool
		if err := rows.Scan(&key, &state, &class, &by, &terminal, &keyless); err != nil {
			t.Fatal(err)
		}
		if state != workqueue.StateSkipped || class != workqueue.FailureUniqueRefused || by != first.WorkID || !terminal || !keyless {
			t.Errorf("%s's record: state %s, class %q, refused by %d, terminal %v, holds no key %v; want skipped, %q, %d, terminal, no key",
				key, state, class, by, terminal, keyless, workqueue.FailureUniqueRefused, first.WorkID)
		}
		records++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if records != 1+len(batch) {
		t.Fatalf("%d refusal records, want one per refused tick (%d)", records, 1+len(batch))
	}

	next := enqueue("tick-8")[0].Work[0]
	if !next.Created || next.WorkID == first.WorkID {
		t.Fatalf("a new tick once the key is free: %+v, want a new item", next)
	}
}
