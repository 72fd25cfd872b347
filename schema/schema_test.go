package schema_test

import (
	"context"
	"database/sql"
	"io/fs"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/schema"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

var laneqTables = []string{"dependency_satisfied", "event", "ingress_receipt", "queue_history", "rate_window", "scope", "scope_work_kind", "wake_endpoint", "work_item"}

func tables(t *testing.T, db *sql.DB) []string {
	t.Helper()
	rows, err := db.Query("SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() ORDER BY table_name")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// ddl captures SHOW CREATE TABLE for every table, to prove a second Up
// changes nothing at all.
func ddl(t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, name := range tables(t, db) {
		var n, create string
		if err := db.QueryRow("SHOW CREATE TABLE `"+name+"`").Scan(&n, &create); err != nil {
			t.Fatal(err)
		}
		out[name] = create
	}
	return out
}

func migrationCount(t *testing.T) int {
	t.Helper()
	files, err := fs.Glob(schema.Migrations(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	return len(files)
}

func TestMigrationsApplyAreIdempotentAndGoDownToEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Unmigrated on purpose: the test applies the migrations itself.
	db, _ := tidbtest.NewEmptyDB(t)

	applied, err := schema.Up(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if want := migrationCount(t); applied != want {
		t.Fatalf("first Up applied %d migrations, want all %d", applied, want)
	}
	want := append(append([]string{}, laneqTables...), schema.VersionTable)
	sort.Strings(want)
	if diff := cmp.Diff(want, tables(t, db)); diff != "" {
		t.Fatalf("tables after Up (-want +got):\n%s", diff)
	}
	before := ddl(t, db)

	applied, err = schema.Up(ctx, db)
	if err != nil {
		t.Fatalf("second Up: %v", err)
	}
	if applied != 0 {
		t.Fatalf("second Up applied %d migrations, want 0", applied)
	}
	if diff := cmp.Diff(before, ddl(t, db)); diff != "" {
		t.Fatalf("second Up changed the schema (-before +after):\n%s", diff)
	}

	p, err := schema.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	down, err := p.DownTo(ctx, 0)
	if err != nil {
		t.Fatalf("down to 0: %v", err)
	}
	if len(down) != migrationCount(t) {
		t.Fatalf("down rolled back %d migrations, want %d", len(down), migrationCount(t))
	}
	// Only goose's own bookkeeping table remains, and it records nothing applied.
	if diff := cmp.Diff([]string{schema.VersionTable}, tables(t, db)); diff != "" {
		t.Fatalf("tables after down (-want +got):\n%s", diff)
	}
	if v, err := p.GetDBVersion(ctx); err != nil || v != 0 {
		t.Fatalf("version after down = %d, %v; want 0", v, err)
	}

	// And the round trip is repeatable.
	if applied, err := schema.Up(ctx, db); err != nil || applied != migrationCount(t) {
		t.Fatalf("Up after down applied %d, %v", applied, err)
	}
	if diff := cmp.Diff(before, ddl(t, db)); diff != "" {
		t.Fatalf("re-applied schema differs (-first +again):\n%s", diff)
	}
}

// TestRequiredKeys pins the constraints and index prefixes the design relies
// on, so an edited migration cannot silently drop one.
func TestRequiredKeys(t *testing.T) {
	t.Parallel()
	db := tidbtest.NewDB(t)
	rows, err := db.Query(`
		SELECT table_name, index_name, non_unique, GROUP_CONCAT(column_name ORDER BY seq_in_index)
		FROM information_schema.statistics
		WHERE table_schema = DATABASE()
		GROUP BY table_name, index_name, non_unique`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type index struct {
		Unique  bool
		Columns string
	}
	got := map[string]index{}
	for rows.Next() {
		var table, name, cols string
		var nonUnique int
		if err := rows.Scan(&table, &name, &nonUnique, &cols); err != nil {
			t.Fatal(err)
		}
		got[table+"."+name] = index{Unique: nonUnique == 0, Columns: cols}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]index{
		"work_item.uk_work_item_event_type":           {true, "event_id,work_type,replay_depth"},
		"work_item.uk_work_item_projection_active":    {true, "projection_active_key"},
		"work_item.uk_work_item_projection_queued":    {true, "projection_queued_key"},
		"event.idx_event_projection":                  {false, "projection_key,enqueue_ordinal"},
		"event.uk_event_idempotency":                  {true, "scope_id,idempotency_key"},
		"ingress_receipt.uk_ingress_receipt_delivery": {true, "scope_id,delivery_id"},
		"ingress_receipt.idx_ingress_receipt_claim":   {false, "scope_id,route_class,router_status,next_attempt_at,receipt_id"},
		"rate_window.idx_rate_window_ends":            {false, "scope_id,ends_micros"},
	}
	for key, w := range want {
		if diff := cmp.Diff(w, got[key]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", key, diff)
		}
	}
	// The three claim paths lead with the scope.
	for _, key := range []string{"work_item.idx_work_item_claim", "work_item.idx_work_item_source_lane", "work_item.idx_work_item_target_lane"} {
		idx, ok := got[key]
		if !ok || !strings.HasPrefix(idx.Columns, "scope_id,") {
			t.Errorf("%s = %+v, want an index leading with scope_id", key, idx)
		}
	}
}

// Rate-limit windows written before migration 00026 have no end: the
// migration gives them one 30 days on (by the database's clock), so the
// sweep of ended windows deletes them then, not at once (the current
// window's count would be lost during the upgrade) and not never.
func TestRateWindowsBeforeTheirEndsGetOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// Unmigrated on purpose: the test applies the migrations itself.
	db, _ := tidbtest.NewEmptyDB(t)
	p, err := schema.NewProvider(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO rate_window (scope_id, limit_name, window_index, granted) VALUES ('s', 'deliver', 7, 3)"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var days float64
	if err := db.QueryRow("SELECT (ends_micros - UNIX_TIMESTAMP(NOW(6)) * 1000000) / 86400e6 FROM rate_window WHERE scope_id = 's'").Scan(&days); err != nil {
		t.Fatal(err)
	}
	if days < 29.9 || days > 30 {
		t.Fatalf("a window from before the migration ends %.2f days on, want 30", days)
	}
}
