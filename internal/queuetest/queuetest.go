// Package queuetest sets up a work queue on a fresh test database: the
// common start of every test that drives runtime/workqueue on real TiDB.
package queuetest

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/naivedb"
	"github.com/laneq/laneq/internal/sqlcount"
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
	t.Cleanup(func() { _ = qu.Close() })
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

// Counted opens a second Queue with cfg on the database at dsn whose every
// statement is counted, for tests that assert SQL budgets of the data path.
// Its Queue sends no announcements of its own (cfg.Announce.Off): their
// endpoint reads run on the publisher's goroutine and would land in a
// measured window at random. The cost of announcing is measured by the
// wake tests.
func Counted(t testing.TB, dsn string, cfg workqueue.Config) (*workqueue.Queue, *sqlcount.Counter) {
	t.Helper()
	db, counter, err := sqlcount.Open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.Announce.Off = true
	qu, err := workqueue.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qu.Close() })
	return qu, counter
}

// NaiveClaimComplete is the naive queue loop laneq is measured against:
// SELECT ... LIMIT 1 FOR UPDATE, mark processing, commit, then complete.
// It reports false when nothing was claimable.
func NaiveClaimComplete(ctx context.Context, db *sql.DB, scopeID string) (bool, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	q := naivedb.New(tx)
	id, err := q.NaiveClaimNext(ctx, naivedb.NaiveClaimNextParams{ScopeID: scopeID, Generation: 1})
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := q.NaiveMarkProcessing(ctx, id); err != nil {
		return false, err
	}
	if err := tx.Commit(); err != nil {
		return false, err
	}
	return true, naivedb.New(db).NaiveComplete(ctx, id)
}

// Percentile is the p-th percentile of ds (nearest rank), 0 for none.
func Percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
