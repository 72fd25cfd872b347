package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The seed-002 shape: a command waits for a link to a target, which either
// the target's current slot or its previous slot satisfies. The wake key is
// the target; the keys are the slots.
func slotDep(target string) workqueue.Dependency {
	return workqueue.Dependency{WakeKey: "target:" + target, Keys: []string{"link:" + target + "@slot2", "link:" + target + "@slot1"}}
}

// rowFacts is what a wait must leave alone or set.
type rowFacts = queuetest.Counters

func (f *fixture) facts(workID int64) rowFacts {
	f.t.Helper()
	return queuetest.Item(f.t, f.db, workID).Counters
}

// waiting claims one item and makes it wait for dep.
func (f *fixture) waiting(c *workqueue.Claimer, dep workqueue.Dependency, w workqueue.Work) workqueue.Claimed {
	f.t.Helper()
	id := f.one(w)
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != id {
		f.t.Fatalf("claimed %v, want [%d]", ids(got), id)
	}
	runnable, err := f.qu.Wait(f.ctx, got[0], dep)
	if err != nil || runnable {
		f.t.Fatalf("wait: runnable %v, err %v", runnable, err)
	}
	return got[0]
}

// invisible checks that nothing in the scope is claimable or due.
func (f *fixture) invisible(c *workqueue.Claimer) {
	f.t.Helper()
	c.Rewind()
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 0 {
		f.t.Fatalf("claimed %v while waiting", ids(got))
	}
	if _, ok, err := f.qu.NextWorkWithin(f.ctx, scope, time.Hour); err != nil || ok {
		f.t.Fatalf("next work within an hour: %v (%v)", ok, err)
	}
}

func TestDependencyWakeByCurrentOrPreviousKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"link:A@slot2", "link:A@slot1"} {
		t.Run(key, func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			c := f.claimer("w")
			item := f.waiting(c, slotDep("A"), workqueue.Work{})
			if got, want := f.facts(item.WorkID), (rowFacts{State: "waiting_dependency"}); got != want {
				t.Fatalf("after the wait: %+v, want %+v (the attempt given back, no retry)", got, want)
			}
			f.invisible(c)

			woken, err := f.qu.Satisfy(f.ctx, scope, "target:A", key)
			if err != nil || woken != 1 {
				t.Fatalf("satisfy: woke %d, err %v", woken, err)
			}
			got := f.claim(c, workqueue.ClaimRequest{})
			if len(got) != 1 || got[0].WorkID != item.WorkID {
				t.Fatalf("claimed %v after the wake, want [%d]", ids(got), item.WorkID)
			}
			if diff := cmp.Diff(&workqueue.Dependency{WakeKey: "target:A", Keys: []string{"link:A@slot2", "link:A@slot1"}}, got[0].Dependency); diff != "" {
				t.Fatalf("claimed dependency (-want +got):\n%s", diff)
			}
			ok, err := f.qu.DependencySatisfied(f.ctx, scope, *got[0].Dependency)
			if err != nil || !ok {
				t.Fatalf("recheck: %v, %v", ok, err)
			}
			if got[0].Attempt != 1 {
				t.Fatalf("attempt %d after a wait, want 1", got[0].Attempt)
			}
			// Satisfying again is idempotent and wakes nothing more.
			if woken, err := f.qu.Satisfy(f.ctx, scope, "target:A", key); err != nil || woken != 0 {
				t.Fatalf("second satisfy: woke %d, err %v", woken, err)
			}
		})
	}
}

func TestDependencyUnrelatedKeyWakesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w")
	item := f.waiting(c, slotDep("A"), workqueue.Work{})
	other := scope + "-other"
	if err := f.qu.EnsureScope(f.ctx, other, 1); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct{ scope, wake, key string }{
		{scope, "target:B", "link:B@slot2"},  // another target
		{scope, "target:A ", "link:A@slot9"}, // a trailing space: another wake key (NO PAD)
		{scope, "target:a", "link:a@slot2"},  // another case
		{other, "target:A", "link:A@slot2"},  // the same keys in another scope
	} {
		woken, err := f.qu.Satisfy(f.ctx, s.scope, s.wake, s.key)
		if err != nil || woken != 0 {
			t.Fatalf("satisfy %q/%q in %q: woke %d, err %v", s.wake, s.key, s.scope, woken, err)
		}
	}
	if got := f.facts(item.WorkID); got.State != "waiting_dependency" {
		t.Fatalf("state %s after unrelated keys", got.State)
	}
	f.invisible(c)
	// The waiter's key in another scope did not satisfy it here.
	if ok, err := f.qu.DependencySatisfied(f.ctx, scope, slotDep("A")); err != nil || ok {
		t.Fatalf("keys satisfied by another scope's key: %v (%v)", ok, err)
	}
	// Its key with a trailing space is a different key: the right wake key
	// wakes the waiter (over-notification), its own keys stay unsatisfied.
	if woken, err := f.qu.Satisfy(f.ctx, scope, "target:A", "link:A@slot2 "); err != nil || woken != 1 {
		t.Fatalf("satisfy with the wake key: woke %d (%v)", woken, err)
	}
	if ok, err := f.qu.DependencySatisfied(f.ctx, scope, slotDep("A")); err != nil || ok {
		t.Fatalf("keys satisfied by a key with a trailing space: %v (%v)", ok, err)
	}
}

// An obsolete slot's wake (same wake key, a key the waiter does not list)
// wakes the item; its recheck finds its own keys missing and it waits
// again, with no attempt and no retry counted.
func TestDependencyObsoleteKeyRechecksAndWaitsAgain(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w")
	item := f.waiting(c, slotDep("A"), workqueue.Work{})
	woken, err := f.qu.Satisfy(f.ctx, scope, "target:A", "link:A@slot0")
	if err != nil || woken != 1 {
		t.Fatalf("obsolete satisfy: woke %d, err %v", woken, err)
	}
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].Dependency == nil {
		t.Fatalf("claimed %+v after the wake", got)
	}
	ok, err := f.qu.DependencySatisfied(f.ctx, scope, *got[0].Dependency)
	if err != nil || ok {
		t.Fatalf("recheck after an obsolete wake: %v (%v)", ok, err)
	}
	if runnable, err := f.qu.Wait(f.ctx, got[0], *got[0].Dependency); err != nil || runnable {
		t.Fatalf("wait again: runnable %v, err %v", runnable, err)
	}
	if got, want := f.facts(item.WorkID), (rowFacts{State: "waiting_dependency"}); got != want {
		t.Fatalf("after the recheck: %+v, want %+v", got, want)
	}
	f.invisible(c)
}

// A dependency declared at enqueue is claimed with the item, which the
// worker checks before any work.
func TestDependencyDeclaredAtEnqueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w")
	dep := slotDep("E")
	f.one(workqueue.Work{WaitFor: &dep})
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].Dependency == nil || !cmp.Equal(*got[0].Dependency, dep) {
		t.Fatalf("claimed %+v, want the declared dependency", got)
	}
	if ok, err := f.qu.DependencySatisfied(f.ctx, scope, dep); err != nil || ok {
		t.Fatalf("satisfied before any producer: %v (%v)", ok, err)
	}
}

func TestDependencyValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	many := make([]string, workqueue.MaxDependencyKeys+1)
	for i := range many {
		many[i] = fmt.Sprint("k", i)
	}
	for name, dep := range map[string]workqueue.Dependency{
		"no wake key":       {Keys: []string{"k"}},
		"no keys":           {WakeKey: "w"},
		"too many keys":     {WakeKey: "w", Keys: many},
		"a key twice":       {WakeKey: "w", Keys: []string{"k", "k"}},
		"an empty key":      {WakeKey: "w", Keys: []string{""}},
		"invalid UTF-8":     {WakeKey: "w", Keys: []string{"k\xff"}},
		"a 256-rune key":    {WakeKey: "w", Keys: []string{strings.Repeat("é", 256)}},
		"a 256-rune wakeup": {WakeKey: strings.Repeat("x", 256), Keys: []string{"k"}},
	} {
		dep := dep
		_, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: name, Work: []workqueue.Work{{WorkType: "deliver", WaitFor: &dep}}}})
		if !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: enqueue error %v, want ErrInvalid", name, err)
		}
		if _, err := f.qu.Wait(f.ctx, workqueue.Claimed{Scope: scope, WorkID: 1}, dep); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%s: wait error %v, want ErrInvalid", name, err)
		}
	}
	if _, err := f.qu.Satisfy(f.ctx, scope, "w", ""); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("satisfy an empty key: %v, want ErrInvalid", err)
	}
	// 255 four-byte characters fit (the columns count characters).
	ok := workqueue.Dependency{WakeKey: strings.Repeat("😀", 255), Keys: []string{strings.Repeat("😀", 255)}}
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: "wide", Work: []workqueue.Work{{WorkType: "deliver", WaitFor: &ok}}}}); err != nil {
		t.Fatalf("enqueue with 255-character keys: %v", err)
	}
}

// raceSchedule places a producer's Satisfy against the two steps of a Wait.
type raceSchedule struct {
	name string
	// at is the waiter's statement the producer is started at ("" starts
	// both at once behind a barrier); sync runs the producer to its commit
	// before that statement, otherwise it runs beside it.
	at   string
	sync bool
}

// TestDependencyRegistrationRace races a wait's registration against a
// producer satisfying one of its keys, on every boundary of the two-phase
// wait: before the registration, between registration and settle, while the
// settle reads the keys under locks, and unordered. Keys alternate between
// the current and the previous slot. However they interleave, the item must
// end runnable (never stranded waiting for a key that is satisfied), with
// its attempt given back.
func TestDependencyRegistrationRace(t *testing.T) {
	t.Parallel()
	schedules := []raceSchedule{
		{name: "producer first", at: "BeginDependencyWait", sync: true},
		{name: "producer between registration and settle", at: "LockSatisfiedDependencies", sync: true},
		{name: "producer beside the settle's locking read", at: "LockSatisfiedDependencies"},
		// TiDB's READ COMMITTED locking read leaves absent keys unlocked
		// (measured on v8.5.6), so this producer commits its key and its
		// wake between the settle's read (which found nothing) and its CAS:
		// only the wake of the registration itself keeps the item from
		// being stranded.
		{name: "producer between the settle's read and its CAS", at: "SettleDependencyRegistration", sync: true},
		{name: "producer beside the settle's CAS", at: "SettleDependencyRegistration"},
		{name: "unordered", at: ""},
	}
	f, qu, in := faultFixture(t, workqueue.Config{})
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	const iterations = 24 // four rounds of the six schedules
	for i := range iterations {
		sch := schedules[i%len(schedules)]
		target := fmt.Sprint("T", i)
		dep := slotDep(target)
		// Current and previous slots alternate, and each schedule meets
		// both across the rounds.
		key := dep.Keys[(i+i/len(schedules))%2]
		id := f.one(workqueue.Work{})
		got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if err != nil || len(got) != 1 || got[0].WorkID != id {
			t.Fatalf("iteration %d: claimed %v (%v)", i, ids(got), err)
		}
		var produced sync.WaitGroup
		var prodErr error
		var woken int64
		producer := func() {
			defer produced.Done()
			woken, prodErr = qu.Satisfy(context.Background(), scope, dep.WakeKey, key)
		}
		produced.Add(1)
		start := make(chan struct{})
		if sch.at == "" {
			go func() { <-start; producer() }()
		} else {
			in.Add(faultdb.Rule{Statement: sch.at, Before: func(context.Context) {
				if sch.sync {
					producer()
				} else {
					go producer()
				}
			}})
		}
		close(start)
		runnable, err := qu.Wait(f.ctx, got[0], dep)
		produced.Wait()
		if err != nil || prodErr != nil {
			t.Fatalf("iteration %d (%s): wait err %v, producer err %v", i, sch.name, err, prodErr)
		}
		facts := f.facts(id)
		if facts != (rowFacts{State: "pending"}) {
			t.Fatalf("iteration %d (%s, key %s): %+v after the race (runnable %v), want a pending item with no attempt counted",
				i, sch.name, key, facts, runnable)
		}
		// Whoever made it pending says so: Wait's runnable, or the
		// producer's wake count (a worker wakes itself on either).
		if !runnable && woken == 0 {
			t.Fatalf("iteration %d (%s): pending, but neither Wait nor the producer reported a wake", i, sch.name)
		}
		again, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if err != nil || len(again) != 1 || again[0].WorkID != id {
			t.Fatalf("iteration %d (%s): claimed %v after the race (%v)", i, sch.name, ids(again), err)
		}
		if _, err := qu.Complete(f.ctx, again[0].Lease); err != nil {
			t.Fatal(err)
		}
	}
	for _, sch := range schedules[:len(schedules)-1] {
		if in.Fired(sch.at) == 0 {
			t.Errorf("schedule %q never ran", sch.name)
		}
	}
}

// A worker that dies between the two steps of a wait leaves a registration:
// invisible to claims until the safety pass settles it, to waiting when no
// key is satisfied and to pending when one is.
func TestDependencyInterruptedRegistrationRecovers(t *testing.T) {
	t.Parallel()
	cfg := workqueue.Config{TxAttempts: 2}
	f, qu, in := faultFixture(t, cfg)
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sweep, err := f.qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{RegistrationGrace: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	var items []int64
	for i, target := range []string{"X", "Y"} {
		id := f.one(workqueue.Work{})
		got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim: %v (%v)", ids(got), err)
		}
		in.Add(faultdb.Rule{Statement: "LockSatisfiedDependencies", Fault: faultdb.DropBefore, Times: cfg.TxAttempts})
		if _, err := qu.Wait(f.ctx, got[0], slotDep(target)); err == nil {
			t.Fatalf("wait %d: no error with its settle failing", i)
		}
		if s := f.facts(id).State; s != "dependency_registration" {
			t.Fatalf("state %s after an interrupted wait", s)
		}
		items = append(items, id)
	}
	f.invisible(c)
	// Y's key is satisfied by a writer that bypassed Satisfy (no wake).
	f.exec("INSERT INTO dependency_satisfied (scope_id, dependency_key, satisfied_at) VALUES (?, 'link:Y@slot1', NOW(6))", scope)
	st, err := sweep.Pass(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Settled != 2 || st.Runnable != 1 || !st.Claimable() {
		t.Fatalf("pass: %+v, want two settled, one of them runnable", st)
	}
	if got := []string{f.facts(items[0]).State, f.facts(items[1]).State}; !cmp.Equal(got, []string{"waiting_dependency", "pending"}) {
		t.Fatalf("states after the pass: %v", got)
	}
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != items[1] {
		t.Fatalf("claimed %v, want [%d]", ids(got), items[1])
	}
}

// TestDependencyMissedWakeRepaired: a key satisfied by a writer that
// bypassed Satisfy wakes nobody; one safety pass finds the waiter and wakes
// it, and a waiter whose keys are missing is neither written nor counted.
func TestDependencyMissedWakeRepaired(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w")
	missed := f.waiting(c, slotDep("M"), workqueue.Work{})
	still := f.waiting(c, slotDep("S"), workqueue.Work{})
	f.exec("INSERT INTO dependency_satisfied (scope_id, dependency_key, satisfied_at) VALUES (?, 'link:M@slot1', NOW(6))", scope)
	f.invisible(c)
	sweep, err := f.qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := sweep.Pass(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Woken != 1 || st.Probed != 2 || !st.Wrapped || st.Pages != 1 {
		t.Fatalf("pass: %+v, want one page, two probed, one woken, wrapped", st)
	}
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != missed.WorkID {
		t.Fatalf("claimed %v, want [%d]", ids(got), missed.WorkID)
	}
	if got, want := f.facts(still.WorkID), (rowFacts{State: "waiting_dependency"}); got != want {
		t.Fatalf("the unsatisfied waiter: %+v, want %+v", got, want)
	}
	// Idempotent: a second pass wakes nothing.
	if st, err := sweep.Pass(f.ctx); err != nil || st.Woken != 0 {
		t.Fatalf("second pass: %+v (%v)", st, err)
	}
}

// A transient error mid-pass keeps the wakes already committed, and the
// next pass resumes after the last waiter the failed one finished.
func TestDependencySweepResumesAfterTransientError(t *testing.T) {
	t.Parallel()
	f, qu, in := faultFixture(t, workqueue.Config{})
	c := f.claimer("w")
	// Wait order: w0 (missing), w1 (satisfied), w2 (satisfied), w3
	// (missing), w4 (satisfied); the wake of w2 fails.
	satisfied := []bool{false, true, true, false, true}
	var waiters []int64
	for i, ok := range satisfied {
		target := fmt.Sprint("R", i)
		waiters = append(waiters, f.waiting(c, slotDep(target), workqueue.Work{}).WorkID)
		if ok {
			f.exec("INSERT INTO dependency_satisfied (scope_id, dependency_key, satisfied_at) VALUES (?, ?, NOW(6))", scope, "link:"+target+"@slot2")
		}
	}
	sweep, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{})
	if err != nil {
		t.Fatal(err)
	}
	in.Add(faultdb.Rule{Statement: "WakeDependencyWaiter", Skip: 1, Fault: faultdb.LockWaitTimeout})
	st, err := sweep.Pass(f.ctx)
	if err == nil || st.Woken != 1 || st.MayHaveWoken {
		t.Fatalf("failing pass: %+v (%v), want one wake kept and the error", st, err)
	}
	if s := f.facts(waiters[1]).State; s != "pending" {
		t.Fatalf("the wake before the error: %s", s)
	}
	st, err = sweep.Pass(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Resumed at w2: w0 and w1 are not probed again.
	if st.Probed != 3 || st.Woken != 2 || !st.Wrapped {
		t.Fatalf("resumed pass: %+v, want w2..w4 probed and w2, w4 woken", st)
	}
	var states []string
	for _, id := range waiters {
		states = append(states, f.facts(id).State)
	}
	if want := []string{"waiting_dependency", "pending", "pending", "waiting_dependency", "pending"}; !cmp.Equal(states, want) {
		t.Fatalf("states %v, want %v", states, want)
	}
	for _, id := range waiters {
		if a := f.facts(id).Attempts; a != 0 {
			t.Fatalf("work %d has %d attempts counted", id, a)
		}
	}
}

// The probe budget bounds a pass; passes go round the waiters from their
// cursor, and a scope without waiters costs one statement a pass.
func TestDependencySweepBudgets(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	sweep, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{ProbeBudget: 10, PageSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	before := counter.Executed()
	if st, err := sweep.Pass(f.ctx); err != nil || st.Pages != 1 || !st.Wrapped {
		t.Fatalf("empty scope: %+v (%v)", st, err)
	}
	if n := counter.Executed() - before; n != 1 {
		t.Fatalf("a pass over a scope without waiters sent %d statements, want 1: %v", n, counter.ByStatement())
	}
	c := f.claimer("w")
	for i := range 25 {
		f.waiting(c, slotDep(fmt.Sprint("B", i)), workqueue.Work{})
	}
	var probed []int
	for range 3 {
		st, err := sweep.Pass(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		probed = append(probed, st.Probed)
		if st.Wrapped {
			break
		}
	}
	// 10 + 10 + 5: the third pass reaches the end.
	if want := []int{10, 10, 5}; !cmp.Equal(probed, want) {
		t.Fatalf("probed per pass %v, want %v", probed, want)
	}
	if _, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{PageSize: -1}); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("negative page size: %v", err)
	}
}

// A waiting or registering lane head keeps its followers, old and newly
// enqueued, blocked; after the wake they run in lane order.
func TestDependencyWaitingHeadKeepsItsLane(t *testing.T) {
	t.Parallel()
	cfg := workqueue.Config{TxAttempts: 1}
	f, qu, in := faultFixture(t, cfg)
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	lane := workqueue.Work{SourceLane: "lane-L"}
	head := f.one(lane)
	followers := []int64{f.one(lane), f.one(lane)}
	got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
	if err != nil || len(got) != 1 || got[0].WorkID != head {
		t.Fatalf("claimed %v (%v)", ids(got), err)
	}
	// Stop the wait between its steps: the head is a registration.
	in.Add(faultdb.Rule{Statement: "LockSatisfiedDependencies", Fault: faultdb.DropBefore})
	if _, err := qu.Wait(f.ctx, got[0], slotDep("L")); err == nil {
		t.Fatal("wait did not fail")
	}
	followers = append(followers, f.one(lane)) // enqueued behind a registration
	sweep, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{RegistrationGrace: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := sweep.Pass(f.ctx); err != nil || st.Settled != 1 {
		t.Fatalf("pass: %+v (%v)", st, err)
	}
	followers = append(followers, f.one(lane)) // enqueued behind a waiter
	for _, id := range followers {
		if s := f.facts(id).State; s != "blocked" {
			t.Fatalf("follower %d is %s behind a waiting head", id, s)
		}
	}
	f.invisible(c)
	if woken, err := qu.Satisfy(f.ctx, scope, "target:L", "link:L@slot2"); err != nil || woken != 1 {
		t.Fatalf("satisfy: %d (%v)", woken, err)
	}
	order := []int64{}
	for range 1 + len(followers) {
		got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if err != nil || len(got) != 1 {
			t.Fatalf("claimed %v (%v) after %v", ids(got), err, order)
		}
		order = append(order, got[0].WorkID)
		if _, err := qu.Complete(f.ctx, got[0].Lease); err != nil {
			t.Fatal(err)
		}
	}
	if want := append([]int64{head}, followers...); !cmp.Equal(order, want) {
		t.Fatalf("lane order %v, want %v", order, want)
	}
}
