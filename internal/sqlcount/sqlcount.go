// Package sqlcount opens a MySQL-protocol *sql.DB whose connections count
// every statement they send (queries, executions, prepares, transaction
// control), so tests can assert exact SQL budgets from the driver side.
package sqlcount

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// Counter counts statements sent by every connection of one DB, in total
// and by statement (sqlc's "-- name: X" header, or the first words).
type Counter struct {
	n      atomic.Int64
	mu     sync.Mutex
	byName map[string]int64
}

// Statements returns the number of statements sent so far.
func (c *Counter) Statements() int64 { return c.n.Load() }

// ByStatement returns how often each statement was sent so far.
func (c *Counter) ByStatement() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.byName))
	for k, v := range c.byName {
		out[k] = v
	}
	return out
}

func (c *Counter) add(query string) {
	c.n.Add(1)
	name := query
	if rest, ok := strings.CutPrefix(query, "-- name: "); ok {
		name, _, _ = strings.Cut(rest, " ")
	} else if len(name) > 40 {
		name = name[:40]
	}
	c.mu.Lock()
	c.byName[name]++
	c.mu.Unlock()
}

// Open returns a DB for dsn (go-sql-driver/mysql syntax) and its Counter.
func Open(dsn string) (*sql.DB, *Counter, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlcount: %w", err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlcount: %w", err)
	}
	c := &Counter{byName: map[string]int64{}}
	return sql.OpenDB(connector{inner: inner, c: c}), c, nil
}

type connector struct {
	inner driver.Connector
	c     *Counter
}

func (k connector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := k.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: k.c}, nil
}

func (k connector) Driver() driver.Driver { return k.inner.Driver() }

// countingConn forwards to the driver's connection, which implements the
// context-aware interfaces below, counting each round trip that carries a
// statement. (Connection set-up at Connect is not counted.)
type countingConn struct {
	driver.Conn
	c *Counter
}

func (cc *countingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	cc.c.add(query)
	return cc.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (cc *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cc.c.add(query)
	return cc.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (cc *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	cc.c.add("PREPARE " + query)
	st, err := cc.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, c: cc.c, query: query}, nil
}

func (cc *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	cc.c.add("BEGIN")
	tx, err := cc.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, c: cc.c}, nil
}

func (cc *countingConn) Ping(ctx context.Context) error {
	cc.c.add("PING")
	return cc.Conn.(driver.Pinger).Ping(ctx)
}

func (cc *countingConn) ResetSession(ctx context.Context) error {
	return cc.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (cc *countingConn) IsValid() bool { return cc.Conn.(driver.Validator).IsValid() }

func (cc *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return cc.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type countingStmt struct {
	driver.Stmt
	c     *Counter
	query string
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.add(s.query)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.add(s.query)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

type countingTx struct {
	driver.Tx
	c *Counter
}

func (t *countingTx) Commit() error   { t.c.add("COMMIT"); return t.Tx.Commit() }
func (t *countingTx) Rollback() error { t.c.add("ROLLBACK"); return t.Tx.Rollback() }
