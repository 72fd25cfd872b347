// Package queuetest sets up a work queue on a fresh test database: the
// common start of every test that drives runtime/workqueue on real TiDB.
package queuetest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
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

// Dead makes n dead items of workType in scope (default class, no lane),
// each of its own event, through the real path: enqueue, claim, and a
// permanent failure of failureClass. It returns their ids in enqueue
// order.
func Dead(t testing.TB, qu *workqueue.Queue, scope, workType, failureClass string, n int) []int64 {
	t.Helper()
	ctx := context.Background()
	tag := make([]byte, 6)
	_, _ = rand.Read(tag)
	var events []workqueue.Event
	for i := range n {
		key := fmt.Sprintf("dead-%x-%s-%d", tag, workType, i)
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "route", RouteVersion: 1, EventKind: "changed",
			SourceKind: "object", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: workType}}})
	}
	res, err := qu.Enqueue(ctx, scope, events)
	if err != nil {
		t.Fatalf("queuetest: enqueue %d items to kill: %v", n, err)
	}
	want := map[int64]bool{}
	var ids []int64
	for _, ev := range res {
		want[ev.Work[0].WorkID] = true
		ids = append(ids, ev.Work[0].WorkID)
	}
	cl, err := qu.NewClaimer(scope, "queuetest-dead", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for len(want) > 0 {
		got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{workType}, Max: 100})
		if err != nil {
			t.Fatalf("queuetest: claim items to kill: %v", err)
		}
		if len(got) == 0 {
			t.Fatalf("queuetest: %d items to kill were not claimable", len(want))
		}
		for _, c := range got {
			if !want[c.WorkID] {
				t.Fatalf("queuetest: claimed %d, which Dead did not enqueue (the scope has other %s work)", c.WorkID, workType)
			}
			delete(want, c.WorkID)
			if _, err := qu.Fail(ctx, c, workqueue.Failure{Class: failureClass, Summary: "killed by queuetest.Dead"}, workqueue.ErrPermanent); err != nil {
				t.Fatalf("queuetest: fail %d: %v", c.WorkID, err)
			}
		}
	}
	return ids
}

// LockWaits is how many lock waits information_schema.data_lock_waits
// shows on rows of table in db's database (of any table when table is
// ""): each waiting key's description (key_info, JSON) names its database
// and table. A test that holds a row lock looks for a waiter here to know
// another transaction is blocked behind it, instead of sleeping and
// hoping it is.
func LockWaits(ctx context.Context, db *sql.DB, table string) (int, error) {
	var n int
	err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.data_lock_waits
		WHERE JSON_UNQUOTE(JSON_EXTRACT(key_info, '$.db_name')) = DATABASE()
		  AND (? = '' OR JSON_UNQUOTE(JSON_EXTRACT(key_info, '$.table_name')) = ?)`, table, table).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("queuetest: count lock waits on table %q: %w", table, err)
	}
	return n, nil
}
