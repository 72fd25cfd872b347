// Package sqlcount opens a MySQL-protocol *sql.DB whose connections count
// every statement they send (queries, executions, prepares, transaction
// control), so tests can assert exact SQL budgets from the driver side.
package sqlcount

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"maps"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/laneq/laneq/internal/sqlwrap"
)

// Counter counts statements sent by every connection of one DB, in total
// and by statement (sqlc's "-- name: X" header, or the first words).
type Counter struct {
	n, prepares atomic.Int64
	mu          sync.Mutex
	byName      map[string]int64
}

// Statements returns the number of statements sent so far.
func (c *Counter) Statements() int64 { return c.n.Load() }

// Executed returns the number of statements sent so far, not counting
// prepares (sent once per statement per connection, when a connection
// first runs it): what a budget on a steady path counts.
func (c *Counter) Executed() int64 { return c.n.Load() - c.prepares.Load() }

// ByStatement returns how often each statement was sent so far.
func (c *Counter) ByStatement() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.byName)
}

// Since returns the statements sent since before (an earlier ByStatement),
// by statement; statements not sent since are left out.
func (c *Counter) Since(before map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range c.ByStatement() {
		if d := v - before[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}

// Before counts the statement (sqlwrap.Hook).
func (c *Counter) Before(_ context.Context, query string, _ []driver.NamedValue) (any, error) {
	c.n.Add(1)
	if strings.HasPrefix(query, sqlwrap.PreparePrefix) {
		c.prepares.Add(1)
	}
	name := sqlwrap.Name(query)
	c.mu.Lock()
	c.byName[name]++
	c.mu.Unlock()
	return nil, nil
}

// After leaves the outcome as it is (sqlwrap.Hook).
func (c *Counter) After(_ context.Context, _ string, _ any, err error) error { return err }

// Open returns a DB for dsn (go-sql-driver/mysql syntax) and its Counter.
func Open(dsn string) (*sql.DB, *Counter, error) {
	c := &Counter{byName: map[string]int64{}}
	db, err := sqlwrap.Open(dsn, c)
	if err != nil {
		return nil, nil, err
	}
	return db, c, nil
}
