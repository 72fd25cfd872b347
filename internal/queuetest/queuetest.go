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

// Counters are the parts of a work item that a transition without an
// attempt (a dependency wait, a wake, a recheck) must leave alone or set.
type Counters struct {
	State       string
	Attempts    int32
	SafeRetries int32
}

// ItemFacts is a work item's row as a test checks it.
type ItemFacts struct {
	Counters
	LeaseToken         int64
	FailureClassIsNull bool
}

// Item reads work item id's facts.
func Item(t testing.TB, db *sql.DB, id int64) ItemFacts {
	t.Helper()
	var r ItemFacts
	err := db.QueryRow("SELECT state, attempt_count, safe_retry_count, lease_token, failure_class IS NULL FROM work_item WHERE work_id = ?", id).
		Scan(&r.State, &r.Attempts, &r.SafeRetries, &r.LeaseToken, &r.FailureClassIsNull)
	if err != nil {
		t.Fatalf("queuetest: read work item %d: %v", id, err)
	}
	return r
}
