package prepcache_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/laneq/laneq/internal/prepcache"
	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

// counted is a one-connection pool on a fresh database whose statements
// are counted, and a prepcache.DB on it holding at most max texts.
func counted(t *testing.T, max int) (*prepcache.DB, *sqlcount.Counter) {
	t.Helper()
	_, dsn := tidbtest.NewDBWithDSN(t)
	db, c, err := sqlcount.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	p := prepcache.New(db, max)
	t.Cleanup(func() { p.Close() })
	return p, c
}

func prepares(c *sqlcount.Counter) (n int64) {
	for name, k := range c.ByStatement() {
		if strings.HasPrefix(name, "PREPARE") {
			n += k
		}
	}
	return n
}

func TestAStatementIsPreparedOnceAndThenOnlyExecuted(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := counted(t, 0)
	for i := range 10 {
		var got int
		if err := p.QueryRowContext(ctx, "SELECT ? + 1", i).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != i+1 {
			t.Fatalf("SELECT %d + 1 = %d", i, got)
		}
	}
	if n, total := prepares(c), c.Statements(); n != 1 || total != 11 {
		t.Fatalf("10 runs sent %d prepares and %d statements in all, want 1 and 11", n, total)
	}
}

func TestATransactionBorrowsTheConnectionsPreparedStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := counted(t, 0)
	if _, err := p.ExecContext(ctx, "CREATE TABLE t (id BIGINT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	const insert = "INSERT INTO t (id) VALUES (?)"
	if _, err := p.ExecContext(ctx, insert, 0); err != nil {
		t.Fatal(err)
	}
	before := prepares(c)
	tx, err := p.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		if _, err := p.Tx(tx).ExecContext(ctx, insert, i); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := prepares(c) - before; n != 0 {
		t.Fatalf("the transaction prepared %d statements again", n)
	}
	var rows int
	if err := p.QueryRowContext(ctx, "SELECT COUNT(*) FROM t").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 1 {
		t.Fatalf("%d rows after a rolled-back transaction, want 1", rows)
	}
}

func TestTextsPastTheBoundRunUnprepared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := counted(t, 2)
	for range 3 {
		for _, q := range []string{"SELECT ?", "SELECT ?, 1", "SELECT ?, 2"} {
			rows, err := p.QueryContext(ctx, q, 7)
			if err != nil {
				t.Fatal(err)
			}
			if err := rows.Close(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := prepares(c); n != 2 {
		t.Fatalf("%d prepares for 3 texts with a bound of 2, want 2", n)
	}
}

func TestAStatementTheServerRefusesIsNotPreparedAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p, c := counted(t, 0)
	for range 3 {
		if _, err := p.ExecContext(ctx, "SELEKT 1"); err == nil {
			t.Fatal("a syntax error was accepted")
		}
	}
	if n := prepares(c); n != 1 {
		t.Fatalf("%d prepares of a refused text, want 1", n)
	}
}
