package ingress_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) {
	if os.Getenv(killHelperEnv) != "" {
		os.Exit(runKilledRouter())
	}
	os.Exit(tidbtest.Main(m))
}

const scope = "tenant-a/pack-1"

type fixture struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	dsn string
	qu  *workqueue.Queue
	in  *ingress.Inbox
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, scope)
	in, err := ingress.New(db, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: context.Background(), db: db, dsn: dsn, qu: qu, in: in}
}

// delivery is a delivery of scope whose body lists fact keys, one event
// each (see routeFacts).
func delivery(id, class string, facts ...string) ingress.Delivery {
	return ingress.Delivery{
		Scope: scope, DeliveryID: id, Method: "POST", RouteKey: "/hooks/crm", ContentType: "text/plain",
		EventKind: "changed", CorrelationID: "corr-" + id, Class: class, Body: []byte(strings.Join(facts, ",")),
	}
}

// routeFacts is a RouteFunc: one event per comma-separated fact key of the
// body, keyed by the fact (two deliveries of one fact are one event), each
// with one "deliver" work item.
func routeFacts(_ context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
	if len(c.Body) == 0 {
		return nil, nil
	}
	var out []workqueue.Event
	for _, fact := range strings.Split(string(c.Body), ",") {
		out = append(out, workqueue.Event{
			IdempotencyKey: "fact:" + fact, RouteID: "crm", RouteVersion: 1, EventKind: c.EventKind,
			SourceKind: "object", SourceID: fact, Payload: []byte(fact),
			Work: []workqueue.Work{{WorkType: "deliver", QueueClass: c.Class}},
		})
	}
	return out, nil
}

func (f *fixture) accept(d ingress.Delivery) ingress.Accepted {
	f.t.Helper()
	a, err := f.in.Accept(f.ctx, d)
	if err != nil {
		f.t.Fatalf("accept %q: %v", d.DeliveryID, err)
	}
	return a
}

func (f *fixture) router(cfg ingress.RouterConfig) *ingress.Router {
	f.t.Helper()
	return f.routerOn(f.in, f.qu, cfg)
}

// routerOn is a router of in enqueueing through qu (a pool with injected
// faults, or another process's).
func (f *fixture) routerOn(in *ingress.Inbox, qu *workqueue.Queue, cfg ingress.RouterConfig) *ingress.Router {
	f.t.Helper()
	cfg.Scope = scope
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Route == nil {
		cfg.Route = routeFacts
	}
	r, err := in.NewRouter(qu, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// run starts r until the test ends; stop ends it sooner and waits for
// its loops, so its counters are final.
func (f *fixture) run(r *ingress.Router) (stop func()) {
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	stop = func() { cancel(); <-done }
	f.t.Cleanup(stop)
	return stop
}

// settle waits until every class of the running router r has handled
// everything sent to it so far (Router.Settle): past its first turn, and
// in the mode its last SetQuiet asked for. A test that accepts a receipt
// only a wake or a probe may find waits for it first: a class's first
// turn would find it without either.
func (f *fixture) settle(r *ingress.Router) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, time.Minute)
	defer cancel()
	if err := r.Settle(ctx); err != nil {
		f.t.Fatalf("router did not settle within a minute: %v", err)
	}
}

// waitCount waits (polling, up to a minute) until n reaches at least want.
func (f *fixture) waitCount(n *atomic.Int64, want int64, what string) {
	f.t.Helper()
	waitfor.Until(f.t, time.Minute, func() (bool, error) { return n.Load() >= want, nil },
		func() string { return fmt.Sprintf("%s: %d, want %d", what, n.Load(), want) })
}

func (f *fixture) receipt(id int64) ingress.Receipt {
	f.t.Helper()
	r, err := f.in.Receipt(f.ctx, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// waitStatus waits (polling the row, up to a minute) until receipt id
// reaches status, and returns it.
func (f *fixture) waitStatus(id int64, status string) ingress.Receipt {
	f.t.Helper()
	var r ingress.Receipt
	waitfor.Until(f.t, time.Minute, func() (bool, error) { r = f.receipt(id); return r.Status == status, nil }, func() string {
		return fmt.Sprintf("receipt %d: status %s (attempts %d, %s: %s), want %s", id, r.Status, r.Attempts, r.LastErrorClass, r.LastErrorSummary, status)
	})
	return r
}

// eventsOf returns the ids of the events written with receipt id.
func (f *fixture) eventsOf(id int64) []int64 {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, "SELECT event_id FROM event WHERE receipt_id = ? ORDER BY enqueue_ordinal", id)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var e int64
		if err := rows.Scan(&e); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRowContext(f.ctx, query, args...).Scan(&n); err != nil {
		f.t.Fatalf("%s: %v", query, err)
	}
	return n
}

// faultyInbox is an Inbox on its own pool of the fixture's database whose
// statements the returned injector can fault.
func (f *fixture) faultyInbox() (*ingress.Inbox, *faultdb.Injector) {
	f.t.Helper()
	db, faults, err := faultdb.Open(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close() })
	in, err := ingress.New(db, ingress.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	return in, faults
}
