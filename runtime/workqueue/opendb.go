package workqueue

import (
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/go-sql-driver/mysql"
)

// DefaultIdleConns is how many idle connections OpenDB keeps. database/sql
// keeps 2 by default; a worker with 16 executors then closes and reopens a
// connection (handshake, USE, SET) for most statements it sends, and
// prepares its statements again on each new one.
const DefaultIdleConns = 64

// PlanCacheFixControl is the optimizer fix OpenDB turns on for every
// session: TiDB then caches the plans of prepared statements that became
// (batch) point gets in physical optimization, which without it it refuses
// to cache ("Batch/PointGet plans may be over-optimized"). Every
// compare-and-swap and read-back on the claim and finish paths is one.
const PlanCacheFixControl = "44830:ON"

// DefaultIdleTransactionTimeout is the tidb_idle_transaction_timeout
// (TiDB v7.6+) OpenDB and SessionDSN set unless the DSN sets it: TiDB
// kills a session whose transaction has sent nothing for that long and
// rolls the transaction back. laneq's own transactions are never idle for
// more than a round trip, but a process paused inside one (a long GC
// pause, SIGSTOP, a debugger, a frozen VM) otherwise holds its row locks
// until it wakes: a finisher paused holding a lane follower's lock stalls
// every enqueue into that lane, and with it, because enqueue takes the
// scope row first, every enqueue of the scope. Whole seconds; a DSN that
// sets tidb_idle_transaction_timeout=0 turns it off (for a pool whose
// application transactions, begun with Queue.BeginTx, may idle longer).
const DefaultIdleTransactionTimeout = 5 * time.Second

// DefaultLockWaitTimeout is the innodb_lock_wait_timeout OpenDB and
// SessionDSN set unless the DSN sets it. It must be below WriteTimeout,
// and New refuses a session where it is not: go-sql-driver gives up a
// statement by closing its connection, and a TiDB session waiting for a
// lock does not notice until the wait ends, so a write abandoned at
// WriteTimeout keeps every lock its transaction took (an enqueue: the
// scope row) for up to TiDB's default 50s while the write's next run
// queues behind it (TestAbandonedLockWaitKeepsItsLocks). Below
// WriteTimeout, TiDB ends the wait itself (error 1205), the transaction
// rolls back, releasing its locks, and the write is run again after a
// backoff. Whole seconds.
const DefaultLockWaitTimeout = 5 * time.Second

// OpenDB opens a connection pool to TiDB for dsn (go-sql-driver/mysql
// syntax) with the session settings of SessionDSN, and
// DefaultIdleConns idle connections.
func OpenDB(dsn string) (*sql.DB, error) {
	cfg, err := sessionConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("workqueue: open db: %w", err)
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("workqueue: open db: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(DefaultIdleConns)
	return db, nil
}

// SessionDSN returns dsn with the session settings New requires
// (parseTime=true, loc=UTC, clientFoundRows=true, time_zone '+00:00'),
// whatever dsn says about them, DefaultLockWaitTimeout unless dsn sets
// innodb_lock_wait_timeout, PlanCacheFixControl unless it sets
// tidb_opt_fix_control, and DefaultIdleTransactionTimeout unless it sets
// tidb_idle_transaction_timeout. Everything else in dsn (address,
// credentials, TLS, timeouts, the database) is kept. For a pool opened
// some other way than OpenDB.
func SessionDSN(dsn string) (string, error) {
	cfg, err := sessionConfig(dsn)
	if err != nil {
		return "", fmt.Errorf("workqueue: session dsn: %w", err)
	}
	return cfg.FormatDSN(), nil
}

func sessionConfig(dsn string) (*mysql.Config, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ParseTime, cfg.ClientFoundRows, cfg.Loc = true, true, time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if _, set := cfg.Params["tidb_opt_fix_control"]; !set {
		cfg.Params["tidb_opt_fix_control"] = "'" + PlanCacheFixControl + "'"
	}
	for name, value := range map[string]time.Duration{
		"innodb_lock_wait_timeout":      DefaultLockWaitTimeout,
		"tidb_idle_transaction_timeout": DefaultIdleTransactionTimeout,
	} {
		if _, set := cfg.Params[name]; !set {
			cfg.Params[name] = strconv.Itoa(int(value / time.Second))
		}
	}
	return cfg, nil
}
