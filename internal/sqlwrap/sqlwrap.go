// Package sqlwrap opens a MySQL-protocol *sql.DB whose connections pass every
// statement they send (queries, executions, prepares, transaction control)
// through a Hook, so tests can count statements or inject faults from the
// driver side. internal/sqlcount and internal/faultdb are its two hooks.
package sqlwrap

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"
)

// Hook sees every statement of a DB's connections.
type Hook interface {
	// Before runs before a statement is sent, with its arguments (none for
	// transaction control). A non-nil error is returned in its place, and the
	// statement is not sent. note is handed to After.
	Before(ctx context.Context, query string, args []driver.NamedValue) (note any, err error)
	// After runs once the statement returned err (nil on success); what it
	// returns replaces err. Returning mysql.ErrInvalidConn for a statement
	// that succeeded simulates a reply lost on its way back: the connection
	// is then discarded, as the driver would.
	After(ctx context.Context, query string, note any, err error) error
}

// Transaction control as hooks see it.
const (
	Begin    = "BEGIN"
	Commit   = "COMMIT"
	Rollback = "ROLLBACK"
	Ping     = "PING"
)

// PreparePrefix starts the query a Hook sees for a statement being prepared
// (server-side, before its executions).
const PreparePrefix = "PREPARE "

// Name is the statement's sqlc name ("-- name: X ..."), or its first 40
// characters; a statement being prepared is "PREPARE " and its name.
func Name(query string) string {
	if rest, ok := strings.CutPrefix(query, PreparePrefix); ok {
		return PreparePrefix + Name(rest)
	}
	if rest, ok := strings.CutPrefix(query, "-- name: "); ok {
		name, _, _ := strings.Cut(rest, " ")
		return name
	}
	if len(query) > 40 {
		return query[:40]
	}
	return query
}

// Open returns a DB for dsn (go-sql-driver/mysql syntax) whose connections
// run hook around every statement.
func Open(dsn string, hook Hook) (*sql.DB, error) {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlwrap: %w", err)
	}
	inner, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("sqlwrap: %w", err)
	}
	return sql.OpenDB(connector{inner: inner, hook: hook}), nil
}

type connector struct {
	inner driver.Connector
	hook  Hook
}

func (k connector) Connect(ctx context.Context) (driver.Conn, error) {
	inner, err := k.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &conn{Conn: inner, hook: k.hook}, nil
}

func (k connector) Driver() driver.Driver { return k.inner.Driver() }

// conn forwards to the driver's connection, which implements the
// context-aware interfaces below. (Connection set-up at Connect is not a
// statement.)
type conn struct {
	driver.Conn
	hook Hook
	bad  atomic.Bool // a hook reported a lost reply: discard the connection
}

// run wraps one round trip.
func (c *conn) run(ctx context.Context, query string, args []driver.NamedValue, do func() error) error {
	note, err := c.hook.Before(ctx, query, args)
	if err == nil {
		err = c.hook.After(ctx, query, note, do())
	}
	// Wrapped too (faultdb wraps the error it injects): a connection whose
	// round trip failed is never handed out again, or the next caller's
	// statements would run inside whatever transaction the server still
	// holds open on it.
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		c.bad.Store(true)
	}
	return err
}

func (c *conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (res driver.Result, err error) {
	err = c.run(ctx, query, args, func() error {
		res, err = c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
		return err
	})
	return res, err
}

func (c *conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (rows driver.Rows, err error) {
	err = c.run(ctx, query, args, func() error {
		rows, err = c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
		return err
	})
	if err != nil && rows != nil {
		rows.Close()
		rows = nil
	}
	return rows, err
}

func (c *conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	var st driver.Stmt
	err := c.run(ctx, PreparePrefix+query, nil, func() (err error) {
		st, err = c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &stmt{Stmt: st, conn: c, query: query}, nil
}

func (c *conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var t driver.Tx
	err := c.run(ctx, Begin, nil, func() (err error) {
		t, err = c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return &tx{Tx: t, conn: c}, nil
}

func (c *conn) Ping(ctx context.Context) error {
	return c.run(ctx, Ping, nil, func() error { return c.Conn.(driver.Pinger).Ping(ctx) })
}

func (c *conn) ResetSession(ctx context.Context) error {
	if c.bad.Load() {
		return driver.ErrBadConn
	}
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *conn) IsValid() bool { return !c.bad.Load() && c.Conn.(driver.Validator).IsValid() }

func (c *conn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type stmt struct {
	driver.Stmt
	conn  *conn
	query string
}

func (s *stmt) ExecContext(ctx context.Context, args []driver.NamedValue) (res driver.Result, err error) {
	err = s.conn.run(ctx, s.query, args, func() error {
		res, err = s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
		return err
	})
	return res, err
}

func (s *stmt) QueryContext(ctx context.Context, args []driver.NamedValue) (rows driver.Rows, err error) {
	err = s.conn.run(ctx, s.query, args, func() error {
		rows, err = s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
		return err
	})
	if err != nil && rows != nil {
		rows.Close()
		rows = nil
	}
	return rows, err
}

type tx struct {
	driver.Tx
	conn *conn
}

func (t *tx) Commit() error {
	return t.conn.run(context.Background(), Commit, nil, t.Tx.Commit)
}

func (t *tx) Rollback() error {
	return t.conn.run(context.Background(), Rollback, nil, t.Tx.Rollback)
}
