package plancheck_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/plancheck"
	"github.com/laneq/laneq/queries"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A server of its own: see tidbtest.MainOwnServer.
func TestMain(m *testing.M) { os.Exit(tidbtest.MainOwnServer(m)) }

// seeded is the two fixture databases, set by TestPlancheck for its subtests.
var seeded []plancheck.Fixture

func scales(t *testing.T) []plancheck.Fixture {
	t.Helper()
	if len(seeded) != 2 {
		t.Fatal("fixture databases were not seeded")
	}
	return seeded
}

// TestPlancheck seeds two fixture databases (scales 100 and 2,000: small to
// keep the test fast; make plancheck checks the catalog at 100 and 10,000)
// and runs every rule's test on them.
func TestPlancheck(t *testing.T) {
	for _, n := range []int{100, 2000} {
		db, _ := tidbtest.NewFreshDB(t)
		if err := plancheck.Seed(context.Background(), db, int64(n), io.Discard); err != nil {
			t.Fatalf("seed %d: %v", n, err)
		}
		seeded = append(seeded, plancheck.Fixture{Name: fmt.Sprintf("scale %d", n), Scale: n, DB: db})
	}
	for name, fn := range map[string]func(*testing.T){
		"CatalogPasses":                           testCatalogPasses,
		"FullScanIsCaught":                        testFullScanIsCaught,
		"OrLanePredicateIsCaught":                 testOrLanePredicateIsCaught,
		"FoldedExistsIsCaught":                    testFoldedExistsIsCaught,
		"RowsGrowingWithScaleAreCaught":           testRowsGrowingWithScaleAreCaught,
		"OverBudgetIsCaught":                      testOverBudgetIsCaught,
		"CoverageRuleFailsAStatementWithoutACase": testCoverageRuleFailsAStatementWithoutACase,
		"EachSkewStaysBounded":                    testEachSkewStaysBounded,
		"TimeRuleCatchesGrowthRowsHide":           testTimeRuleCatchesGrowthRowsHide,
		"TracedUnboundedWindowFails":              testTracedUnboundedWindowFails,
		"OwnDatabaseIsChecked":                    testOwnDatabaseIsChecked,
		"StaleFixtureIsRefused":                   testStaleFixtureIsRefused,
		"UncachedHotPlanIsCaught":                 testUncachedHotPlanIsCaught,
	} {
		t.Run(name, fn)
	}
}

// check runs one synthetic statement through the harness.
func check(t *testing.T, stmt string, c plancheck.Case) plancheck.Result {
	t.Helper()
	c.Query = "Probe"
	rep, err := plancheck.Check(context.Background(), []plancheck.Statement{{Name: "Probe", SQL: stmt}}, []plancheck.Case{c}, scales(t), plancheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Results[0]
}

func requireViolation(t *testing.T, res plancheck.Result, wants ...string) {
	t.Helper()
	all := strings.Join(res.Violations, "\n")
	for _, w := range wants {
		if !strings.Contains(all, w) {
			t.Fatalf("violations do not mention %q:\n%s\n(rows read %v, operators %s)", w, all, res.RowsRead, res.Operators)
		}
	}
	t.Logf("caught:\n  %s", strings.Join(res.Violations, "\n  "))
}

// catalog is the real catalog and its cases.
func catalog(t *testing.T) ([]plancheck.Statement, []plancheck.Case) {
	t.Helper()
	stmts, err := plancheck.CatalogStatements()
	if err != nil {
		t.Fatal(err)
	}
	cases, err := plancheck.LoadCases(queries.PlanCases)
	if err != nil {
		t.Fatal(err)
	}
	return stmts, cases
}

// The whole catalog passes on the fixture: the same check make plancheck
// runs, at the test's scales.
func testCatalogPasses(t *testing.T) {
	stmts, cases := catalog(t)
	rep, err := plancheck.Check(context.Background(), stmts, cases, scales(t), plancheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Pass() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("catalog fails plancheck:\n%s", b.String())
	}
}

func testFullScanIsCaught(t *testing.T) {
	res := check(t, `SELECT work_id FROM work_item WHERE failure_summary = sqlc.arg(summary) LIMIT 10`,
		plancheck.Case{Args: map[string]any{"summary": "nope"}, MaxRowsRead: 100000})
	requireViolation(t, res, "TableFullScan", "full scan")

	// A reviewed allow-list entry is the only escape.
	res = check(t, `SELECT work_id FROM work_item WHERE failure_summary = sqlc.arg(summary) LIMIT 10`,
		plancheck.Case{Args: map[string]any{"summary": "nope"}, MaxRowsRead: 100000, AllowFullScan: "test", ScaleSlack: ptr(int64(1 << 40))})
	if !res.Pass() {
		t.Fatalf("allowed full scan still fails: %v", res.Violations)
	}
}

// Seed 002: an OR over the two lane columns cannot ride either lane index
// and reads the scope's prefix instead of the lane.
func testOrLanePredicateIsCaught(t *testing.T) {
	res := check(t, `SELECT work_id FROM work_item
		WHERE scope_id = sqlc.arg(scope_id) AND generation = sqlc.arg(generation)
		  AND (source_lane_key = sqlc.arg(lane) OR target_lane_key = sqlc.arg(lane))
		  AND state IN ('pending', 'blocked', 'processing', 'waiting_dependency')`,
		plancheck.Case{Args: map[string]any{"scope_id": "$scope", "generation": "$generation", "lane": "$lane"}, MaxRowsRead: 200})
	if res.Pass() {
		t.Fatalf("the OR lane predicate passed (rows %v, %s)", res.RowsRead, res.Operators)
	}
	requireViolation(t, res, "grow with the backlog", "over its budget of 200")
}

// An uncorrelated EXISTS is evaluated while planning: the plan is a
// TableDual and shows no read at all. That must never pass as zero rows.
func testFoldedExistsIsCaught(t *testing.T) {
	const folded = `SELECT 1 AS hit FROM DUAL WHERE EXISTS (SELECT 1 FROM work_item WHERE failure_summary = sqlc.arg(summary))`
	res := check(t, folded, plancheck.Case{Args: map[string]any{"summary": "nope"}, MaxRowsRead: 10})
	requireViolation(t, res, "reads nothing visible")

	// Explaining its inner read shows the full scan the fold hid.
	res = check(t, folded, plancheck.Case{Args: map[string]any{"summary": "nope"}, MaxRowsRead: 10,
		Inner: `SELECT 1 FROM work_item WHERE failure_summary = sqlc.arg(summary)`})
	requireViolation(t, res, "TableFullScan")
}

func testRowsGrowingWithScaleAreCaught(t *testing.T) {
	// Terminal history of the target scope grows with the scale; counting
	// it reads all of it through an otherwise perfect index range.
	res := check(t, `SELECT COUNT(*) FROM work_item
		WHERE scope_id = sqlc.arg(scope_id) AND generation = sqlc.arg(generation) AND state = 'completed'`,
		plancheck.Case{Args: map[string]any{"scope_id": "$scope", "generation": "$generation"}, MaxRowsRead: 1 << 40})
	requireViolation(t, res, "grow with the backlog")
}

func testOverBudgetIsCaught(t *testing.T) {
	res := check(t, `SELECT work_id FROM work_item WHERE scope_id = sqlc.arg(scope_id) AND generation = sqlc.arg(generation) AND state = 'pending' LIMIT 50`,
		plancheck.Case{Args: map[string]any{"scope_id": "$scope", "generation": "$generation"}, MaxRowsRead: 5})
	requireViolation(t, res, "over its budget of 5")
}

func testCoverageRuleFailsAStatementWithoutACase(t *testing.T) {
	stmts := []plancheck.Statement{{Name: "Covered", SQL: "SELECT 1"}, {Name: "Forgotten", SQL: "SELECT 2"}}
	cases := []plancheck.Case{{Query: "Covered", NoRead: "constant", Args: map[string]any{}}}
	rep, err := plancheck.Check(context.Background(), stmts, cases, scales(t), plancheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Pass() || len(rep.Uncovered) != 1 || rep.Uncovered[0] != "Forgotten" {
		t.Fatalf("report passes=%v uncovered=%v, want Forgotten uncovered and a failed run", rep.Pass(), rep.Uncovered)
	}
	var text strings.Builder
	if err := rep.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "Forgotten: no plan-check case") {
		t.Fatalf("report does not name the uncovered statement:\n%s", text.String())
	}
	// And the real catalog has no such gap.
	all, err := plancheck.CatalogStatements()
	if err != nil {
		t.Fatal(err)
	}
	realCases, err := plancheck.LoadCases(queries.PlanCases)
	if err != nil {
		t.Fatal(err)
	}
	if uncovered, unknown := plancheck.Coverage(all, realCases); len(uncovered)+len(unknown) > 0 {
		t.Fatalf("catalog coverage gap: uncovered %v, cases for unknown statements %v", uncovered, unknown)
	}
}

func TestParsePlan(t *testing.T) {
	rows := [][]string{
		{"Projection_17", "1.00", "1", "root", "", "time:1ms, loops:2, RU:11.38, cop_task: {num: 1}", "a", "1 KB", "N/A"},
		{"└─IndexLookUp_40", "1.00", "1", "root", "", "", "", "", ""},
		{"  ├─Selection_38(Build)", "1.00", "448", "cop[tikv]", "", "", "le(run_after)", "", ""},
		{"  │ └─IndexRangeScan_36", "1.00", "448", "cop[tikv]", "table:w, index:idx(a)", "scan_detail: {total_process_keys: 448}", "range:[1,+inf]", "", ""},
		{"  └─TableRowIDScan_37", "1.00", "96", "cop[tikv]", "table:w", "", "", "", ""},
	}
	ops, err := plancheck.ParsePlan(rows)
	if err != nil {
		t.Fatal(err)
	}
	if ops[2].ID != "Selection" || ops[3].ID != "IndexRangeScan" || ops[3].Depth <= ops[2].Depth {
		t.Fatalf("parsed %+v", ops)
	}
	if n := plancheck.RowsRead(ops); n != 448+96 {
		t.Fatalf("rows read %d, want %d", n, 448+96)
	}
	if n, ok := plancheck.ProcessKeys(ops); !ok || n != 448 {
		t.Fatalf("process keys %d %v", n, ok)
	}
	if ru, ok := plancheck.RequestUnits(ops); !ok || ru != 11.38 {
		t.Fatalf("request units %v %v, want 11.38 from the root operator", ru, ok)
	}
	if _, ok := plancheck.RequestUnits(ops[1:]); ok {
		t.Fatal("request units read from an operator that reports none")
	}
	if _, err := plancheck.ParsePlan([][]string{{"x", "1", "many", "root", "", "", ""}}); err == nil {
		t.Fatal("a non-numeric actRows parsed")
	}
}

func ptr[T any](v T) *T { return &v }

func TestGoldenShapes(t *testing.T) {
	rep := plancheck.Report{Scales: []int{100, 10000}, Results: []plancheck.Result{
		{Query: "Same", Shape: "Point_Get table:t\n"},
		{Query: "Changed", Shape: "TableFullScan table:t\n"},
		{Query: "New", Shape: "Point_Get table:t\n"},
		{Query: "OtherAgg", Shape: "HashAgg\n  IndexReader\n"},
	}}
	golden := plancheck.Golden{Scale: 10000, Shapes: map[string]string{
		"Same": "Point_Get table:t\n", "Changed": "Point_Get table:t\n", "OtherAgg": "StreamAgg\n  IndexReader\n",
	}}
	rep.CompareGolden(golden)
	if !rep.Results[0].Pass() {
		t.Fatalf("unchanged shape failed: %v", rep.Results[0].Violations)
	}
	if v := strings.Join(rep.Results[1].Violations, "\n"); !strings.Contains(v, "shape changed") || !strings.Contains(v, "- Point_Get") || !strings.Contains(v, "+ TableFullScan") {
		t.Fatalf("changed shape: %q", v)
	}
	if v := strings.Join(rep.Results[2].Violations, "\n"); !strings.Contains(v, "no golden plan shape") {
		t.Fatalf("new statement: %q", v)
	}
	if !rep.Results[3].Pass() {
		t.Fatalf("the aggregation's algorithm alone changed, and failed: %v", rep.Results[3].Violations)
	}
	// A run at another largest scale (-large) does not compare.
	other := plancheck.Report{Scales: []int{100, 100000}, Results: []plancheck.Result{{Query: "Changed", Shape: "X\n"}}}
	other.CompareGolden(golden)
	if !other.Results[0].Pass() {
		t.Fatalf("compared at a scale the golden file does not record: %v", other.Results[0].Violations)
	}
	// Accepting records every shape at the largest scale.
	if g := rep.Golden(); g.Scale != 10000 || len(g.Shapes) != 4 || g.Shapes["Changed"] != "TableFullScan table:t\n" {
		t.Fatalf("accepted golden %+v", g)
	}
}

// skewCases names, for each skewed distribution of the fixture, the cases
// whose statements it used to defeat (issues 9 and 35): each must stay within its
// rows budget and its time ratio with the skew present at both scales.
var skewCases = map[string][]string{
	"not-due retries in the claim range":               {"ClaimCandidates", "NextWorkAt", "NextWorkAt#inside-the-retry-backlog"},
	"expired leases of another class":                  {"StaleCandidates"},
	"live leases":                                      {"NextWorkAt#inside-the-retry-backlog"},
	"one lane with `scale` blocked followers":          {"HeadsAhead#long-lane", "NextBlockedInSourceLane#long-lane", "FirstBlockedInSourceLanes#long-lane"},
	"one lane without a head and `scale` blocked rows": {"HeadsAhead#headless-lane", "FirstBlockedInSourceLanes"},
	"due rows of another work type":                    {"ClaimCandidates", "ClaimCandidates#first-scan"},
	"one projection with `scale` terminal generations": {"PreviousProjectionEvent", "ProjectionInput"},
	"old dependency registrations":                     {"DependencySafetyPage", "DependencySafetyPage#catch-up", "DependencyWaitingPage"},
}

// testEachSkewStaysBounded checks the cases each skewed distribution aims
// at, one distribution at a time, and that the distribution is really in
// the fixture. On the catalog before issue 9 these failed: the lane-ordinal
// claim window read the not-due retries (234 rows in one window, 50,033 on
// a rescan), the stale scan read every expired lease of other classes
// (5,010), and the lane probes read the long lane (64 rows, 15-94 ms).
func testEachSkewStaysBounded(t *testing.T) {
	stmts, all := catalog(t)
	byName := map[string]plancheck.Case{}
	for _, c := range all {
		byName[c.Name()] = c
	}
	for skew, names := range skewCases {
		t.Run(skew, func(t *testing.T) {
			var cases []plancheck.Case
			for _, n := range names {
				c, ok := byName[n]
				if !ok {
					t.Fatalf("no case %s", n)
				}
				cases = append(cases, c)
			}
			rep, err := plancheck.Check(context.Background(), stmts, cases, scales(t), plancheck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, res := range rep.Results {
				if !res.Pass() {
					t.Errorf("%s with %q: %v", res.Query, skew, res.Violations)
				}
				t.Logf("%s: rows %v, median ms %v", res.Query, res.RowsRead, res.MedianMs)
			}
			large := scales(t)[len(scales(t))-1]
			n, err := plancheck.CountDistribution(context.Background(), large.DB, skew)
			if err != nil || n < int64(large.Scale)/2 {
				t.Fatalf("the fixture holds %d rows of %q at scale %d (%v)", n, skew, large.Scale, err)
			}
		})
	}
}

// testTimeRuleCatchesGrowthRowsHide: a LIMIT 1 scan whose range holds the
// whole not-due backlog reads one 64-entry batch at both scales, so rows
// read cannot tell, but on the embedded engine its time grows with the
// range: the time rule fails it.
func testTimeRuleCatchesGrowthRowsHide(t *testing.T) {
	res := check(t, `SELECT work_id FROM work_item
		WHERE scope_id = sqlc.arg(scope_id) AND generation = sqlc.arg(generation) AND state = 'pending'
		  AND run_after > sqlc.arg(after) ORDER BY run_after LIMIT 1`,
		plancheck.Case{Hot: true, MaxRowsRead: 80, Args: map[string]any{"scope_id": "$scope", "generation": "$generation", "after": "@past-1h"}})
	if len(res.RowsRead) != 2 || res.RowsRead[0] != res.RowsRead[1] {
		t.Logf("rows read %v (the point is that they stay flat)", res.RowsRead)
	}
	requireViolation(t, res, "slower at scale")
}

// testTracedUnboundedWindowFails is the negative test of the traced check:
// the same churn through runtime/worker, once with the claimer as shipped
// (every traced call passes) and once with a claimer whose straggler window
// reaches back fifty years, so that every claim scan reads the due backlog
// from its front. Every hand-written case still passes; the traced calls
// fail.
func testTracedUnboundedWindowFails(t *testing.T) {
	stmts, cases := catalog(t)
	const scale = 2000
	for _, tc := range []struct {
		name    string
		claimer workqueue.ClaimerConfig
		fails   bool
	}{
		{"as shipped", workqueue.ClaimerConfig{}, false},
		{"unbounded window", workqueue.ClaimerConfig{StragglerWindow: 50 * 365 * 24 * time.Hour}, true},
	} {
		db, dsn := tidbtest.NewDBWithDSN(t)
		if err := plancheck.Seed(context.Background(), db, scale, io.Discard); err != nil {
			t.Fatal(err)
		}
		trace := plancheck.NewTrace(plancheck.DefaultTraceKeep)
		traced, err := trace.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		if err := plancheck.Churn(context.Background(), traced, plancheck.WorkloadOptions{Items: 600, Claimer: tc.claimer}); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		traced.Close()
		fixtures := scales(t)
		checked := cases
		if tc.fails {
			// The shipped run judges every traced statement; the unbounded
			// window changes only the claim scans, so only their cases are
			// run again (statements without a case are not traced-checked).
			checked = nil
			for _, c := range cases {
				if strings.HasPrefix(c.Query, "ClaimCandidates") || strings.HasPrefix(c.Query, "StaleCandidates") {
					checked = append(checked, c)
				}
			}
		}
		rep, err := plancheck.Check(context.Background(), stmts, checked, fixtures, plancheck.Options{Churned: db, Trace: trace})
		if err != nil {
			t.Fatal(err)
		}
		var tracedFailures []string
		for _, tr := range rep.Traced {
			tracedFailures = append(tracedFailures, tr.Violations...)
		}
		for _, res := range rep.Results {
			if strings.HasPrefix(res.Query, "ClaimCandidates") && !res.Pass() {
				t.Fatalf("%s: the hand-written case failed: %v", tc.name, res.Violations)
			}
		}
		got := strings.Join(tracedFailures, "\n")
		switch {
		case tc.fails && !strings.Contains(got, "traced ClaimCandidates") && !strings.Contains(got, "traced StaleCandidates"):
			t.Fatalf("%s: the traced check did not catch it:\n%s", tc.name, got)
		case !tc.fails && len(tracedFailures) > 0:
			t.Fatalf("%s: traced calls failed:\n%s", tc.name, got)
		}
		t.Logf("%s: %d traced statements, violations:\n%s", tc.name, len(rep.Traced), got)
	}
}

// testOwnDatabaseIsChecked: a database plancheck did not seed (a user's
// own, with -dsn and -database) gets the plan rules, with no seeding.
func testOwnDatabaseIsChecked(t *testing.T) {
	stmts, cases := catalog(t)
	// A database with the scope the cases name ($scope, overridable with
	// -values) and nothing else.
	mine := tidbtest.NewDB(t)
	if _, err := mine.Exec("INSERT INTO scope (scope_id, active_generation, created_at, updated_at) VALUES (?, 2, NOW(6), NOW(6))", plancheck.TargetScope); err != nil {
		t.Fatal(err)
	}
	rep, err := plancheck.Check(context.Background(), stmts, cases, []plancheck.Fixture{{Name: "mine", DB: mine}}, plancheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Fixtures) != 1 || rep.Fixtures[0] != "mine" || len(rep.Results) != len(cases) {
		t.Fatalf("report on %v with %d results", rep.Fixtures, len(rep.Results))
	}
	if !rep.Pass() {
		var b strings.Builder
		_ = rep.WriteText(&b)
		t.Fatalf("an empty database fails the plan rules:\n%s", b.String())
	}
}

// testStaleFixtureIsRefused: a fixture whose future rows are about to come
// due (seeded long before the check) fails loudly instead of measuring
// something else.
func testStaleFixtureIsRefused(t *testing.T) {
	db, _ := tidbtest.NewFreshDB(t)
	if err := plancheck.Seed(context.Background(), db, 10, io.Discard); err != nil {
		t.Fatal(err)
	}
	if err := plancheck.Verify(context.Background(), db); err != nil {
		t.Fatalf("a fresh fixture: %v", err)
	}
	if _, err := db.Exec("UPDATE plancheck_fixture SET value = DATE_ADD(NOW(6), INTERVAL 1 MINUTE)"); err != nil {
		t.Fatal(err)
	}
	if err := plancheck.Verify(context.Background(), db); !errors.Is(err, plancheck.ErrStaleFixture) {
		t.Fatalf("a fixture an hour older: %v, want ErrStaleFixture", err)
	}
}

// testUncachedHotPlanIsCaught: a hot read whose generation is a scalar
// subquery (folded into the range while planning) is one TiDB will not
// cache when prepared; the same read with the generation as an argument
// is cached, and then a leftover waiver is itself a violation.
func testUncachedHotPlanIsCaught(t *testing.T) {
	args := map[string]any{"scope_id": "$scope", "generation": "$generation"}
	res := check(t, `SELECT work_id FROM work_item
		WHERE scope_id = sqlc.arg(scope_id)
		  AND generation = (SELECT active_generation FROM scope WHERE scope_id = sqlc.arg(scope_id))
		  AND state = 'pending' ORDER BY run_after LIMIT 1`,
		plancheck.Case{Hot: true, MaxRowsRead: 80, TimeAllow: "not timed here", Args: map[string]any{"scope_id": "$scope"}})
	requireViolation(t, res, "not cached when it runs prepared", "uncorrelated sub-queries")
	cachedRead := `SELECT work_id FROM work_item
		WHERE scope_id = sqlc.arg(scope_id) AND generation = sqlc.arg(generation)
		  AND state = 'pending' ORDER BY run_after LIMIT 1`
	res = check(t, cachedRead, plancheck.Case{Hot: true, MaxRowsRead: 80, TimeAllow: "not timed here", Args: args})
	if res.PlanCached == nil || !*res.PlanCached {
		t.Fatalf("the plain read's plan is not cached: %v", res.Violations)
	}
	for _, v := range res.Violations {
		if strings.Contains(v, "cached") {
			t.Fatalf("a cached plan was flagged: %s", v)
		}
	}
	res = check(t, cachedRead, plancheck.Case{Hot: true, MaxRowsRead: 80, TimeAllow: "not timed here", UncachedPlan: "stale", Args: args})
	requireViolation(t, res, "remove uncached_plan")
}
