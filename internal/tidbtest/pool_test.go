package tidbtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

// TestPooledDatabasesAreEmptiedBetweenTests: a database a test filled (a
// few rows in one table, more than a DELETE batch in another) comes back
// to the next test migrated and empty; one whose schema a test altered is
// dropped, never handed out again. The subtests run one after another, so
// each takes the database the previous one gave back.
func TestPooledDatabasesAreEmptiedBetweenTests(t *testing.T) {
	var first string
	t.Run("fill", func(t *testing.T) {
		db, dsn := NewDBWithDSN(t)
		first = dbName(t, dsn)
		if _, err := db.Exec("INSERT INTO scope (scope_id, active_generation, created_at, updated_at) VALUES ('a', 1, NOW(6), NOW(6)), ('b ', 1, NOW(6), NOW(6))"); err != nil {
			t.Fatal(err)
		}
		var values []string
		for i := 0; i < resetBatch+20; i++ {
			values = append(values, fmt.Sprintf("('s%d', 1, NOW(6), NOW(6))", i))
		}
		if _, err := db.Exec("INSERT INTO scope (scope_id, active_generation, created_at, updated_at) VALUES " + strings.Join(values, ",")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("reuse", func(t *testing.T) {
		start := time.Now()
		db, dsn := NewDBWithDSN(t)
		t.Logf("a pooled database in %s", time.Since(start))
		if got := dbName(t, dsn); got != first {
			t.Fatalf("got database %s, want %s back from the pool", got, first)
		}
		for _, table := range []string{"scope", "work_item", "event"} {
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Fatalf("%s has %d rows left by the previous test", table, n)
			}
		}
		var migrations int
		if err := db.QueryRow("SELECT COUNT(*) FROM laneq_schema_version").Scan(&migrations); err != nil || migrations == 0 {
			t.Fatalf("goose's version table was emptied (%d rows, %v): the next schema.Up would re-run migrations", migrations, err)
		}
		if _, err := db.Exec("ALTER TABLE scope ADD COLUMN extra INT"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("altered is dropped", func(t *testing.T) {
		_, dsn := NewDBWithDSN(t)
		if got := dbName(t, dsn); got == first {
			t.Fatalf("the database whose schema a test altered came back from the pool")
		}
		var n int
		admin, err := Server(t).Open("")
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		if err := admin.QueryRow("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = ?", first).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Fatalf("database %s was altered by its test and still exists", first)
		}
	})
}

func dbName(t *testing.T, dsn string) string {
	t.Helper()
	i := strings.LastIndex(dsn, "/")
	name, _, _ := strings.Cut(dsn[i+1:], "?")
	if name == "" {
		t.Fatalf("no database in %q", dsn)
	}
	return name
}
