package workqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	os.Exit(tidbtest.Main(m))
}

const scope = "tenant-a/pack-1"

type fixture struct {
	t   *testing.T
	db  *sql.DB
	dsn string
	qu  *workqueue.Queue
	ctx context.Context
	seq int
}

func newFixture(t *testing.T, cfg workqueue.Config) *fixture {
	t.Helper()
	qu, db, dsn := queuetest.New(t, cfg, scope)
	return &fixture{t: t, db: db, dsn: dsn, qu: qu, ctx: context.Background()}
}

// add enqueues one event carrying the given work and returns the work ids.
func (f *fixture) add(works ...workqueue.Work) []int64 {
	f.t.Helper()
	f.seq++
	res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{{
		IdempotencyKey: fmt.Sprintf("event-%d", f.seq),
		RouteID:        "route", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: fmt.Sprint(f.seq),
		Payload: []byte("{}"),
		Work:    works,
	}})
	if err != nil {
		f.t.Fatalf("enqueue: %v", err)
	}
	var ids []int64
	for _, w := range res[0].Work {
		ids = append(ids, w.WorkID)
	}
	return ids
}

// one enqueues a single work item and returns its id.
func (f *fixture) one(w workqueue.Work) int64 {
	f.t.Helper()
	if w.WorkType == "" {
		w.WorkType = "deliver"
	}
	return f.add(w)[0]
}

func (f *fixture) claimer(owner string) *workqueue.Claimer {
	f.t.Helper()
	c, err := f.qu.NewClaimer(scope, owner, workqueue.ClaimerConfig{})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

var allClasses = []string{"default", "interactive", "bulk"}

// withTestDefaults fills a claim request's empty fields: every class, the
// "deliver" work type, up to 100 items.
func withTestDefaults(req workqueue.ClaimRequest) workqueue.ClaimRequest {
	if req.QueueClasses == nil {
		req.QueueClasses = allClasses
	}
	if req.WorkTypes == nil {
		req.WorkTypes = []string{"deliver"}
	}
	if req.Max == 0 {
		req.Max = 100
	}
	return req
}

func (f *fixture) claim(c *workqueue.Claimer, req workqueue.ClaimRequest) []workqueue.Claimed {
	f.t.Helper()
	got, _, err := c.Claim(f.ctx, withTestDefaults(req))
	if err != nil {
		f.t.Fatalf("claim: %v", err)
	}
	return got
}

func ids(cs []workqueue.Claimed) []int64 {
	out := make([]int64, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.WorkID)
	}
	return out
}

func sorted(v []int64) []int64 {
	out := append([]int64(nil), v...)
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func (f *fixture) state(workID int64) string {
	f.t.Helper()
	var s string
	if err := f.db.QueryRow("SELECT state FROM work_item WHERE work_id = ?", workID).Scan(&s); err != nil {
		f.t.Fatal(err)
	}
	return s
}

// Test fixtures move the database clock's view of one row instead of
// sleeping: the lease or the retry backoff is made to lie in the past.
func (f *fixture) expireLease(workID int64) {
	f.t.Helper()
	f.exec("UPDATE work_item SET run_after = DATE_SUB(NOW(6), INTERVAL 1 SECOND) WHERE work_id = ? AND state = 'processing'", workID)
}

func (f *fixture) makeDue(workID int64) {
	f.t.Helper()
	f.exec("UPDATE work_item SET run_after = DATE_SUB(NOW(6), INTERVAL 1 MICROSECOND) WHERE work_id = ?", workID)
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Exec(q, args...); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) complete(c workqueue.Claimed) workqueue.Finished {
	f.t.Helper()
	fin, err := f.qu.Complete(f.ctx, c.Lease)
	if err != nil {
		f.t.Fatalf("complete %d: %v", c.WorkID, err)
	}
	return fin
}

func (f *fixture) dbNow() time.Time {
	f.t.Helper()
	var now time.Time
	if err := f.db.QueryRow("SELECT NOW(6)").Scan(&now); err != nil {
		f.t.Fatal(err)
	}
	return now
}
