package plancheck_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/plancheck"
	"github.com/laneq/laneq/queries"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

// seeded is the two fixture databases, set by TestPlancheck for its subtests.
var seeded []plancheck.ScaleDB

func scales(t *testing.T) []plancheck.ScaleDB {
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
		db := tidbtest.NewDB(t)
		if err := plancheck.Seed(context.Background(), db, int64(n), io.Discard); err != nil {
			t.Fatalf("seed %d: %v", n, err)
		}
		seeded = append(seeded, plancheck.ScaleDB{Scale: n, DB: db})
	}
	for name, fn := range map[string]func(*testing.T){
		"CatalogPasses":                           testCatalogPasses,
		"FullScanIsCaught":                        testFullScanIsCaught,
		"OrLanePredicateIsCaught":                 testOrLanePredicateIsCaught,
		"FoldedExistsIsCaught":                    testFoldedExistsIsCaught,
		"RowsGrowingWithScaleAreCaught":           testRowsGrowingWithScaleAreCaught,
		"OverBudgetIsCaught":                      testOverBudgetIsCaught,
		"CoverageRuleFailsAStatementWithoutACase": testCoverageRuleFailsAStatementWithoutACase,
	} {
		t.Run(name, fn)
	}
}

// check runs one synthetic statement through the harness.
func check(t *testing.T, stmt string, c plancheck.Case) plancheck.Result {
	t.Helper()
	c.Query = "Probe"
	rep, err := plancheck.Check(context.Background(), []plancheck.Statement{{Name: "Probe", SQL: stmt}}, []plancheck.Case{c}, scales(t), nil, io.Discard)
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

// The whole catalog passes on the fixture: the same check make plancheck
// runs, at the test's scales.
func testCatalogPasses(t *testing.T) {
	stmts, err := plancheck.CatalogStatements()
	if err != nil {
		t.Fatal(err)
	}
	cases, err := plancheck.LoadCases(queries.PlanCases)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := plancheck.Check(context.Background(), stmts, cases, scales(t), nil, io.Discard)
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
	rep, err := plancheck.Check(context.Background(), stmts, cases, scales(t), nil, io.Discard)
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
		{"Projection_17", "1.00", "1", "root", "", "time:1ms", "a", "1 KB", "N/A"},
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
	}}
	golden := plancheck.Golden{Scale: 10000, Shapes: map[string]string{
		"Same": "Point_Get table:t\n", "Changed": "Point_Get table:t\n",
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
	// A run at another largest scale (-large) does not compare.
	other := plancheck.Report{Scales: []int{100, 100000}, Results: []plancheck.Result{{Query: "Changed", Shape: "X\n"}}}
	other.CompareGolden(golden)
	if !other.Results[0].Pass() {
		t.Fatalf("compared at a scale the golden file does not record: %v", other.Results[0].Violations)
	}
	// Accepting records every shape at the largest scale.
	if g := rep.Golden(); g.Scale != 10000 || len(g.Shapes) != 3 || g.Shapes["Changed"] != "TableFullScan table:t\n" {
		t.Fatalf("accepted golden %+v", g)
	}
}
