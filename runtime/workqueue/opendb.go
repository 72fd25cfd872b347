package workqueue

import (
	"database/sql"
	"fmt"
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

// OpenDB opens a connection pool to TiDB for dsn (go-sql-driver/mysql
// syntax) with the session settings New requires (parseTime=true, loc=UTC,
// clientFoundRows=true, time_zone '+00:00'), whatever dsn says about them,
// plus PlanCacheFixControl unless dsn sets tidb_opt_fix_control itself,
// and DefaultIdleConns idle connections. Everything else in dsn (address,
// credentials, TLS, timeouts, the database) is kept.
func OpenDB(dsn string) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("workqueue: open db: %w", err)
	}
	cfg.ParseTime, cfg.ClientFoundRows, cfg.Loc = true, true, time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	if _, set := cfg.Params["tidb_opt_fix_control"]; !set {
		cfg.Params["tidb_opt_fix_control"] = "'" + PlanCacheFixControl + "'"
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("workqueue: open db: %w", err)
	}
	db := sql.OpenDB(connector)
	db.SetMaxIdleConns(DefaultIdleConns)
	return db, nil
}
