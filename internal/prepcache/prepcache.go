// Package prepcache runs sqlc's statements as server-side prepared
// statements, each prepared once per connection and then only executed.
//
// Why: sent as text, every laneq statement is parsed and optimized again by
// TiDB; on the claim and finish paths the optimizer was about 40% of each
// statement's server time (statement summary, issue 15). A prepared
// statement executed again on the same session reuses its cached plan
// (TiDB's prepared plan cache, on by default), and executing it is one
// round trip, like the text protocol.
//
// A DB wraps a *sql.DB as sqlc's DBTX. database/sql keeps one *sql.Stmt per
// query text and prepares it lazily on each connection that runs it; a
// transaction borrows the statement prepared on its connection. Statements
// with an sqlc.slice expand to one text per list length, so the cache is
// bounded: once it holds Max texts, further texts run unprepared.
package prepcache

import (
	"context"
	"database/sql"
	"errors"
	"sync"

	"github.com/go-sql-driver/mysql"
)

// DefaultMax bounds the prepared texts one DB keeps (per connection, on
// the server, at most this many statements stay prepared).
const DefaultMax = 512

// DB is a *sql.DB whose ExecContext, QueryContext and QueryRowContext run
// through prepared statements. It satisfies sqlc's DBTX.
type DB struct {
	db  *sql.DB
	max int

	mu    sync.RWMutex
	stmts map[string]*sql.Stmt // nil value: preparing it failed; run it as text
}

// New wraps db; max <= 0 means DefaultMax.
func New(db *sql.DB, max int) *DB {
	if max <= 0 {
		max = DefaultMax
	}
	return &DB{db: db, max: max, stmts: map[string]*sql.Stmt{}}
}

// stmt returns the prepared statement for query, preparing it on first
// use, or nil when query is to run as text (the cache is full, or the
// server cannot prepare it).
func (p *DB) stmt(ctx context.Context, query string) *sql.Stmt {
	p.mu.RLock()
	st, ok := p.stmts[query]
	full := len(p.stmts) >= p.max
	p.mu.RUnlock()
	if ok || full {
		return st
	}
	st, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		// A context or connection failure says nothing about the text:
		// try again next time. Any other failure will repeat; remember it.
		if ctx.Err() != nil || !isStatementError(err) {
			return nil
		}
		st = nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.stmts[query]; ok { // another caller won the race
		if st != nil {
			_ = st.Close()
		}
		return prev
	}
	if len(p.stmts) >= p.max {
		if st != nil {
			_ = st.Close()
		}
		return nil
	}
	p.stmts[query] = st
	return st
}

// ExecContext runs query prepared.
func (p *DB) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return p.db.ExecContext(ctx, query, args...)
}

// QueryContext runs query prepared.
func (p *DB) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return p.db.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query prepared.
func (p *DB) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := p.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return p.db.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares query on the underlying DB (sqlc's DBTX).
func (p *DB) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return p.db.PrepareContext(ctx, query)
}

// DB returns the wrapped pool.
func (p *DB) DB() *sql.DB { return p.db }

// Tx returns tx as a DBTX whose statements borrow p's prepared statements
// on tx's connection.
func (p *DB) Tx(tx *sql.Tx) *Tx { return &Tx{p: p, tx: tx} }

// Close closes every prepared statement (not the DB).
func (p *DB) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first error
	for q, st := range p.stmts {
		if st != nil {
			if err := st.Close(); err != nil && first == nil {
				first = err
			}
		}
		delete(p.stmts, q)
	}
	return first
}

// Tx is a transaction whose ExecContext, QueryContext and QueryRowContext
// run through its DB's prepared statements.
type Tx struct {
	p  *DB
	tx *sql.Tx
}

// ExecContext runs query prepared, inside the transaction.
func (t *Tx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	}
	return t.tx.ExecContext(ctx, query, args...)
}

// QueryContext runs query prepared, inside the transaction.
func (t *Tx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	}
	return t.tx.QueryContext(ctx, query, args...)
}

// QueryRowContext runs query prepared, inside the transaction.
func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := t.p.stmt(ctx, query); st != nil {
		return t.tx.StmtContext(ctx, st).QueryRowContext(ctx, args...)
	}
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares query inside the transaction (sqlc's DBTX).
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, query)
}

// isStatementError reports whether the server refused the statement
// itself (a MySQL error reply), not the connection or the context.
func isStatementError(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}
