package sqlcount_test

import (
	"context"
	"os"
	"testing"

	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

func TestCountsEveryStatement(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	db, c, err := sqlcount.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if err := db.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	base := c.Statements()
	var one int
	if err := db.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "DO 1"); err != nil {
		t.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "DO ?", 2); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	// SELECT, DO, BEGIN, DO, COMMIT.
	if got := c.Statements() - base; got != 5 {
		t.Fatalf("counted %d statements, want 5", got)
	}
	by := c.ByStatement()
	if by["SELECT 1"] != 1 || by["DO 1"] != 1 || by["BEGIN"] != 1 || by["COMMIT"] != 1 {
		t.Fatalf("by statement %v", by)
	}

	// A prepared statement: one prepare, then executions only.
	base, baseExec := c.Statements(), c.Executed()
	st, err := db.PrepareContext(ctx, "-- name: Probe :exec\nDO ?")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 3 {
		if _, err := st.ExecContext(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	if sent, executed := c.Statements()-base, c.Executed()-baseExec; sent != 4 || executed != 3 {
		t.Fatalf("a prepare and 3 executions counted as %d sent, %d executed; want 4 and 3", sent, executed)
	}
	if by := c.ByStatement(); by["PREPARE Probe"] != 1 || by["Probe"] != 3 {
		t.Fatalf("by statement %v, want PREPARE Probe once and Probe 3 times", by)
	}
}
