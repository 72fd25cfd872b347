package ingress_test

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// otherProcess is a second process's view of the fixture's database: its
// own pool, Queue, Inbox and wake hub (a hub only skips its own endpoints,
// so two hubs in one test process talk as two processes do).
type otherProcess struct {
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
	return otherProcess{in: in, hub: newHub(f.t, qu)}
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
	deadline := time.Now().Add(time.Minute)
	for !ok(r.Stats()) {
		if time.Now().After(deadline) {
			f.t.Fatalf("router stats %+v after a minute, want %s", r.Stats(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
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
// it quiet again.
func TestMissedWakeEndsQuiet(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	silent := f.otherProcess()
	r := f.router(ingress.RouterConfig{Wakes: newHub(t, f.qu), Backstop: 200 * time.Millisecond, QuietBackstop: 500 * time.Millisecond})
	f.run(r)
	f.waitQuiet(r, true)

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
	f.waitQuiet(r, true)
	f.waitStats(r, "a wake and still one missed wake", func(st ingress.RouterStats) bool { return st.Wakes >= 1 && st.MissedWakes == 1 })
}
