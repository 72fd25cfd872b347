package stats_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

var (
	classes   = []string{"default", "bulk", "interactive"}
	workTypes = []string{"deliver", "notify", "other"}
	states    = []string{"pending", "blocked", "processing", "dependency_registration", "waiting_dependency", "inactive", "completed", "skipped", "dead"}
)

// row is a work item as the brute-force count sees it.
type row struct {
	scope      string
	generation int64
	class      string
	workType   string
	state      string
	runAfter   time.Time
	attempts   int
}

// seedRandom inserts n random rows of scope at active generation gen (and
// of the generation before, which no claimer sees), each run_after at
// least ten minutes from now, so the brute force and the reader agree on
// due however slowly a loaded machine runs the test.
func seedRandom(t *testing.T, db *sql.DB, rng *rand.Rand, scope string, gen int64, n int, eventBase *int64) {
	t.Helper()
	for range n {
		g := gen
		if rng.IntN(8) == 0 {
			g = gen - 1
		}
		offset := time.Duration(rng.Int64N(int64(time.Hour))) + 10*time.Minute
		if rng.IntN(2) == 0 {
			offset = -offset
		}
		attempts := []int{0, 0, 1, 3}[rng.IntN(4)]
		*eventBase++
		_, err := db.Exec(`INSERT INTO work_item (event_id, scope_id, generation, work_type, queue_class, state, run_after,
			attempt_count, lane_ordinal, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, DATE_ADD(NOW(6), INTERVAL ? MICROSECOND), ?, ?, NOW(6), NOW(6))`,
			*eventBase, scope, g, workTypes[rng.IntN(len(workTypes))], classes[rng.IntN(len(classes))],
			states[rng.IntN(len(states))], offset.Microseconds(), attempts, *eventBase)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func registerKinds(t *testing.T, db *sql.DB, scope string) {
	t.Helper()
	for _, c := range classes {
		for _, w := range workTypes {
			if _, err := db.Exec("INSERT INTO scope_work_kind (scope_id, queue_class, work_type, first_seen_at) VALUES (?, ?, ?, NOW(6))", scope, c, w); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func readRows(t *testing.T, db *sql.DB) []row {
	t.Helper()
	rs, err := db.Query("SELECT scope_id, generation, queue_class, work_type, state, run_after, attempt_count FROM work_item")
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	var out []row
	for rs.Next() {
		var r row
		if err := rs.Scan(&r.scope, &r.generation, &r.class, &r.workType, &r.state, &r.runAfter, &r.attempts); err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rs.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// bruteForce counts rows as the claim path would treat them at now: the
// scope's active generation, the class, the work types.
func bruteForce(rows []row, scope string, gen int64, class string, types []string, now time.Time) stats.Counts {
	var c stats.Counts
	var oldestDue, oldestExpired time.Time
	for _, r := range rows {
		if r.scope != scope || r.generation != gen || r.class != class || !slices.Contains(types, r.workType) {
			continue
		}
		due := !r.runAfter.After(now)
		switch r.state {
		case "pending":
			if due {
				c.Due++
				if oldestDue.IsZero() || r.runAfter.Before(oldestDue) {
					oldestDue = r.runAfter
				}
			} else {
				c.NotDue++
				if r.attempts > 0 {
					c.Retrying++
				}
			}
		case "processing":
			if due {
				c.ExpiredLeases++
				if oldestExpired.IsZero() || r.runAfter.Before(oldestExpired) {
					oldestExpired = r.runAfter
				}
			} else {
				c.Leased++
			}
		case "blocked":
			c.LaneBlocked++
		case "dependency_registration", "waiting_dependency":
			c.WaitingDependency++
		case "inactive":
			c.InactiveSuccessors++
		case "dead":
			c.Dead++
		}
	}
	if !oldestDue.IsZero() {
		c.OldestDue = now.Sub(oldestDue)
	}
	if !oldestExpired.IsZero() {
		c.OldestExpiredLease = now.Sub(oldestExpired)
	}
	return c
}

// The statistics agree with a brute-force count over random rows of every
// state, class, work type, due time and attempt count, over many seeds:
// Exact exactly, Cheap exactly but for Retrying (not counted), Drained with
// "no live row". Rows of the previous generation and of a scope that
// differs by a trailing space are in the table and must not be counted.
func TestStatsAgreeWithBruteForce(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, "seed")
	ctx := context.Background()
	r, err := stats.New(db)
	if err != nil {
		t.Fatal(err)
	}
	var eventBase int64
	const seeds = 24
	for seed := range seeds {
		scope := fmt.Sprintf("scope-%d", seed)
		const gen = 3
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		if err := qu.EnsureScope(ctx, scope, gen); err != nil {
			t.Fatal(err)
		}
		if err := qu.EnsureScope(ctx, scope+" ", gen); err != nil {
			t.Fatal(err)
		}
		registerKinds(t, db, scope)
		n := rng.IntN(200)
		if seed%6 == 0 {
			n = 0 // drained, with only the neighbours' rows
		}
		seedRandom(t, db, rng, scope, gen, n, &eventBase)
		seedRandom(t, db, rng, scope+" ", gen, 20, &eventBase)
		rows := readRows(t, db)

		filters := []stats.Filter{{}, {Classes: []string{"bulk"}, WorkTypes: []string{"notify"}}, {Classes: []string{"interactive", "default"}}}
		for _, f := range filters {
			exact, err := r.Exact(ctx, scope, f)
			if err != nil {
				t.Fatal(err)
			}
			cheap, err := r.Cheap(ctx, scope, f)
			if err != nil {
				t.Fatal(err)
			}
			if exact.Generation != gen || !exact.Exact || cheap.Exact || cheap.Capped {
				t.Fatalf("seed %d %+v: generation %d, exact %t/%t, capped %t", seed, f, exact.Generation, exact.Exact, cheap.Exact, cheap.Capped)
			}
			wantClasses := f.Classes
			if len(wantClasses) == 0 {
				wantClasses = classes
			}
			if len(exact.Classes) != len(wantClasses) {
				t.Fatalf("seed %d %+v: %d classes, want %d", seed, f, len(exact.Classes), len(wantClasses))
			}
			var total stats.Counts
			for i, c := range exact.Classes {
				types := f.WorkTypes
				if len(types) == 0 {
					types = workTypes
				}
				want := bruteForce(rows, scope, gen, c.Class, types, exact.At)
				if diff := cmp.Diff(want, c.Counts); diff != "" {
					t.Fatalf("seed %d %+v class %s: exact counts differ from the brute force (-want +got):\n%s", seed, f, c.Class, diff)
				}
				wantCheap := bruteForce(rows, scope, gen, c.Class, types, cheap.At)
				wantCheap.Retrying = -1
				if diff := cmp.Diff(wantCheap, cheap.Classes[i].Counts); diff != "" {
					t.Fatalf("seed %d %+v class %s: cheap counts differ from the brute force (-want +got):\n%s", seed, f, c.Class, diff)
				}
				total.Due += want.Due
				total.Dead += want.Dead
				total.LaneBlocked += want.LaneBlocked
			}
			if exact.Total.Due != total.Due || exact.Total.Dead != total.Dead || exact.Total.LaneBlocked != total.LaneBlocked {
				t.Fatalf("seed %d %+v: totals %+v, want due %d dead %d blocked %d", seed, f, exact.Total, total.Due, total.Dead, total.LaneBlocked)
			}
		}
		all, err := r.Exact(ctx, scope, stats.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		// A Reader on the Queue's own statements counts the same.
		shared, err := stats.NewFromQueue(qu).Exact(ctx, scope, stats.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if shared.Total.Live() != all.Total.Live() || shared.Total.Dead != all.Total.Dead || shared.Total.Due != all.Total.Due {
			t.Fatalf("seed %d: NewFromQueue's totals %+v, New's %+v", seed, shared.Total, all.Total)
		}
		drained, err := r.Drained(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		if drained != (all.Total.Live() == 0) {
			t.Fatalf("seed %d: drained %t with %d live items", seed, drained, all.Total.Live())
		}
		if n == 0 && !drained {
			t.Fatalf("seed %d: an empty scope is not drained", seed)
		}
	}
}

// Cheap stops counting at CapCount+1 and says so; Exact counts on; the
// oldest due age is exact either way.
func TestCheapIsCapped(t *testing.T) {
	t.Parallel()
	const scope = "big"
	_, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	registerKinds(t, db, scope)
	const n = stats.CapCount + 50
	_, err := db.Exec(`INSERT INTO work_item (event_id, scope_id, generation, work_type, queue_class, state, run_after, lane_ordinal, created_at, updated_at)
		WITH d AS (SELECT 0 AS n UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
		           UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9),
		     seq AS (SELECT a.n + 10*b.n + 100*c.n + 1000*e.n AS i FROM d a, d b, d c, d e)
		SELECT i + 1, ?, 1, 'deliver', 'default', 'pending', DATE_SUB(NOW(6), INTERVAL i SECOND), i, NOW(6), NOW(6)
		FROM seq WHERE i < ?`, scope, n)
	if err != nil {
		t.Fatal(err)
	}
	r, err := stats.New(db)
	if err != nil {
		t.Fatal(err)
	}
	cheap, err := r.Cheap(ctx, scope, stats.Filter{Classes: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	exact, err := r.Exact(ctx, scope, stats.Filter{Classes: []string{"default"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := cheap.Classes[0]; c.Due != stats.CapCount+1 || !c.Capped || !cheap.Capped {
		t.Fatalf("cheap: due %d capped %t/%t, want %d and capped", c.Due, c.Capped, cheap.Capped, stats.CapCount+1)
	}
	if exact.Total.Due != n || exact.Capped {
		t.Fatalf("exact: due %d capped %t, want %d", exact.Total.Due, exact.Capped, n)
	}
	// The oldest row is n-1 seconds overdue at insert time; the two reads
	// came later, each by its own clock.
	for _, s := range []stats.Scope{cheap, exact} {
		if age := s.Total.OldestDue; age < (n-1)*time.Second || age > (n-1)*time.Second+10*time.Minute {
			t.Fatalf("oldest due %s, want about %s", age, (n-1)*time.Second)
		}
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	_, db, _ := queuetest.New(t, workqueue.Config{}, "known")
	ctx := context.Background()
	r, err := stats.New(db)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []stats.Filter{{Classes: []string{""}}, {WorkTypes: []string{"deliver", ""}}} {
		if _, err := r.Exact(ctx, "known", f); !errors.Is(err, stats.ErrInvalid) {
			t.Fatalf("filter %+v: %v, want ErrInvalid", f, err)
		}
	}
	if _, err := r.Cheap(ctx, "", stats.Filter{}); !errors.Is(err, stats.ErrInvalid) {
		t.Fatalf("empty scope: %v, want ErrInvalid", err)
	}
	for _, scope := range []string{"unknown", "known "} { // NO PAD: "known " is another scope
		if _, err := r.Cheap(ctx, scope, stats.Filter{}); !errors.Is(err, stats.ErrUnknownScope) {
			t.Fatalf("scope %q: %v, want ErrUnknownScope", scope, err)
		}
		if _, err := r.Drained(ctx, scope); !errors.Is(err, stats.ErrUnknownScope) {
			t.Fatalf("drained %q: %v, want ErrUnknownScope", scope, err)
		}
	}
}

// The statistics of a queue driven through the runtime say what a claimer
// then does: Due is exactly what claims take; lane followers, delayed items,
// another class, retries and dead items are counted where they belong; a
// scope is drained only when nothing live is left.
func TestStatsMatchWhatClaimTakes(t *testing.T) {
	t.Parallel()
	const scope = "tenant-a/pack-1"
	// The retried item must stay not due while the counts are read, however
	// slow the machine: an hour, not the default second.
	qu, db, _ := queuetest.New(t, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: time.Hour}}, scope)
	ctx := context.Background()
	r, err := stats.New(db)
	if err != nil {
		t.Fatal(err)
	}
	var events []workqueue.Event
	add := func(key string, w workqueue.Work) {
		events = append(events, workqueue.Event{
			IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{w},
		})
	}
	for i := range 6 {
		add(fmt.Sprintf("free-%d", i), workqueue.Work{WorkType: "deliver"})
	}
	for i := range 4 { // one head, three followers
		add(fmt.Sprintf("lane-%d", i), workqueue.Work{WorkType: "deliver", SourceLane: "L"})
	}
	for i := range 3 {
		add(fmt.Sprintf("later-%d", i), workqueue.Work{WorkType: "deliver", Delay: time.Hour})
	}
	for i := range 2 {
		add(fmt.Sprintf("bulk-%d", i), workqueue.Work{WorkType: "deliver", QueueClass: "bulk"})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	def := stats.Filter{Classes: []string{"default"}}
	exact := func() stats.Counts {
		t.Helper()
		s, err := r.Exact(ctx, scope, def)
		if err != nil {
			t.Fatal(err)
		}
		return s.Total
	}
	before := exact()
	if before.Due != 7 || before.NotDue != 3 || before.LaneBlocked != 3 || before.Retrying != 0 || before.Live() != 13 {
		t.Fatalf("after enqueue: %+v, want 7 due, 3 not due, 3 lane-blocked", before)
	}
	all, err := r.Cheap(ctx, scope, stats.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Classes) != 2 || all.Classes[0].Class != "bulk" || all.Classes[0].Due != 2 || all.Total.Live() != 15 {
		t.Fatalf("every class: %+v", all)
	}

	cl, err := qu.NewClaimer(scope, "stats-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var claimed []workqueue.Claimed
	for {
		got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		claimed = append(claimed, got...)
	}
	if int64(len(claimed)) != before.Due {
		t.Fatalf("claims took %d items; statistics said %d were due", len(claimed), before.Due)
	}
	if c := exact(); c.Due != 0 || c.Leased != 7 || c.LaneBlocked != 3 {
		t.Fatalf("after claiming: %+v, want 7 leased, 3 still blocked", c)
	}
	// Two laneless items: one retried (in backoff), one dead; the rest,
	// the lane head among them, completed (its next follower becomes the
	// head, due).
	var laneless []workqueue.Claimed
	for _, c := range claimed {
		if c.Event == nil {
			t.Fatal("a claim without its event")
		}
		if strings.HasPrefix(c.Event.SourceID, "free-") && len(laneless) < 2 {
			laneless = append(laneless, c)
			continue
		}
		if _, err := qu.Complete(ctx, c.Lease); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := qu.Retry(ctx, laneless[0], workqueue.Failure{Class: "flaky"}); err != nil {
		t.Fatal(err)
	}
	if _, err := qu.Fail(ctx, laneless[1], workqueue.Failure{Class: "broken"}, workqueue.ErrPermanent); err != nil {
		t.Fatal(err)
	}
	c := exact()
	want := stats.Counts{Due: 1, NotDue: 4, Retrying: 1, LaneBlocked: 2, Dead: 1}
	c.OldestDue = 0
	if diff := cmp.Diff(want, c); diff != "" {
		t.Fatalf("after retry, dead and completions (-want +got):\n%s", diff)
	}
	if drained, err := r.Drained(ctx, scope); err != nil || drained {
		t.Fatalf("drained %t (%v) with live items", drained, err)
	}
}
