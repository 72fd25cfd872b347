package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A batch holding one stale token commits the others and reports exactly
// that one as ErrLeaseLost; a lone laned item in the same call completes
// as Complete does and promotes its follower. Items in no lane cost one statement,
// plus one read-back because an entry was stale.
func TestCompleteManyFencesEachItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	for range 4 {
		f.one(workqueue.Work{})
	}
	head := f.one(workqueue.Work{SourceLane: "L"})
	follower := f.one(workqueue.Work{SourceLane: "L"})
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
	if err != nil || len(got) != 5 {
		t.Fatalf("claimed %v (%v), want the 4 lane-less items and the head", ids(got), err)
	}
	leases := make([]workqueue.Lease, len(got))
	stale := -1
	for i, it := range got {
		leases[i] = it.Lease
		if it.WorkID == head {
			if it.Lease.InNoLane() {
				t.Fatal("the lane head reports no lane")
			}
			continue
		}
		if !it.Lease.InNoLane() {
			t.Fatalf("work %d in no lane reports a lane", it.WorkID)
		}
		if stale < 0 {
			stale = i // released: its token moves on, this lease is stale
			if err := qu.Release(f.ctx, it.Lease); err != nil {
				t.Fatal(err)
			}
		}
	}
	before := counter.ByStatement()
	errs, _ := qu.CompleteMany(f.ctx, leases)
	onlyStaleLost(t, got, errs, stale)
	for i, it := range got {
		want := "completed"
		if i == stale {
			want = "pending"
		}
		if s := f.state(it.WorkID); s != want {
			t.Fatalf("work %d is %s, want %s", it.WorkID, s, want)
		}
	}
	if s := f.state(follower); s != "pending" {
		t.Fatalf("the head's follower is %s, want promoted to pending", s)
	}
	sent := counter.Since(before)
	if n := sent["FinishBatch"]; n != 1 {
		t.Fatalf("%d batch statements for 4 items in no lane, want 1: %v", n, sent)
	}
	if n := sent["LeaseStates"]; n != 1 {
		t.Fatalf("%d read-backs, want 1 (one entry was stale): %v", n, sent)
	}
}

// Without a stale entry the batch is one statement and nothing is read
// back; a hand-built lease (lanes unknown) takes the per-item path.
func TestCompleteManyAllFreshIsOneStatement(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	got := claimNoLane(t, f, qu, 3)
	byHand := workqueue.Lease{WorkID: got[2].WorkID, Token: got[2].Lease.Token}
	if byHand.InNoLane() {
		t.Fatal("a hand-built lease claims to know its lanes")
	}
	before := counter.ByStatement()
	errs, _ := qu.CompleteMany(f.ctx, []workqueue.Lease{got[0].Lease, got[1].Lease, byHand})
	if diff := cmp.Diff([]error{nil, nil, nil}, errs, cmp.Comparer(func(a, b error) bool { return errors.Is(a, b) })); diff != "" {
		t.Fatalf("errors (-want +got):\n%s", diff)
	}
	sent := counter.Since(before)
	if sent["FinishBatch"] != 1 || sent["LeaseStates"] != 0 || sent["Finish"] != 1 {
		t.Fatalf("statements %v, want one batch, no read-back, one per-item finish", sent)
	}
	for _, it := range got {
		if s := f.state(it.WorkID); s != "completed" {
			t.Fatalf("work %d is %s", it.WorkID, s)
		}
	}
}

// A claim that loses its candidates to another claimer between its scan
// and its CAS reads on and claims the next due rows, instead of coming
// back empty as if nothing more were due.
func TestLostCandidatesAreReplacedInTheSameClaim(t *testing.T) {
	t.Parallel()
	f, qu, in := faultFixture(t, workqueue.Config{})
	var all []int64
	for range 6 {
		all = append(all, f.one(workqueue.Work{}))
	}
	rival := f.claimer("rival")
	var taken []workqueue.Claimed
	// Between this claimer's scan and its first CAS, the rival claims the
	// same first three rows.
	in.Add(faultdb.Rule{Statement: "ClaimBatchCAS", Before: func(context.Context) {
		taken = f.claim(rival, workqueue.ClaimRequest{Max: 3})
	}})
	c, err := qu.NewClaimer(scope, "me", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, stats, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{Max: 3}))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(sorted(all[:3]), sorted(ids(taken))); diff != "" {
		t.Fatalf("the rival took (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(sorted(all[3:]), sorted(ids(got))); diff != "" {
		t.Fatalf("claimed after losing (-want +got):\n%s", diff)
	}
	if stats.LostCAS != 3 || stats.ContendedRounds != 1 {
		t.Fatalf("stats %+v, want 3 lost and one more round", stats)
	}
}

// A claim scans only the classes the scope has work of: classes never
// enqueued to cost no statement. A class's first enqueue is seen by the
// next claim (the enqueue moved the scope's ordinal), which reads the work
// kinds again and scans it.
func TestClaimSkipsClassesTheScopeNeverHad(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	f.one(workqueue.Work{QueueClass: "default"})
	// An hour-wide scan window: however slowly the machine runs between
	// claims, a class's range is one statement, so only the classes are
	// counted, not the clock.
	c, err := qu.NewClaimer(scope, "me", workqueue.ClaimerConfig{ScanWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	req := withTestDefaults(workqueue.ClaimRequest{QueueClasses: []string{"interactive", "default", "bulk"}, Preferred: []string{"interactive"}})
	claim := func() ([]workqueue.Claimed, workqueue.ClaimStats, map[string]int64) {
		t.Helper()
		before := counter.ByStatement()
		got, stats, err := c.Claim(f.ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return got, stats, counter.Since(before)
	}
	got, stats, sent := claim()
	if len(got) != 1 || stats.KindReads != 1 || sent["ClaimCandidates"] != 1 {
		t.Fatalf("first claim: %d items, %+v, statements %v; want the item, one kinds read, one scan", len(got), stats, sent)
	}
	if _, stats, sent = claim(); stats.KindReads != 0 || sent["ClaimCandidates"] != 1 || sent["ListWorkKinds"] != 0 {
		t.Fatalf("claim without enqueues: %+v, statements %v; want one scan and no kinds read", stats, sent)
	}
	bulk := f.one(workqueue.Work{QueueClass: "bulk"})
	got, stats, sent = claim()
	if len(got) != 1 || got[0].WorkID != bulk || stats.KindReads != 1 {
		t.Fatalf("after the first bulk enqueue: %v, %+v, statements %v; want the bulk item", ids(got), stats, sent)
	}
	// Every class asked for a work type the scope has: nothing more to read.
	f.one(workqueue.Work{QueueClass: "interactive"})
	if got, stats, _ = claim(); len(got) != 1 || stats.KindReads != 1 {
		t.Fatalf("after the first interactive enqueue: %v, %+v", ids(got), stats)
	}
	f.one(workqueue.Work{QueueClass: "interactive"})
	if got, stats, _ = claim(); len(got) != 1 || stats.KindReads != 0 {
		t.Fatalf("every class known: %v, %+v; want no kinds read", ids(got), stats)
	}
}

// RenewMany moves every fresh lease's expiry in one statement and reports
// exactly the stale entry as ErrLeaseLost.
func TestRenewManyFencesEachItem(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{Lease: time.Hour})
	got := claimNoLane(t, f, qu, 4)
	const stale = 1
	if err := qu.Release(f.ctx, got[stale].Lease); err != nil {
		t.Fatal(err)
	}
	expiry := func(id int64) time.Time {
		var at time.Time
		if err := f.db.QueryRowContext(f.ctx, "SELECT run_after FROM work_item WHERE work_id = ?", id).Scan(&at); err != nil {
			t.Fatal(err)
		}
		return at
	}
	leases := make([]workqueue.Lease, len(got))
	was := make([]time.Time, len(got))
	for i, it := range got {
		leases[i], was[i] = it.Lease, expiry(it.WorkID)
	}
	before := counter.ByStatement()
	onlyStaleLost(t, got, qu.RenewMany(f.ctx, leases), stale)
	for i := range got {
		if at := expiry(got[i].WorkID); i != stale && !at.After(was[i]) {
			t.Fatalf("work %d: lease expiry %s did not move past %s", got[i].WorkID, at, was[i])
		}
	}
	if s := f.state(got[stale].WorkID); s != "pending" {
		t.Fatalf("the released item is %s after a stale renewal, want pending", s)
	}
	sent := counter.Since(before)
	if sent["RenewLeaseBatch"] != 1 || sent["LeaseStates"] != 1 || sent["RenewLease"] != 0 {
		t.Fatalf("statements %v, want one batch renewal and one read-back", sent)
	}
}

// claimNoLane enqueues n items in no lane and claims them all through qu.
func claimNoLane(t *testing.T, f *fixture, qu *workqueue.Queue, n int) []workqueue.Claimed {
	t.Helper()
	for range n {
		f.one(workqueue.Work{})
	}
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
	if err != nil || len(got) != n {
		t.Fatalf("claimed %v (%v), want %d", ids(got), err, n)
	}
	return got
}

// onlyStaleLost fails unless errs (one per item of got) is ErrLeaseLost
// for the item at stale and nil for every other.
func onlyStaleLost(t *testing.T, got []workqueue.Claimed, errs []error, stale int) {
	t.Helper()
	for i, err := range errs {
		switch {
		case i == stale && !errors.Is(err, workqueue.ErrLeaseLost):
			t.Fatalf("stale work %d: %v, want ErrLeaseLost", got[i].WorkID, err)
		case i != stale && err != nil:
			t.Fatalf("work %d: %v", got[i].WorkID, err)
		}
	}
}

// ClaimMany serves the requests whose classes with work are the same
// (executor shapes of one scheduler turn) with one scope read, one scan,
// one CAS and one read-back, and hands the items out in request order; a
// request whose classes with work differ gets its own claim under the same
// scope read.
func TestClaimManyMergesRequestsForTheSameWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	var defaults []int64
	for range 7 {
		defaults = append(defaults, f.one(workqueue.Work{QueueClass: "default"}))
	}
	bulk := f.one(workqueue.Work{QueueClass: "bulk"})
	c, err := qu.NewClaimer(scope, "me", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	types := []string{"deliver"}
	reqs := []workqueue.ClaimRequest{
		{QueueClasses: []string{"interactive", "default"}, WorkTypes: types, Max: 2, StaleClasses: allClasses},         // latency
		{QueueClasses: []string{"interactive", "default", "bulk"}, WorkTypes: types, Max: 3, StaleClasses: allClasses}, // shared: bulk has work too
		{QueueClasses: []string{"default", "interactive"}, WorkTypes: types, Max: 4, StaleClasses: allClasses},         // same work as the first
		{QueueClasses: []string{"bulk"}, WorkTypes: types, Max: 2, StaleClasses: allClasses},
	}
	before := counter.ByStatement()
	res := c.ClaimMany(f.ctx, reqs)
	sent := counter.Since(before)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("request %d: %v", i, r.Err)
		}
	}
	got := make([][]int64, len(res))
	for i, r := range res {
		got[i] = ids(r.Items)
	}
	// Requests 0 and 2 scan only "default" ("interactive" never had work):
	// one claim of 6, in claim order. Request 1 scans default and bulk in
	// claim order, after them; request 3 takes what bulk has left.
	want := [][]int64{defaults[0:2], {defaults[6], bulk}, defaults[2:6], nil}
	if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("items per request (-want +got):\n%s", diff)
	}
	if sent["GetScope"] != 1 || sent["ClaimBatchCAS"] != 2 || sent["ClaimedByRef"] != 2 || sent["ClaimCandidates"] != 4 {
		t.Fatalf("statements %v: want one scope read, a scan per class of each claim (1+2+1) and a CAS and read-back for each claim that found candidates (2)", sent)
	}
	if res[3].Contended {
		t.Fatalf("request 3 came back short with nothing lost: %+v", res[3])
	}
	if res[0].Stats.Scanned == 0 || res[2].Stats != (workqueue.ClaimStats{}) {
		t.Fatalf("stats: first of a merged claim %+v, second %+v; want the claim's stats on the first only", res[0].Stats, res[2].Stats)
	}
	// An invalid request fails alone.
	res = c.ClaimMany(f.ctx, []workqueue.ClaimRequest{{QueueClasses: []string{"default"}, WorkTypes: types}, reqs[0]})
	if !errors.Is(res[0].Err, workqueue.ErrInvalid) || res[1].Err != nil {
		t.Fatalf("invalid beside valid: %v, %v", res[0].Err, res[1].Err)
	}
}

// Laned completions in one CompleteMany share one transaction, one finish
// statement and one promotion statement. F follows X in source lane S1 and Y in target lane T1;
// G follows F in T1 and H follows F in S1. Completing X and Y together
// promotes F (both its lanes' heads finished in the transaction) and must
// leave G and H blocked behind F, whichever of X and Y is promoted from
// first: the follower found after the second one is behind F, a follower
// the same transaction chose to promote. A stale entry makes the batch settle each
// entry alone: the fresh ones complete, the stale one is lost.
func TestCompleteManyLanedBatchKeepsLaneOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		order []string
		stale bool
	}{
		{"X then Y", []string{"X", "Y"}, false},
		{"Y then X", []string{"Y", "X"}, false},
		{"with a stale entry", []string{"X", "Y", "Z"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
			id := map[string]int64{
				"X": f.one(workqueue.Work{SourceLane: "S1"}),
				"Y": f.one(workqueue.Work{SourceLane: "SY", TargetLane: "T1"}),
				"Z": f.one(workqueue.Work{SourceLane: "S3"}),
				"F": f.one(workqueue.Work{SourceLane: "S1", TargetLane: "T1"}),
				"G": f.one(workqueue.Work{SourceLane: "SG", TargetLane: "T1"}),
				"H": f.one(workqueue.Work{SourceLane: "S1"}),
			}
			c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
			if err != nil || len(got) != 3 {
				t.Fatalf("claimed %v (%v), want the heads X, Y, Z", ids(got), err)
			}
			byID := map[int64]workqueue.Claimed{}
			for _, it := range got {
				byID[it.WorkID] = it
			}
			if tc.stale {
				if err := qu.Release(f.ctx, byID[id["Z"]].Lease); err != nil {
					t.Fatal(err)
				}
			}
			var leases []workqueue.Lease
			for _, name := range tc.order {
				leases = append(leases, byID[id[name]].Lease)
			}
			before := counter.ByStatement()
			errs, fin := qu.CompleteMany(f.ctx, leases)
			sent := counter.Since(before)
			for k, err := range errs {
				stale := tc.order[k] == "Z"
				if stale != errors.Is(err, workqueue.ErrLeaseLost) || (!stale && err != nil) {
					t.Fatalf("%s: %v", tc.order[k], err)
				}
			}
			want := map[string]string{"X": "completed", "Y": "completed", "F": "pending", "G": "blocked", "H": "blocked", "Z": "processing"}
			if tc.stale {
				want["Z"] = "pending" // released: its lease in the batch was stale
			}
			for name, st := range want {
				if got := f.state(id[name]); got != st {
					t.Fatalf("%s is %s, want %s", name, got, st)
				}
			}
			if fin.Promoted != 1 {
				t.Fatalf("promoted %d, want 1 (F): %+v", fin.Promoted, fin)
			}
			wantFinish := map[string]int64{"FinishBatch": 1, "Finish": 0, "PromoteBlockedBatch": 1}
			if tc.stale { // the batch came up short: rolled back, read back, each fresh entry alone
				wantFinish = map[string]int64{"FinishBatch": 1, "LeaseStates": 1, "Finish": 2, "PromoteBlockedBatch": 1}
			}
			for name, n := range wantFinish {
				if sent[name] != n {
					t.Fatalf("statements %v: want %d %s", sent, n, name)
				}
			}
			// F's completion promotes both of its followers.
			next, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
			k := slices.IndexFunc(next, func(c workqueue.Claimed) bool { return c.WorkID == id["F"] })
			if err != nil || k < 0 {
				t.Fatalf("next claim %v (%v), want F", ids(next), err)
			}
			for _, it := range next {
				if it.WorkID == id["G"] || it.WorkID == id["H"] {
					t.Fatalf("next claim %v took a follower of F", ids(next))
				}
			}
			if errs, fin := qu.CompleteMany(f.ctx, []workqueue.Lease{next[k].Lease}); errs[0] != nil || fin.Promoted != 2 {
				t.Fatalf("completing F: %v, %+v; want G and H promoted", errs[0], fin)
			}
		})
	}
}

// Randomized lanes (every item in one of 5 source lanes, most also in one
// of 4 target lanes), drained in rounds: claim everything claimable, then
// complete it all with one CompleteMany in a random order. Each round must
// claim exactly the items whose predecessors in both of their lanes are
// all completed: nothing early (lane order) and nothing late (a follower
// the batch should have promoted).
func TestCompleteManyRandomLanesPromoteExactlyTheReady(t *testing.T) {
	t.Parallel()
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			rng := rand.New(rand.NewPCG(uint64(seed), 0))
			lanes := f.randomLanes(rng, 60, 5, 4, 4)
			done := map[int64]bool{}
			ready := func() []int64 { return lanes.ready(done) }
			c := f.claimer("w")
			for round := 0; len(done) < len(lanes); round++ {
				want := ready()
				got := f.claim(c, workqueue.ClaimRequest{})
				if diff := cmp.Diff(sorted(want), sorted(ids(got))); diff != "" {
					t.Fatalf("round %d: claimed (-ready +got):\n%s", round, diff)
				}
				rng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
				leases := make([]workqueue.Lease, len(got))
				for i, it := range got {
					leases[i] = it.Lease
				}
				errs, _ := f.qu.CompleteMany(f.ctx, leases)
				for i, err := range errs {
					if err != nil {
						t.Fatalf("round %d: complete %d: %v", round, got[i].WorkID, err)
					}
					done[got[i].WorkID] = true
				}
			}
		})
	}
}

// A laned completion batch under faults: a deadlock inside its transaction
// is run again whole; a lost reply of its commit makes the retry's finish
// match nothing, and the read-back recognizes every entry as completed by
// the lost run (followers possibly promoted) instead of calling them lost.
// Either way each lane's follower is claimable exactly once afterwards.
func TestCompleteManyLanedBatchUnderFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rule    faultdb.Rule
		unknown bool // PromotionsUnknown expected
	}{
		{"deadlock on the follower lock", faultdb.Rule{Statement: "LockWorkItems", Fault: faultdb.Deadlock}, false},
		{"lost reply of the commit", faultdb.Rule{Statement: "COMMIT", Fault: faultdb.ReplyLost}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, qu, in := faultFixture(t, workqueue.Config{})
			var heads, followers []int64
			for _, lane := range []string{"A", "B", "C"} {
				heads = append(heads, f.one(workqueue.Work{SourceLane: lane}))
			}
			for _, lane := range []string{"A", "B", "C"} {
				followers = append(followers, f.one(workqueue.Work{SourceLane: lane}))
			}
			c := f.claimer("w")
			got := f.claim(c, workqueue.ClaimRequest{})
			if diff := cmp.Diff(sorted(heads), sorted(ids(got))); diff != "" {
				t.Fatalf("claimed (-heads +got):\n%s", diff)
			}
			leases := make([]workqueue.Lease, len(got))
			for i, it := range got {
				leases[i] = it.Lease
			}
			in.Add(tc.rule)
			errs, fin := qu.CompleteMany(f.ctx, leases)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("complete %d: %v", got[i].WorkID, err)
				}
			}
			if in.Fired(tc.rule.Statement) != 1 {
				t.Fatalf("the fault did not fire")
			}
			if fin.PromotionsUnknown != tc.unknown || (!tc.unknown && fin.Promoted != 3) {
				t.Fatalf("finished %+v", fin)
			}
			for _, id := range heads {
				if s := f.state(id); s != workqueue.StateCompleted {
					t.Fatalf("head %d is %s", id, s)
				}
			}
			next := f.claim(c, workqueue.ClaimRequest{})
			if diff := cmp.Diff(sorted(followers), sorted(ids(next))); diff != "" {
				t.Fatalf("claimed after the batch (-followers +got):\n%s", diff)
			}
		})
	}
}

// randomLaneItem is an item of randomLanes.
type randomLaneItem struct {
	id             int64
	source, target string
}

type randomLaneItems []randomLaneItem

// randomLanes enqueues n items, each in one of sources source lanes and,
// except one in targetOneIn, in one of targets target lanes.
func (f *fixture) randomLanes(rng *rand.Rand, n, sources, targets, targetOneIn int) randomLaneItems {
	f.t.Helper()
	var items randomLaneItems
	for range n {
		it := randomLaneItem{source: fmt.Sprint("S", rng.IntN(sources))}
		if rng.IntN(targetOneIn) > 0 {
			it.target = fmt.Sprint("T", rng.IntN(targets))
		}
		it.id = f.one(workqueue.Work{SourceLane: it.source, TargetLane: it.target})
		items = append(items, it)
	}
	return items
}

// ready are the items not done whose predecessors in both of their lanes
// are all done, in enqueue (ordinal) order.
func (items randomLaneItems) ready(done map[int64]bool) []int64 {
	var out []int64
	for i, it := range items {
		if done[it.id] {
			continue
		}
		blocked := slices.ContainsFunc(items[:i], func(before randomLaneItem) bool {
			return !done[before.id] && (before.source == it.source || (it.target != "" && before.target == it.target))
		})
		if !blocked {
			out = append(out, it.id)
		}
	}
	return out
}
