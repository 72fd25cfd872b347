package workqueue_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/sqlwrap"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestEnqueueIsIdempotent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	batch := []workqueue.Event{
		{IdempotencyKey: "d1/0", Payload: []byte("a"), Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "c:1"}}},
		{IdempotencyKey: "d1/1", Payload: []byte("b"), Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "c:1"}}},
	}
	first, err := f.qu.Enqueue(f.ctx, scope, batch)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Work[0].State != workqueue.StatePending || first[1].Work[0].State != workqueue.StateBlocked {
		t.Fatalf("lane states = %s, %s; want pending head and blocked follower", first[0].Work[0].State, first[1].Work[0].State)
	}

	// Redelivery of the whole batch plus one new event, which also asks for a
	// work type the first event did not have.
	batch[0].Work = append(batch[0].Work, workqueue.Work{WorkType: "audit"})
	again, err := f.qu.Enqueue(f.ctx, scope, append(batch, workqueue.Event{IdempotencyKey: "d2/0", Payload: []byte("c")}))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if !again[i].Duplicate || again[i].EventID != first[i].EventID || again[i].Work[0].WorkID != first[i].Work[0].WorkID || again[i].Work[0].Created {
			t.Fatalf("event %d: %+v, want the existing ids reported as duplicate (first: %+v)", i, again[i], first[i])
		}
	}
	if audit := again[0].Work[1]; !audit.Created || audit.WorkType != "audit" || audit.State != workqueue.StatePending {
		t.Fatalf("missing work type: %+v, want it created", audit)
	}
	if again[2].Duplicate {
		t.Fatal("new event reported as duplicate")
	}
	var events, items int
	if err := f.db.QueryRow("SELECT (SELECT COUNT(*) FROM event), (SELECT COUNT(*) FROM work_item)").Scan(&events, &items); err != nil {
		t.Fatal(err)
	}
	if events != 3 || items != 3 {
		t.Fatalf("rows: %d events, %d work items; want 3 and 3", events, items)
	}
}

func TestEnqueueRejectsBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	cases := map[string][]workqueue.Event{
		"no events":          {},
		"empty key":          {{IdempotencyKey: ""}},
		"key twice":          {{IdempotencyKey: "k"}, {IdempotencyKey: "k"}},
		"empty work type":    {{IdempotencyKey: "k", Work: []workqueue.Work{{}}}},
		"work type twice":    {{IdempotencyKey: "k", Work: []workqueue.Work{{WorkType: "a"}, {WorkType: "a"}}}},
		"lane too long":      {{IdempotencyKey: "k", Work: []workqueue.Work{{WorkType: "a", SourceLane: string(make([]rune, 256))}}}},
		"negative delay":     {{IdempotencyKey: "k", Work: []workqueue.Work{{WorkType: "a", Delay: -time.Second}}}},
		"space in work type": {{IdempotencyKey: "k", Work: []workqueue.Work{{WorkType: "a b"}}}},
	}
	for name, events := range cases {
		if _, err := f.qu.Enqueue(f.ctx, scope, events); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := f.qu.Enqueue(f.ctx, "no-such-scope", []workqueue.Event{{IdempotencyKey: "k"}}); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Errorf("unknown scope: err = %v", err)
	}
	// A nil payload is an empty payload, not a NULL the column rejects.
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: "no-payload", Work: []workqueue.Work{{WorkType: "a"}}}}); err != nil {
		t.Errorf("nil payload: %v", err)
	}
}

// TestConcurrentDuplicateEnqueue is seed 000's materialization race: several
// enqueuers deliver overlapping batches at once. Whoever waits on the scope
// lock must see the winner's rows through a current read: no MySQL 1062
// leaks, nothing rolls back, and every key ends up with exactly one event
// and one work item.
func TestConcurrentDuplicateEnqueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const writers, keys, rounds = 8, 40, 5
	for round := range rounds {
		start := make(chan struct{})
		results := make([][]workqueue.EnqueuedEvent, writers)
		errs := make([]error, writers)
		var wg sync.WaitGroup
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Every writer covers all keys, starting at a different offset.
				batch := make([]workqueue.Event, keys)
				for i := range keys {
					k := (i + w*5) % keys
					batch[i] = workqueue.Event{
						IdempotencyKey: fmt.Sprintf("r%d/k%d", round, k),
						Payload:        []byte{byte(k)},
						Work:           []workqueue.Work{{WorkType: "deliver", SourceLane: fmt.Sprintf("lane-%d", k%7)}},
					}
				}
				<-start
				results[w], errs[w] = f.qu.Enqueue(f.ctx, scope, batch)
			}()
		}
		close(start)
		wg.Wait()
		eventOf := map[string]int64{}
		for w := range writers {
			if errs[w] != nil {
				t.Fatalf("round %d writer %d: %v", round, w, errs[w])
			}
			for i, r := range results[w] {
				k := fmt.Sprintf("r%d/k%d", round, (i+w*5)%keys)
				if prev, ok := eventOf[k]; ok && prev != r.EventID {
					t.Fatalf("key %s resolved to events %d and %d", k, prev, r.EventID)
				}
				eventOf[k] = r.EventID
			}
		}
		var events, items, dupItems int
		if err := f.db.QueryRow(`SELECT
			(SELECT COUNT(*) FROM event WHERE idempotency_key LIKE ?),
			(SELECT COUNT(*) FROM work_item w JOIN event e ON e.event_id = w.event_id WHERE e.idempotency_key LIKE ?),
			(SELECT COUNT(*) FROM (SELECT event_id FROM work_item GROUP BY event_id, work_type HAVING COUNT(*) > 1) d)`,
			fmt.Sprintf("r%d/%%", round), fmt.Sprintf("r%d/%%", round)).Scan(&events, &items, &dupItems); err != nil {
			t.Fatal(err)
		}
		if events != keys || items != keys || dupItems != 0 {
			t.Fatalf("round %d: %d events, %d work items, %d duplicated; want %d, %d, 0", round, events, items, dupItems, keys, keys)
		}
	}
}

func TestSourceLaneFIFO(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	a := f.one(workqueue.Work{SourceLane: "contact:1"})
	b := f.one(workqueue.Work{SourceLane: "contact:1"})
	cc := f.one(workqueue.Work{SourceLane: "contact:1"})
	other := f.one(workqueue.Work{SourceLane: "contact:2"})

	got := f.claim(c, workqueue.ClaimRequest{})
	if diff := cmp.Diff([]int64{a, other}, ids(got)); diff != "" {
		t.Fatalf("first claim (-want +got):\n%s", diff)
	}
	// While the head is processing, nothing else of its lane is claimable.
	if again := f.claim(c, workqueue.ClaimRequest{}); len(again) != 0 {
		t.Fatalf("claimed %v while the lane head runs", ids(again))
	}
	// A retry keeps the head live: followers stay blocked through its backoff.
	if _, err := f.qu.Retry(f.ctx, got[0], workqueue.Failure{Class: "transient"}); err != nil {
		t.Fatal(err)
	}
	if again := f.claim(c, workqueue.ClaimRequest{}); len(again) != 0 {
		t.Fatalf("claimed %v during the head's backoff", ids(again))
	}
	f.makeDue(a)
	head := f.claim(c, workqueue.ClaimRequest{})
	if diff := cmp.Diff([]int64{a}, ids(head)); diff != "" {
		t.Fatalf("after retry (-want +got):\n%s", diff)
	}
	fin, err := f.qu.Complete(f.ctx, head[0].Lease)
	if err != nil {
		t.Fatal(err)
	}
	if fin.Promoted != 1 || f.state(b) != workqueue.StatePending || f.state(cc) != workqueue.StateBlocked {
		t.Fatalf("after completing the head: promoted %d, b %s, c %s", fin.Promoted, f.state(b), f.state(cc))
	}
	// The promoted follower became claimable now: it sorts after the
	// claimer's floor although its lane ordinal is old.
	next := f.claim(c, workqueue.ClaimRequest{})
	if diff := cmp.Diff([]int64{b}, ids(next)); diff != "" {
		t.Fatalf("after head completed (-want +got):\n%s", diff)
	}
	// Dead is terminal too: the lane moves on.
	if _, err := f.qu.Dead(f.ctx, next[0].Lease, workqueue.Failure{Class: "bad_input"}); err != nil {
		t.Fatal(err)
	}
	if last := f.claim(c, workqueue.ClaimRequest{}); len(last) != 1 || last[0].WorkID != cc {
		t.Fatalf("after dead: claimed %v, want [%d]", ids(last), cc)
	}
}

func TestTargetLanes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	// x and y come from different sources but mutate the same target.
	x := f.one(workqueue.Work{SourceLane: "src:1", TargetLane: "account:9"})
	y := f.one(workqueue.Work{SourceLane: "src:2", TargetLane: "account:9"})
	// z has no target lane: it falls back to its source lane only.
	z := f.one(workqueue.Work{SourceLane: "src:1"})
	// The same string as a lane of the other kind is a different lane.
	k := f.one(workqueue.Work{TargetLane: "src:1"})
	// w heads neither of its lanes: behind y (target) and z (source src:2? no: src:1 via z).
	w := f.one(workqueue.Work{SourceLane: "src:1", TargetLane: "account:9"})

	got := f.claim(c, workqueue.ClaimRequest{})
	if diff := cmp.Diff([]int64{x, k}, ids(got)); diff != "" {
		t.Fatalf("claimable heads (-want +got):\n%s", diff)
	}
	for id, want := range map[int64]string{y: workqueue.StateBlocked, z: workqueue.StateBlocked, w: workqueue.StateBlocked} {
		if s := f.state(id); s != want {
			t.Errorf("work %d: %s, want %s", id, s, want)
		}
	}
	// Finishing x frees y (target lane) and z (source lane); w still waits on both.
	f.complete(got[0])
	got = f.claim(c, workqueue.ClaimRequest{})
	if diff := cmp.Diff(sorted([]int64{y, z}), sorted(ids(got))); diff != "" {
		t.Fatalf("after x (-want +got):\n%s", diff)
	}
	byID := map[int64]workqueue.Claimed{}
	for _, g := range got {
		byID[g.WorkID] = g
	}
	// Finishing one of w's predecessors is not enough.
	f.complete(byID[y])
	if s := f.state(w); s != workqueue.StateBlocked {
		t.Fatalf("w is %s with its source predecessor still running", s)
	}
	f.complete(byID[z])
	if s := f.state(w); s != workqueue.StatePending {
		t.Fatalf("w is %s after both predecessors finished", s)
	}
}

func TestQueueClassPreference(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	b1 := f.one(workqueue.Work{QueueClass: "bulk"})
	i1 := f.one(workqueue.Work{QueueClass: "interactive"})
	b2 := f.one(workqueue.Work{QueueClass: "bulk"})
	i2 := f.one(workqueue.Work{QueueClass: "interactive"})

	claimIDs := func(req workqueue.ClaimRequest) []int64 {
		c := f.claimer("probe") // fresh floors
		got := f.claim(c, req)
		for _, g := range got {
			if err := f.qu.Release(f.ctx, g.Lease); err != nil {
				t.Fatal(err)
			}
		}
		return ids(got)
	}
	for name, tc := range map[string]struct {
		req  workqueue.ClaimRequest
		want []int64
	}{
		"no preference keeps claim order":    {workqueue.ClaimRequest{Max: 3}, []int64{b1, i1, b2}},
		"preferred heads first":              {workqueue.ClaimRequest{Max: 2, Preferred: []string{"interactive"}}, []int64{i1, i2}},
		"work-conserving fallback":           {workqueue.ClaimRequest{Max: 3, Preferred: []string{"interactive"}}, []int64{i1, i2, b1}},
		"eligibility filter":                 {workqueue.ClaimRequest{Max: 4, QueueClasses: []string{"bulk"}}, []int64{b1, b2}},
		"preference within eligible classes": {workqueue.ClaimRequest{Max: 4, QueueClasses: []string{"bulk", "interactive"}, Preferred: []string{"bulk"}}, []int64{b1, b2, i1, i2}},
	} {
		if diff := cmp.Diff(tc.want, claimIDs(tc.req)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	c := f.claimer("probe")
	if _, _, err := c.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: []string{"bulk"}, Preferred: []string{"interactive"}, WorkTypes: []string{"deliver"}, Max: 1}); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("preferred class outside the eligible ones: err = %v", err)
	}
}

func TestGenerationFence(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	old := f.one(workqueue.Work{SourceLane: "lane"})
	stuck := f.one(workqueue.Work{SourceLane: "other"})
	claimed := f.claim(c, workqueue.ClaimRequest{Max: 1})
	if len(claimed) != 1 || claimed[0].WorkID != old {
		t.Fatalf("claimed %v", ids(claimed))
	}
	if err := f.qu.SetGeneration(f.ctx, scope, 2); err != nil {
		t.Fatal(err)
	}
	// Nothing of generation 1 is claimable any more.
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v from a fenced generation (stuck item %d)", ids(got), stuck)
	}
	// Generation 1's live rows do not block generation 2's lanes.
	fresh := f.one(workqueue.Work{SourceLane: "lane"})
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != fresh {
		t.Fatalf("claimed %v, want the new generation's %d", ids(got), fresh)
	}
	// An expired lease of the old generation is not reclaimable either.
	f.expireLease(old)
	if got := f.claim(f.claimer("w2"), workqueue.ClaimRequest{StaleOnly: true}); len(got) != 0 {
		t.Fatalf("reclaimed %v across the generation fence", ids(got))
	}
	if err := f.qu.SetGeneration(f.ctx, "no-such-scope", 2); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("unknown scope: err = %v", err)
	}
}

func TestWorkTypeScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	ab := f.add(workqueue.Work{WorkType: "a"}, workqueue.Work{WorkType: "b"})
	got := f.claim(f.claimer("w1"), workqueue.ClaimRequest{WorkTypes: []string{"b"}})
	if diff := cmp.Diff([]int64{ab[1]}, ids(got)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

func TestStaleReclaimFencesTheOldHolder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	x := f.one(workqueue.Work{})
	first := f.claim(f.claimer("host-a"), workqueue.ClaimRequest{})
	if len(first) != 1 {
		t.Fatalf("claimed %v", ids(first))
	}
	// A live lease is not stale.
	b := f.claimer("host-b")
	if got := f.claim(b, workqueue.ClaimRequest{StaleOnly: true}); len(got) != 0 {
		t.Fatalf("reclaimed a live lease: %v", ids(got))
	}
	fresh := f.one(workqueue.Work{})
	f.expireLease(x)
	// Stale-only capacity never falls back to fresh work.
	second := f.claim(b, workqueue.ClaimRequest{StaleOnly: true})
	if len(second) != 1 || second[0].WorkID != x || !second[0].Reclaimed || second[0].Attempt != 2 {
		t.Fatalf("stale-only claim: %+v, want only %d reclaimed as attempt 2 (fresh %d untouched)", second, x, fresh)
	}
	old := first[0]
	if err := f.qu.Renew(f.ctx, old.Lease); !errors.Is(err, workqueue.ErrLeaseLost) {
		t.Errorf("old holder renew: %v", err)
	}
	if _, err := f.qu.Complete(f.ctx, old.Lease); !errors.Is(err, workqueue.ErrLeaseLost) {
		t.Errorf("old holder complete: %v", err)
	}
	if _, err := f.qu.Retry(f.ctx, old, workqueue.Failure{Class: "x"}); !errors.Is(err, workqueue.ErrLeaseLost) {
		t.Errorf("old holder retry: %v", err)
	}
	if err := f.qu.Release(f.ctx, old.Lease); !errors.Is(err, workqueue.ErrLeaseLost) {
		t.Errorf("old holder release: %v", err)
	}
	if err := f.qu.Renew(f.ctx, second[0].Lease); err != nil {
		t.Fatalf("new holder renew: %v", err)
	}
	f.complete(second[0])
	if s := f.state(x); s != workqueue.StateCompleted {
		t.Fatalf("state %s", s)
	}
	// A finished item is final for everyone.
	if _, err := f.qu.Complete(f.ctx, second[0].Lease); !errors.Is(err, workqueue.ErrLeaseLost) {
		t.Errorf("second complete: %v", err)
	}
}

func TestRetryBackoffPersistsAcrossRestart(t *testing.T) {
	t.Parallel()
	// Minutes, not seconds: a loaded machine may take a second between the
	// retry and the next statement, and the backoff must still be ahead.
	policy := workqueue.RetryPolicy{Initial: time.Minute, Max: time.Hour}
	f := newFixture(t, workqueue.Config{Retry: policy})
	x := f.one(workqueue.Work{})
	c := f.claimer("w1")
	first := f.claim(c, workqueue.ClaimRequest{})
	before := f.dbNow()
	delay, err := f.qu.Retry(f.ctx, first[0], workqueue.Failure{Class: "dependency_unavailable", Summary: "remote link missing"})
	if err != nil {
		t.Fatal(err)
	}
	if delay < 54*time.Second || delay > 66*time.Second {
		t.Fatalf("first retry delay %s, want 1m ±10%%", delay)
	}
	at, ok, err := f.qu.NextWorkAt(f.ctx, scope)
	if err != nil || !ok {
		t.Fatalf("NextWorkAt = %v, %v, %v", at, ok, err)
	}
	if due := at.Sub(before); due < delay || due > delay+30*time.Second {
		t.Fatalf("NextWorkAt %s is %s after the retry, want about %s", at, due, delay)
	}

	// A restart: a new Queue and Claimer on the same database.
	qu2, err := workqueue.New(f.db, workqueue.Config{Retry: policy})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := qu2.NewClaimer(scope, "w1-restarted", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.claim(c2, workqueue.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v before the backoff elapsed", ids(got))
	}
	f.makeDue(x)
	second := f.claim(c2, workqueue.ClaimRequest{})
	if len(second) != 1 || second[0].SafeRetries != 1 || second[0].Attempt != 2 {
		t.Fatalf("after restart: %+v, want the persisted safe-retry count 1 on attempt 2", second)
	}
	delay, err = qu2.Retry(f.ctx, second[0], workqueue.Failure{Class: "dependency_unavailable"})
	if err != nil {
		t.Fatal(err)
	}
	if delay < 108*time.Second || delay > 132*time.Second {
		t.Fatalf("second retry delay %s, want 2m ±10%%", delay)
	}

	// Durable forward progress resets the series.
	f.makeDue(x)
	third := f.claim(c2, workqueue.ClaimRequest{})
	if len(third) != 1 || third[0].SafeRetries != 2 {
		t.Fatalf("third attempt: %+v, want 2 safe retries so far", third)
	}
	if err := qu2.RecordProgress(f.ctx, &third[0]); err != nil {
		t.Fatal(err)
	}
	delay, err = qu2.Retry(f.ctx, third[0], workqueue.Failure{Class: "dependency_unavailable"})
	if err != nil {
		t.Fatal(err)
	}
	if delay < 54*time.Second || delay > 66*time.Second {
		t.Fatalf("retry after progress waits %s, want the series restarted at 1m ±10%%", delay)
	}
	f.makeDue(x)
	fourth := f.claim(c2, workqueue.ClaimRequest{})
	if len(fourth) != 1 || fourth[0].SafeRetries != 1 {
		t.Fatalf("after progress: %+v, want the series restarted (1 retry)", fourth)
	}
}

func TestFailSendsPermanentAndExhaustedToDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: time.Second, Max: time.Minute, MaxSafeRetries: 2}})
	c := f.claimer("w1")
	p := f.one(workqueue.Work{})
	got := f.claim(c, workqueue.ClaimRequest{})
	out, err := f.qu.Fail(f.ctx, got[0], workqueue.Failure{Class: "schema"}, fmt.Errorf("bad mapping: %w", workqueue.ErrPermanent))
	if err != nil || !out.Dead || f.state(p) != workqueue.StateDead {
		t.Fatalf("permanent failure: dead=%v err=%v state=%s", out.Dead, err, f.state(p))
	}
	r := f.one(workqueue.Work{})
	for attempt := 1; ; attempt++ {
		f.makeDue(r)
		got := f.claim(c, workqueue.ClaimRequest{})
		if len(got) != 1 {
			t.Fatalf("attempt %d: claimed %v", attempt, ids(got))
		}
		out, err := f.qu.Fail(f.ctx, got[0], workqueue.Failure{Class: "transient"}, errors.New("timeout"))
		if err != nil {
			t.Fatal(err)
		}
		if !out.Dead && out.RetryIn <= 0 {
			t.Fatalf("attempt %d: a safe retry without a backoff", attempt)
		}
		if out.Dead {
			// Two safe retries (MaxSafeRetries), then the third failure is final.
			if attempt != 3 || got[0].SafeRetries != 2 {
				t.Fatalf("dead on attempt %d after %d safe retries, want attempt 3 after 2", attempt, got[0].SafeRetries)
			}
			break
		}
	}
}

func TestDueTimes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	if _, ok, err := f.qu.NextWorkAt(f.ctx, scope); ok || err != nil {
		t.Fatalf("empty scope: ok=%v err=%v", ok, err)
	}
	f.one(workqueue.Work{Delay: 2 * time.Hour})
	now := f.dbNow()
	at, ok, err := f.qu.NextWorkAt(f.ctx, scope)
	if err != nil || !ok || at.Sub(now) < 119*time.Minute || at.Sub(now) > 121*time.Minute {
		t.Fatalf("NextWorkAt = %s (%s from now), %v, %v; want about 2h", at, at.Sub(now), ok, err)
	}
	// Within a horizon shorter than that, nothing is due.
	if next, ok, err := f.qu.NextWorkWithin(f.ctx, scope, time.Hour); ok || err != nil {
		t.Fatalf("NextWorkWithin 1h = %+v, %v, %v; want nothing", next, ok, err)
	}
	// A lease expiring sooner becomes the next due time.
	f.one(workqueue.Work{})
	f.claim(f.claimer("w1"), workqueue.ClaimRequest{})
	next, ok, err := f.qu.NextWorkWithin(f.ctx, scope, 2*time.Hour)
	if err != nil || !ok {
		t.Fatalf("NextWorkWithin = %+v, %v, %v", next, ok, err)
	}
	if d := next.At.Sub(now); d < 59*time.Minute || d > 61*time.Minute || next.In < 59*time.Minute || next.In > 61*time.Minute {
		t.Fatalf("next due %s from now (in %s), want the 1h lease expiry", d, next.In)
	}
	if _, _, err := f.qu.NextWorkWithin(f.ctx, scope, -time.Second); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("negative horizon: err = %v", err)
	}
}

// TestNextWorkSinceReportsWhatCameDueSinceTheTurn: a lease that expired
// after a claimer's last turn read it live (a second ago here) is past, so
// a lookup of the future misses it; looking back to the turn reports it,
// due now, and looking back less does not.
func TestNextWorkSinceReportsWhatCameDueSinceTheTurn(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Lease: time.Hour})
	f.one(workqueue.Work{})
	got := f.claim(f.claimer("w1"), workqueue.ClaimRequest{})
	if len(got) != 1 {
		t.Fatalf("claimed %v", ids(got))
	}
	f.expireLease(got[0].WorkID) // a second ago, by the database clock
	if next, ok, err := f.qu.NextWorkWithin(f.ctx, scope, time.Hour); ok || err != nil {
		t.Fatalf("NextWorkWithin = %+v, %v, %v; want nothing (the expiry is past)", next, ok, err)
	}
	if next, ok, err := f.qu.NextWorkSince(f.ctx, scope, 100*time.Millisecond, time.Hour); ok || err != nil {
		t.Fatalf("NextWorkSince 100ms = %+v, %v, %v; want nothing (the expiry lies a second back)", next, ok, err)
	}
	next, ok, err := f.qu.NextWorkSince(f.ctx, scope, workqueue.MaxLookBack, time.Hour)
	if err != nil || !ok || next.In > -time.Second || next.In < -workqueue.MaxLookBack {
		t.Fatalf("NextWorkSince %s = %+v, %v, %v; want the expiry, a second or more ago", workqueue.MaxLookBack, next, ok, err)
	}
	for _, lookBack := range []time.Duration{-time.Second, workqueue.MaxLookBack + time.Second} {
		if _, _, err := f.qu.NextWorkSince(f.ctx, scope, lookBack, time.Hour); !errors.Is(err, workqueue.ErrInvalid) {
			t.Fatalf("lookBack %s: err = %v, want ErrInvalid", lookBack, err)
		}
	}
}

// TestCursorsFindWorkOthersMadeClaimable is issue 16's discovery case: a
// claimer's cursor sits past everything it consumed, and items another
// claimer (another process) makes claimable behind the lane ordinals it
// consumed are still found on its next claim, with no rewind: a release, a
// promotion, a retry coming due.
func TestCursorsFindWorkOthersMadeClaimable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	a, b := f.claimer("a"), f.claimer("b")
	var five []int64
	for range 5 {
		five = append(five, f.one(workqueue.Work{}))
	}
	held := f.claim(b, workqueue.ClaimRequest{})
	if diff := cmp.Diff(five, ids(held)); diff != "" {
		t.Fatalf("b claimed (-want +got):\n%s", diff)
	}
	// a consumes a later item: its floor is past the five.
	w := f.one(workqueue.Work{})
	if got := f.claim(a, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != w {
		t.Fatalf("a claimed %v, want [%d]", ids(got), w)
	}
	// b shuts down and releases the five: a finds all of them.
	for _, h := range held {
		if err := f.qu.Release(f.ctx, h.Lease); err != nil {
			t.Fatal(err)
		}
	}
	got := f.claim(a, workqueue.ClaimRequest{})
	if diff := cmp.Diff(five, ids(got)); diff != "" {
		t.Fatalf("a after b's release (-want +got):\n%s", diff)
	}
	// b promotes a follower of a work type only a serves.
	head := f.one(workqueue.Work{WorkType: "b-only", SourceLane: "L"})
	follower := f.one(workqueue.Work{WorkType: "deliver", SourceLane: "L"})
	later := f.one(workqueue.Work{})
	if got := f.claim(a, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != later {
		t.Fatalf("a claimed %v, want [%d]", ids(got), later)
	}
	bh := f.claim(b, workqueue.ClaimRequest{WorkTypes: []string{"b-only"}})
	if len(bh) != 1 || bh[0].WorkID != head {
		t.Fatalf("b claimed %v, want [%d]", ids(bh), head)
	}
	f.complete(bh[0])
	if got := f.claim(a, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != follower {
		t.Fatalf("a after b's promotion: %v, want [%d]", ids(got), follower)
	}
	// A retry of b's comes due behind a's floor.
	r := f.one(workqueue.Work{})
	br := f.claim(b, workqueue.ClaimRequest{})
	if len(br) != 1 || br[0].WorkID != r {
		t.Fatalf("b claimed %v, want [%d]", ids(br), r)
	}
	if _, err := f.qu.Retry(f.ctx, br[0], workqueue.Failure{Class: "transient"}); err != nil {
		t.Fatal(err)
	}
	if got := f.claim(a, workqueue.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("a claimed %v before the retry was due", ids(got))
	}
	f.makeDue(r)
	if got := f.claim(a, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != r {
		t.Fatalf("a after the retry came due: %v, want [%d]", ids(got), r)
	}
}

// TestIdleClassCostsAtMostTwoStatements is issue 16's other discovery case:
// a class that has been idle while the scope's ordinals moved on by a
// million costs at most two candidate statements per claim (its window,
// then the rest up to now), not one per window of ordinals; and rows not
// due yet, however many, are never returned.
func TestIdleClassCostsAtMostTwoStatements(t *testing.T) {
	t.Parallel()
	// A lease longer than the test: the first item stays claimed however
	// slowly the 200 enqueues run, never reclaimed by a later turn.
	f := newFixture(t, workqueue.Config{Lease: 10 * time.Minute})
	c := f.claimer("w")
	claim := func(classes ...string) ([]workqueue.Claimed, workqueue.ClaimStats) {
		t.Helper()
		got, stats, err := c.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: classes, WorkTypes: []string{"deliver"}, Max: 5})
		if err != nil {
			t.Fatal(err)
		}
		return got, stats
	}
	first := f.one(workqueue.Work{QueueClass: "idle"})
	if got, _ := claim("idle"); len(got) != 1 || got[0].WorkID != first {
		t.Fatalf("claimed %v, want [%d]", ids(got), first)
	}
	for range 200 {
		f.one(workqueue.Work{QueueClass: "idle", Delay: time.Hour})
	}
	f.exec("UPDATE scope SET next_enqueue_ordinal = next_enqueue_ordinal + 1000000 WHERE scope_id = ?", scope)
	for range 3 {
		f.one(workqueue.Work{QueueClass: "busy"})
	}
	for turn := range 5 {
		got, stats := claim("idle")
		if len(got) != 0 || stats.Statements > 2 {
			t.Fatalf("turn %d: claimed %v in %d statements, want nothing in at most 2", turn, ids(got), stats.Statements)
		}
	}
	due := f.one(workqueue.Work{QueueClass: "idle"})
	if got, _ := claim("idle"); len(got) != 1 || got[0].WorkID != due {
		t.Fatalf("claimed %v, want [%d]", ids(got), due)
	}
}

func TestNewRefusesOptimisticSessions(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	db, err := sql.Open("mysql", f.dsn+"&tidb_txn_mode=%27optimistic%27")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := workqueue.New(db, workqueue.Config{}); !errors.Is(err, workqueue.ErrOptimisticMode) {
		t.Fatalf("New on optimistic sessions: err = %v, want ErrOptimisticMode", err)
	}
}

// A claim comes back short only when no more work is due: the controller
// claims again only after a claim filled its slots, so due rows left behind
// a narrow scan window would wait for the next event (found by
// TestDependencyQuietBacklog: a worker with its periodic reads off stalled
// with 972 due items).
func TestShortClaimMeansNothingMoreIsDue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c, err := f.qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{ScanWindow: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Twenty items from ten enqueues of two: the two of a pair are due
	// microseconds apart, pairs a transaction apart, wider than the 1ms
	// window. A claim of five ends inside a pair, so the next claim's window
	// holds that pair's second item only.
	var all []int64
	for range 10 {
		f.seq++
		res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{
			{IdempotencyKey: fmt.Sprint("pair-a-", f.seq), Work: []workqueue.Work{{WorkType: "deliver"}}},
			{IdempotencyKey: fmt.Sprint("pair-b-", f.seq), Work: []workqueue.Work{{WorkType: "deliver"}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, res[0].Work[0].WorkID, res[1].Work[0].WorkID)
	}
	var order []int64
	for turn := 0; len(order) < len(all); turn++ {
		got, stats, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{QueueClasses: []string{"default"}, Max: 5}))
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 5 {
			t.Fatalf("turn %d: claimed %d of the %d items due (in %d statements)", turn, len(got), len(all)-len(order), stats.Statements)
		}
		if turn > 0 && stats.Statements > 2 { // the first also looks for expired leases
			t.Fatalf("turn %d: %d statements, want at most 2", turn, stats.Statements)
		}
		order = append(order, ids(got)...)
	}
	if !slices.Equal(order, all) {
		t.Fatalf("claim order %v, want the due order %v", order, all)
	}
}

// A row due at exactly the end of a claim's first window is in both of its
// statements' ranges. Counted once, the claim holds fewer rows than it
// asked for although the second statement was cut by its limit: the claim
// must not take that for "nothing more is due" and move its cursor to now,
// past the rest (the stall TestDependencyQuietBacklog found).
func TestRowAtTheWindowEdgeDoesNotHideTheRest(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c, err := f.qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{ScanWindow: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var rows []int64
	for range 5 {
		rows = append(rows, f.one(workqueue.Work{}))
	}
	// Due a minute ago, the second row at exactly the first's time plus
	// the window, the rest a microsecond apart after it.
	t0 := f.dbNow().Add(-time.Minute).Truncate(time.Microsecond)
	dues := []time.Time{t0, t0.Add(time.Millisecond), t0.Add(time.Millisecond + time.Microsecond),
		t0.Add(time.Millisecond + 2*time.Microsecond), t0.Add(time.Millisecond + 3*time.Microsecond)}
	for i, id := range rows {
		f.exec("UPDATE work_item SET run_after = ? WHERE work_id = ?", dues[i], id)
	}
	claim := func(max int) []int64 {
		t.Helper()
		got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{QueueClasses: []string{"default"}, Max: max}))
		if err != nil {
			t.Fatal(err)
		}
		return ids(got)
	}
	got := claim(1)                // from the front: the first row; the floor is its due time
	got = append(got, claim(3)...) // the window's edge row, then two more
	got = append(got, claim(3)...) // the last one
	if !slices.Equal(got, rows) {
		t.Fatalf("claimed %v, want %v", got, rows)
	}
}

// scanStarts records where each ClaimCandidates statement's range began.
type scanStarts struct {
	mu    sync.Mutex
	froms []time.Time
}

func (s *scanStarts) Before(_ context.Context, query string, args []driver.NamedValue) (any, error) {
	if sqlwrap.Name(query) == "ClaimCandidates" {
		s.mu.Lock()
		s.froms = append(s.froms, args[3].Value.(time.Time)) // scope, generation, class, from_time, ...
		s.mu.Unlock()
	}
	return nil, nil
}

func (s *scanStarts) After(_ context.Context, _ string, _ any, err error) error { return err }

func (s *scanStarts) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.froms)
}

// at is where the scan numbered i (from 0) began.
func (s *scanStarts) at(t *testing.T, i int) time.Time {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.froms) <= i {
		t.Fatalf("%d candidate scans ran, want more than %d", len(s.froms), i)
	}
	return s.froms[i]
}

// TestBacklogScanStartsAtItsFloor: a claimer consuming a backlog due long
// ago starts each scan at its floor, not StragglerWindow before it (over
// the MVCC delete markers its recent claims left there): every row that
// sorts before the floor and committed before the floor's scan was
// consumed, and a row committing later was made due no earlier than
// StragglerWindow before that scan. Once caught up, a scan starts
// StragglerWindow before the last scan's time, and a transition that set
// its due time just before that scan and committed after it is found.
func TestBacklogScanStartsAtItsFloor(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	starts := &scanStarts{}
	c, err := f.queueWithHook(starts).NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var backlog []int64
	for range 9 {
		backlog = append(backlog, f.one(workqueue.Work{}))
	}
	// Due an hour ago, a millisecond apart, in enqueue order.
	f.exec("UPDATE work_item SET run_after = DATE_ADD(DATE_SUB(NOW(6), INTERVAL 1 HOUR), INTERVAL lane_ordinal * 1000 MICROSECOND) WHERE scope_id = ?", scope)
	claim := func(max int) []workqueue.Claimed {
		t.Helper()
		got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{QueueClasses: []string{"default"}, Max: max}))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	var order []int64
	order = append(order, ids(claim(3))...)
	for range 2 {
		floor, ok := c.Floor("default")
		if !ok {
			t.Fatal("no floor after a claim")
		}
		first := starts.count()
		order = append(order, ids(claim(3))...)
		if from := starts.at(t, first); !from.Equal(floor) {
			t.Fatalf("a backlog scan started at %s, want its floor %s (%s before it)", from, floor, floor.Sub(from))
		}
	}
	if !slices.Equal(order, backlog) {
		t.Fatalf("claimed %v, want the backlog in due order %v", order, backlog)
	}
	// Caught up: the range up to now is read to its end.
	if got := claim(3); len(got) != 0 {
		t.Fatalf("claimed %v from a drained class", ids(got))
	}
	floor, _ := c.Floor("default")
	// A transition that set its due time a second before the claimer's last
	// scan and committed after it.
	late := backlog[0]
	f.exec("UPDATE work_item SET state = 'pending', run_after = DATE_SUB(?, INTERVAL 1 SECOND) WHERE work_id = ?", floor, late)
	first := starts.count()
	got := claim(3)
	if len(got) != 1 || got[0].WorkID != late {
		t.Fatalf("after a late transition claimed %v, want [%d]", ids(got), late)
	}
	if from := starts.at(t, first); !from.Equal(floor.Add(-2 * time.Second)) {
		t.Fatalf("a caught-up scan started at %s, want StragglerWindow before the last scan (%s)", from, floor.Add(-2*time.Second))
	}
}
