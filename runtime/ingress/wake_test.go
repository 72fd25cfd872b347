package ingress_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// otherProcess is a second process's view of the fixture's database: its
// own pool, Queue, Inbox and wake hub (a hub only skips its own endpoints,
// so two hubs in one test process talk as two processes do).
type otherProcess struct {
	qu  *workqueue.Queue
	in  *ingress.Inbox
	hub *wake.Hub
}

func newHub(t *testing.T, qu *workqueue.Queue) *wake.Hub {
	t.Helper()
	hub, err := wake.New(qu, wake.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	return hub
}

func (f *fixture) otherProcess() otherProcess {
	f.t.Helper()
	db, err := workqueue.OpenDB(f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { db.Close() })
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	in, err := ingress.New(db, ingress.Config{})
	if err != nil {
		f.t.Fatal(err)
	}
	return otherProcess{qu: qu, in: in, hub: newHub(f.t, qu)}
}

func (f *fixture) waitQuiet(r *ingress.Router, want bool) {
	f.t.Helper()
	f.waitStats(r, fmt.Sprintf("quiet %v", want), func(st ingress.RouterStats) bool { return st.Quiet == want })
}

// waitStats waits (polling, up to a minute) until the running router's
// counters satisfy ok: they move after the commit a test can see, so a
// test that saw a receipt's row change reads them only through this.
func (f *fixture) waitStats(r *ingress.Router, want string, ok func(ingress.RouterStats) bool) {
	f.t.Helper()
	waitfor.Until(f.t, time.Minute, func() (bool, error) { return ok(r.Stats()), nil },
		func() string { return fmt.Sprintf("router stats %+v, want %s", r.Stats(), want) })
}

// TestAcceptInAnotherProcessWakesTheRouter: a receipt accepted by another
// process that announces its accepts reaches a router whose own looks are
// an hour apart (Backstop and QuietBackstop): only the wake can have
// started it.
func TestAcceptInAnotherProcessWakesTheRouter(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	api := f.otherProcess()
	stop := api.in.AnnounceTo(api.hub)
	defer stop()
	r := f.router(ingress.RouterConfig{Wakes: newHub(t, f.qu), Backstop: time.Hour, QuietBackstop: time.Hour})
	f.run(r)
	f.waitQuiet(r, true)
	f.settle(r) // past its first turn: no look of its own finds the first receipt

	for i := range 5 {
		acc, err := api.in.Accept(f.ctx, delivery("remote-"+string(rune('a'+i)), "", "rf"+string(rune('a'+i))))
		if err != nil {
			t.Fatal(err)
		}
		got := f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
		t.Logf("accepted in the other process -> materialized: %s", got.MaterializedAt.Sub(got.AcceptedAt).Round(time.Millisecond))
	}
	f.waitStats(r, "woken, no missed wake, still quiet", func(st ingress.RouterStats) bool {
		return st.Wakes >= 1 && st.MissedWakes == 0 && st.Quiet
	})
}

// TestMissedWakeEndsQuiet: a quiet router whose look of its own finds a
// receipt no wake announced (the accepting process does not announce)
// counts a missed wake and looks every Backstop again; the next wake makes
// it quiet again. Once the router distrusts the wakes, no look counts
// another missed wake, whichever of the router's own look (every Backstop)
// and the wake finds the announced receipt first: exactly one.
func TestMissedWakeEndsQuiet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	silent := f.otherProcess()
	const quietBackstop = 500 * time.Millisecond
	r := f.router(ingress.RouterConfig{Wakes: newHub(t, f.qu), Backstop: 200 * time.Millisecond, QuietBackstop: quietBackstop})
	f.run(r)
	f.waitQuiet(r, true)
	// In quiet mode: whatever finds the next receipt is a quiet probe
	// (nothing here announces it).
	f.settle(r)

	acc, err := silent.in.Accept(f.ctx, delivery("unannounced", "", "u1"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized) // found by a look of its own
	f.waitStats(r, "one missed wake and quiet off", func(st ingress.RouterStats) bool { return st.MissedWakes == 1 && !st.Quiet })

	loud := f.otherProcess()
	stop := loud.in.AnnounceTo(loud.hub)
	defer stop()
	acc, err = loud.in.Accept(f.ctx, delivery("announced", "", "a1"))
	if err != nil {
		t.Fatal(err)
	}
	f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
	f.waitStats(r, "quiet again after a wake", func(st ingress.RouterStats) bool { return st.Quiet && st.Wakes >= 1 })
	if st := r.Stats(); st.MissedWakes != 1 {
		t.Fatalf("router stats %+v, want still one missed wake: a look while the wakes are distrusted, or one a wake raced, is not a missed wake", st)
	}
}

// TestWakeTrailingALookIsNotAMissedWake: a quiet router's look of its own
// finds a receipt whose announcing process's datagram is still on its way
// (the look read between the accept's commit and the wake). A wake within
// MissedWakeGrace of the look explains it: no missed wake, still quiet.
// With no grace the same look counts one at once.
func TestWakeTrailingALookIsNotAMissedWake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		grace time.Duration
	}{
		// Longer than the default, so that a loaded machine's slow wake
		// still trails within it; the default works the same way.
		{"a grace", 5 * time.Second},
		{"no grace", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			other := f.otherProcess()
			const quietBackstop = 300 * time.Millisecond
			r := f.router(ingress.RouterConfig{Wakes: newHub(t, f.qu), Backstop: 100 * time.Millisecond, QuietBackstop: quietBackstop, MissedWakeGrace: tc.grace})
			f.run(r)
			f.waitQuiet(r, true)
			f.settle(r)
			acc, err := other.in.Accept(f.ctx, delivery("trailed", "", "t1"))
			if err != nil {
				t.Fatal(err)
			}
			f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized) // found by a look of its own
			if tc.grace < 0 {
				f.waitStats(r, "a missed wake, judged as the look ended", func(st ingress.RouterStats) bool { return st.MissedWakes == 1 && !st.Quiet })
				return
			}
			other.hub.Publish(scope) // the accept's datagram, late
			f.waitStats(r, "the look explained by the wake", func(st ingress.RouterStats) bool { return st.ExplainedLooks >= 1 })
			if st := r.Stats(); st.MissedWakes != 0 || !st.Quiet {
				t.Fatalf("router stats %+v, want no missed wake and still quiet", st)
			}
		})
	}
}

// TestWakeDuringALookIsNotAMissedWake: a quiet router's look of its own
// finds a receipt, and while that look routes it a wake arrives (the
// announcing process's, racing the backstop). The look cannot tell the
// wake was not for that receipt, so it counts no missed wake, and the
// router stays quiet: counting one would leave it looking every Backstop
// with no later wake to end that.
func TestWakeDuringALookIsNotAMissedWake(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	other := f.otherProcess()
	entered, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	defer unblock()
	const quietBackstop = 300 * time.Millisecond
	r := f.router(ingress.RouterConfig{
		Wakes: newHub(t, f.qu), Backstop: 100 * time.Millisecond, QuietBackstop: quietBackstop,
		MissedWakeGrace: -1, // judged as the look ends: the wake during it must explain it by itself
		Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
			close(entered)
			<-release
			return routeFacts(ctx, c)
		},
	})
	f.run(r)
	f.waitQuiet(r, true)
	f.settle(r)

	// Accepted unannounced: a look of the loop's own claims it, and its
	// route holds that look's turn open until the wake has arrived.
	acc, err := other.in.Accept(f.ctx, delivery("raced", "", "r1"))
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	other.hub.Publish(scope)
	f.waitStats(r, "the wake", func(st ingress.RouterStats) bool { return st.Wakes >= 1 })
	unblock()
	f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
	f.settle(r) // the turn is booked: it ended before the loop took the settle
	if st := r.Stats(); st.MissedWakes != 0 || !st.Quiet {
		t.Fatalf("router stats %+v, want no missed wake and still quiet", st)
	}
}
