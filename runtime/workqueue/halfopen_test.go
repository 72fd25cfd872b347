package workqueue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/runtime/workqueue"
)

// halfOpenWriteTimeout is the WriteTimeout of halfOpenQueue's Queue: short,
// so a bounded wait on a connection that never answers ends soon, and above
// the one-second lock wait its session sets (New refuses a WriteTimeout at
// or below it).
const halfOpenWriteTimeout = 2 * time.Second

// halfOpenQueue opens a Queue on f's database whose connections pass
// through a faultdb.Proxy: a rule whose Before calls the proxy's Blackhole
// leaves the statement it precedes, and every later one, unanswered.
func halfOpenQueue(t *testing.T, f *fixture) (*workqueue.Queue, *faultdb.Injector, *faultdb.Proxy) {
	t.Helper()
	proxy, dsn, err := faultdb.ProxyFor(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params["innodb_lock_wait_timeout"] = "1" // below halfOpenWriteTimeout
	db, in, err := faultdb.Open(cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	qu, err := workqueue.New(db, workqueue.Config{WriteTimeout: halfOpenWriteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qu.Close() })
	// Registered last, so it runs first: closing the proxy's connections
	// frees a call still blocked on one, which db.Close would wait for.
	t.Cleanup(func() {
		if err := proxy.Close(); err != nil {
			t.Error(err)
		}
	})
	return qu, in, proxy
}

// TestLeaseReadBacksOnAHalfOpenConnectionAreBounded: the reads that follow
// a lease-fenced write run under a context the caller cannot cancel, so
// nothing but their own bound ends them. On a connection that stops
// answering at that read (the write went through) the call still returns:
//   - Renew of an item whose cancellation was requested matches no row and
//     reads the row back (GetLeaseState) to tell a cancellation from a lost
//     lease; unanswered, it reports the lease lost;
//   - Release of a Lease built by hand (as the worker's backend builds
//     them) commits, then reads the item's scope to announce it
//     (GetLaneIdentity); unanswered, the release still succeeded and the
//     receivers' probes find the item.
//
// Unbounded, either waited forever: a worker's heartbeat stuck in it held
// up its scheduler's timers and Stop.
func TestLeaseReadBacksOnAHalfOpenConnectionAreBounded(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, at string
		// prepare sets the item c (claimed through f's Queue) up and
		// returns the call on qu; check checks what it returned and left.
		prepare func(t *testing.T, f *fixture, qu *workqueue.Queue, c workqueue.Claimed) func() error
		check   func(t *testing.T, f *fixture, c workqueue.Claimed, err error)
	}{
		{
			name: "renew of a cancelled item", at: "GetLeaseState",
			prepare: func(t *testing.T, f *fixture, qu *workqueue.Queue, c workqueue.Claimed) func() error {
				if out, err := f.qu.Cancel(f.ctx, scope, c.WorkID, "half-open test"); err != nil || !out.Running {
					t.Fatalf("cancel the running item: %+v, %v", out, err)
				}
				return func() error { return qu.Renew(context.Background(), c.Lease) }
			},
			check: func(t *testing.T, f *fixture, c workqueue.Claimed, err error) {
				if !errors.Is(err, workqueue.ErrLeaseLost) {
					t.Errorf("renew whose read-back got no answer: %v, want ErrLeaseLost", err)
				}
			},
		},
		{
			name: "release of a hand-built lease", at: "GetLaneIdentity",
			prepare: func(t *testing.T, f *fixture, qu *workqueue.Queue, c workqueue.Claimed) func() error {
				byHand := workqueue.Lease{WorkID: c.WorkID, Token: c.Lease.Token}
				return func() error { return qu.Release(context.Background(), byHand) }
			},
			check: func(t *testing.T, f *fixture, c workqueue.Claimed, err error) {
				if err != nil {
					t.Errorf("release whose announcement read got no answer: %v, want nil (the release committed)", err)
				}
				if got := f.state(c.WorkID); got != workqueue.StatePending {
					t.Errorf("released item is %s, want pending", got)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, workqueue.Config{})
			f.one(workqueue.Work{})
			claimed := f.claim(f.claimer("w"), workqueue.ClaimRequest{})
			if len(claimed) != 1 {
				t.Fatalf("claimed %v, want the one item", ids(claimed))
			}
			qu, in, proxy := halfOpenQueue(t, f)
			call := tc.prepare(t, f, qu, claimed[0])
			in.Add(faultdb.Rule{Statement: tc.at, Before: func(context.Context) { proxy.Blackhole() }})

			// The call needs at most about one WriteTimeout after the
			// blackhole; the guard, far above that, only tells a bounded
			// wait from one that never ends.
			const guard = 15 * halfOpenWriteTimeout
			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- call() }()
			select {
			case err := <-done:
				t.Logf("returned after %s: %v", time.Since(began).Round(time.Millisecond), err)
				if in.Fired(tc.at) != 1 {
					t.Fatalf("%s ran %d times unanswered, want once", tc.at, in.Fired(tc.at))
				}
				tc.check(t, f, claimed[0], err)
			case <-time.After(guard):
				t.Fatalf("%s: no return %s after %s went unanswered (WriteTimeout %s)", tc.name, guard, tc.at, halfOpenWriteTimeout)
			}
		})
	}
}
