package workqueue_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

func leasesOf(cs []workqueue.Claimed) []workqueue.Lease {
	out := make([]workqueue.Lease, len(cs))
	for i, c := range cs {
		out[i] = c.Lease
	}
	return out
}

func flatten(taken [][]workqueue.Claimed) []workqueue.Claimed {
	var out []workqueue.Claimed
	for _, t := range taken {
		out = append(out, t...)
	}
	return out
}

// Claim on promote takes the followers that fit a place — its class, room
// left, a work type offered, due — straight to processing under a lease of
// the finishing claimer, and promotes the rest as CompleteMany does: a bulk
// follower with no bulk place, a follower of another work type, a delayed
// follower and one past the places' room stay for a claim turn.
func TestCompleteManyTakingTakesTheFollowersThatFit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	lanes := []string{"A", "B", "C", "D", "E", "F"}
	for _, l := range lanes {
		f.one(workqueue.Work{SourceLane: l})
	}
	follower := map[string]int64{
		"A": f.one(workqueue.Work{SourceLane: "A"}),
		"B": f.one(workqueue.Work{SourceLane: "B"}),
		"C": f.one(workqueue.Work{SourceLane: "C", QueueClass: "bulk"}),
		"D": f.one(workqueue.Work{SourceLane: "D", WorkType: "other"}),
		"E": f.one(workqueue.Work{SourceLane: "E", Delay: time.Hour}),
		"F": f.one(workqueue.Work{SourceLane: "F"}),
	}
	c, err := qu.NewClaimer(scope, "taker", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	heads := f.claim(c, workqueue.ClaimRequest{})
	if len(heads) != len(lanes) {
		t.Fatalf("claimed %v, want the %d heads", ids(heads), len(lanes))
	}
	places := []workqueue.TakePlace{{QueueClasses: []string{"interactive"}, Max: 3}, {QueueClasses: []string{"default", "interactive"}, Max: 2}}
	before := counter.ByStatement()
	errs, fin, taken, err := c.CompleteManyTaking(f.ctx, leasesOf(heads), places, []string{"deliver"})
	sent := counter.Since(before)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil {
			t.Fatalf("complete %d: %v", heads[i].WorkID, e)
		}
	}
	if len(taken[0]) != 0 || len(taken[1]) != 2 {
		t.Fatalf("taken %v / %v, want nothing for the interactive place and two for the default one", ids(taken[0]), ids(taken[1]))
	}
	got := ids(taken[1])
	// Followers are taken in lane order of their finished heads' batch; A,
	// B and F are the default-class, deliver, due ones: two fit.
	for _, id := range got {
		if id != follower["A"] && id != follower["B"] && id != follower["F"] {
			t.Fatalf("took %d, which does not fit a place", id)
		}
	}
	if fin.Taken != 2 || fin.Promoted != 4 {
		t.Fatalf("finished %+v, want 2 taken and 4 promoted (the bulk, other-type, delayed and remaining default followers)", fin)
	}
	var owner string
	for _, it := range taken[1] {
		if s := f.state(it.WorkID); s != workqueue.StateProcessing {
			t.Fatalf("taken %d is %s", it.WorkID, s)
		}
		if err := f.db.QueryRow("SELECT lease_owner FROM work_item WHERE work_id = ?", it.WorkID).Scan(&owner); err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(owner, c.LeasePrefix()) {
			t.Fatalf("taken %d is leased by %q, want the claimer's %q", it.WorkID, owner, c.LeasePrefix())
		}
		if it.Event == nil || it.Attempt != 1 || it.Lease.InNoLane() {
			t.Fatalf("taken item %+v: want its event, attempt 1 and its lanes", it)
		}
	}
	if s := f.state(follower["E"]); s != workqueue.StatePending {
		t.Fatalf("the delayed follower is %s, want pending (promoted, keeping its time)", s)
	}
	want := map[string]int64{"FinishBatch": 1, "TakePromotedBatch": 1, "PromoteBlockedBatch": 1, "ClaimedByRef": 1}
	for name, n := range want {
		if sent[name] != n {
			t.Fatalf("statements %v: want %d %s", sent, n, name)
		}
	}
	// The untaken ones are claimable; the taken ones are not claimed twice.
	next := f.claim(c, workqueue.ClaimRequest{WorkTypes: []string{"deliver", "other"}})
	untaken := []int64{follower["C"], follower["D"], follower["A"], follower["B"], follower["F"]}
	untaken = slices.DeleteFunc(untaken, func(id int64) bool { return slices.Contains(got, id) })
	if diff := cmp.Diff(sorted(untaken), sorted(ids(next))); diff != "" {
		t.Fatalf("claimed after the batch (-untaken +got):\n%s", diff)
	}
	// A taken item's lease is an ordinary one.
	if errs, _ := qu.CompleteMany(f.ctx, leasesOf(taken[1])); errs[0] != nil || errs[1] != nil {
		t.Fatalf("completing the taken items: %v", errs)
	}
}

// A follower of a class paused before the read-back is not handed over: it
// is released unrun and stays claimable once the class resumes.
func TestCompleteManyTakingReleasesAPausedClass(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.one(workqueue.Work{SourceLane: "A"})
	next := f.one(workqueue.Work{SourceLane: "A"})
	c := f.claimer("taker")
	heads := f.claim(c, workqueue.ClaimRequest{})
	if err := f.qu.PauseClass(f.ctx, scope, "default"); err != nil {
		t.Fatal(err)
	}
	errs, fin, taken, err := c.CompleteManyTaking(f.ctx, leasesOf(heads), []workqueue.TakePlace{{QueueClasses: allClasses, Max: 4}}, []string{"deliver"})
	if err != nil || errs[0] != nil {
		t.Fatalf("complete: %v %v", errs, err)
	}
	if len(taken[0]) != 0 || fin.Taken != 0 {
		t.Fatalf("took %v (%+v) of a paused class", ids(taken[0]), fin)
	}
	if s := f.state(next); s != workqueue.StatePending {
		t.Fatalf("the follower is %s, want pending (released)", s)
	}
	if err := f.qu.ResumeClass(f.ctx, scope, "default"); err != nil {
		t.Fatal(err)
	}
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != next {
		t.Fatalf("claimed %v after the resume, want %d", ids(got), next)
	}
}

// Randomized lanes drained by claim on promote alone, where it can: each
// round completes what it holds and takes what it may (places for half of
// it), then claims the rest. Every round's items — taken or claimed — must
// be exactly those whose predecessors in both lanes are completed.
func TestCompleteManyTakingRandomLanesRunExactlyTheReady(t *testing.T) {
	t.Parallel()
	for seed := int64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			f := newFixture(t, workqueue.Config{})
			rng := rand.New(rand.NewPCG(uint64(seed), 7))
			lanes := f.randomLanes(rng, 60, 6, 4, 3)
			done := map[int64]bool{}
			c := f.claimer("w")
			var held []workqueue.Claimed
			tookAny := false
			for round := 0; len(done) < len(lanes); round++ {
				held = append(held, f.claim(c, workqueue.ClaimRequest{})...)
				if diff := cmp.Diff(sorted(lanes.ready(done)), sorted(ids(held))); diff != "" {
					t.Fatalf("round %d: running (-ready +taken and claimed):\n%s", round, diff)
				}
				rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
				places := []workqueue.TakePlace{{QueueClasses: allClasses, Max: (len(held) + 1) / 2}}
				errs, _, taken, err := c.CompleteManyTaking(f.ctx, leasesOf(held), places, []string{"deliver"})
				if err != nil {
					t.Fatal(err)
				}
				for i, e := range errs {
					if e != nil {
						t.Fatalf("round %d: complete %d: %v", round, held[i].WorkID, e)
					}
					done[held[i].WorkID] = true
				}
				held = flatten(taken)
				tookAny = tookAny || len(held) > 0
			}
			if !tookAny {
				t.Fatal("no round took a follower")
			}
		})
	}
}

// Faults in a taking batch: a deadlock inside its transaction runs it again
// whole (the retry chooses again; nothing is taken twice); a lost reply of
// its commit makes the retry's finish match nothing, and the read-back after
// it still finds the followers the lost run took: they are handed over, not
// stranded until their leases expire.
func TestCompleteManyTakingUnderFaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []faultdb.Rule{
		{Statement: "TakePromotedBatch", Fault: faultdb.Deadlock},
		{Statement: "COMMIT", Fault: faultdb.ReplyLost},
	} {
		t.Run(fmt.Sprint(tc.Statement, " ", tc.Fault), func(t *testing.T) {
			f, qu, in := faultFixture(t, workqueue.Config{})
			var followers []int64
			for _, lane := range []string{"A", "B", "C"} {
				f.one(workqueue.Work{SourceLane: lane})
			}
			for _, lane := range []string{"A", "B", "C"} {
				followers = append(followers, f.one(workqueue.Work{SourceLane: lane}))
			}
			c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			heads := f.claim(c, workqueue.ClaimRequest{})
			in.Add(tc)
			errs, _, taken, err := c.CompleteManyTaking(f.ctx, leasesOf(heads), []workqueue.TakePlace{{QueueClasses: allClasses, Max: 3}}, []string{"deliver"})
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range errs {
				if e != nil {
					t.Fatalf("complete %d: %v", heads[i].WorkID, e)
				}
			}
			if in.Fired(tc.Statement) != 1 {
				t.Fatal("the fault did not fire")
			}
			if diff := cmp.Diff(sorted(followers), sorted(ids(taken[0]))); diff != "" {
				t.Fatalf("taken (-followers +got):\n%s", diff)
			}
			for _, id := range followers {
				if s := f.state(id); s != workqueue.StateProcessing {
					t.Fatalf("follower %d is %s", id, s)
				}
			}
			if errs, _ := qu.CompleteMany(f.ctx, leasesOf(taken[0])); slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
				t.Fatalf("completing the taken followers: %v", errs)
			}
		})
	}
}

// A lane runs at most MaxTakenInARow followers in a row by claim on
// promote: the next is promoted instead, and waits its turn behind older
// claimable work (here: claimed by a claim turn), after which takes start
// again.
func TestCompleteManyTakingYieldsAfterMaxTakenInARow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	var lane []int64
	for range workqueue.MaxTakenInARow + 4 {
		lane = append(lane, f.one(workqueue.Work{SourceLane: "long"}))
	}
	c := f.claimer("w")
	held := f.claim(c, workqueue.ClaimRequest{})
	places := []workqueue.TakePlace{{QueueClasses: allClasses, Max: 1}}
	var ran []int64
	var runs []int // items run per take chain
	run := 0
	for len(held) == 1 {
		ran = append(ran, held[0].WorkID)
		run++
		errs, fin, taken, err := c.CompleteManyTaking(f.ctx, leasesOf(held), places, []string{"deliver"})
		if err != nil || errs[0] != nil {
			t.Fatalf("complete %d: %v %v", held[0].WorkID, errs, err)
		}
		held = taken[0]
		if len(held) == 0 && fin.Promoted == 1 {
			runs = append(runs, run)
			run = 0
			held = f.claim(c, workqueue.ClaimRequest{}) // the promoted follower
		}
	}
	runs = append(runs, run)
	if diff := cmp.Diff(lane, ran); diff != "" {
		t.Fatalf("ran out of lane order (-lane +ran):\n%s", diff)
	}
	if diff := cmp.Diff([]int{workqueue.MaxTakenInARow + 1, 3}, runs); diff != "" {
		t.Fatalf("items per run of takes (-want +got):\n%s", diff)
	}
}
