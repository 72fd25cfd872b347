// Package sqlcount opens a MySQL-protocol *sql.DB whose connections count
// every statement they send (queries, executions, prepares, transaction
// control), so tests can assert exact SQL budgets from the driver side.
package sqlcount

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// Counter counts statements sent by every connection of one DB.
type Counter struct{ n atomic.Int64 }

// Statements returns the number of statements sent so far.
func (c *Counter) Statements() int64 { return c.n.Load() }

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
	c := &Counter{}
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
	cc.c.n.Add(1)
	return cc.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (cc *countingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	cc.c.n.Add(1)
	return cc.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (cc *countingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	cc.c.n.Add(1)
	st, err := cc.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: st, c: cc.c}, nil
}

func (cc *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	cc.c.n.Add(1)
	tx, err := cc.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &countingTx{Tx: tx, c: cc.c}, nil
}

func (cc *countingConn) Ping(ctx context.Context) error {
	cc.c.n.Add(1)
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
	c *Counter
}

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.n.Add(1)
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.n.Add(1)
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

type countingTx struct {
	driver.Tx
	c *Counter
}

func (t *countingTx) Commit() error   { t.c.n.Add(1); return t.Tx.Commit() }
func (t *countingTx) Rollback() error { t.c.n.Add(1); return t.Tx.Rollback() }
