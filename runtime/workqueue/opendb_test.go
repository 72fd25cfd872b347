package workqueue_test

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// bareDSN is dsn with only its address, user, password and database: none
// of the session settings laneq needs.
func bareDSN(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	bare := mysql.NewConfig()
	bare.User, bare.Passwd, bare.Net, bare.Addr, bare.DBName = cfg.User, cfg.Passwd, cfg.Net, cfg.Addr, cfg.DBName
	return bare.FormatDSN()
}

func TestOpenDBGivesABareDSNTheSessionNewNeeds(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	bare := bareDSN(t, dsn)
	ctx := context.Background()

	plain, err := sql.Open("mysql", bare)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if _, err := workqueue.New(plain, workqueue.Config{}); err == nil {
		t.Fatal("New accepted a bare DSN's sessions; the check below proves nothing")
	}

	db, err := workqueue.OpenDB(bare)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := workqueue.New(db, workqueue.Config{}); err != nil {
		t.Fatalf("New refused OpenDB's sessions: %v", err)
	}
	var fix string
	if err := db.QueryRowContext(ctx, "SELECT @@tidb_opt_fix_control").Scan(&fix); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(fix, workqueue.PlanCacheFixControl) {
		t.Fatalf("tidb_opt_fix_control is %q, want it to hold %s", fix, workqueue.PlanCacheFixControl)
	}

	var lockWait, idleTx int
	if err := db.QueryRowContext(ctx, "SELECT @@innodb_lock_wait_timeout, @@tidb_idle_transaction_timeout").Scan(&lockWait, &idleTx); err != nil {
		t.Fatal(err)
	}
	if time.Duration(lockWait)*time.Second != workqueue.DefaultLockWaitTimeout || time.Duration(idleTx)*time.Second != workqueue.DefaultIdleTransactionTimeout {
		t.Fatalf("innodb_lock_wait_timeout %ds, tidb_idle_transaction_timeout %ds; want %s and %s",
			lockWait, idleTx, workqueue.DefaultLockWaitTimeout, workqueue.DefaultIdleTransactionTimeout)
	}

	own, err := workqueue.OpenDB(bare + "?tidb_opt_fix_control=%2744262%3AON%27&innodb_lock_wait_timeout=3&tidb_idle_transaction_timeout=0")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := own.QueryRowContext(ctx, "SELECT @@tidb_opt_fix_control").Scan(&fix); err != nil {
		t.Fatal(err)
	}
	if fix != "44262:ON" {
		t.Fatalf("a DSN's own tidb_opt_fix_control became %q", fix)
	}
	if err := own.QueryRowContext(ctx, "SELECT @@innodb_lock_wait_timeout, @@tidb_idle_transaction_timeout").Scan(&lockWait, &idleTx); err != nil {
		t.Fatal(err)
	}
	if lockWait != 3 || idleTx != 0 {
		t.Fatalf("a DSN's own innodb_lock_wait_timeout=3 and tidb_idle_transaction_timeout=0 became %d and %d", lockWait, idleTx)
	}

	if _, err := workqueue.OpenDB("not a dsn"); err == nil {
		t.Fatal("a malformed DSN was accepted")
	}
}
