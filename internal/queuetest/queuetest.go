// Package queuetest sets up a work queue on a fresh test database: the
// common start of every test that drives runtime/workqueue on real TiDB.
package queuetest

import (
	"context"
	"database/sql"
	"testing"

	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// New returns a Queue with cfg on a fresh migrated database (see
// tidbtest.NewDBWithDSN), the database and its DSN, with scope created at
// generation 1.
func New(t testing.TB, cfg workqueue.Config, scope string) (*workqueue.Queue, *sql.DB, string) {
	t.Helper()
	db, dsn := tidbtest.NewDBWithDSN(t)
	qu, err := workqueue.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := qu.EnsureScope(context.Background(), scope, 1); err != nil {
		t.Fatal(err)
	}
	return qu, db, dsn
}
