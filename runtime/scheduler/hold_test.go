package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

// A lane runs one item at a time whatever the handler does: an item whose
// handler ignores its cancelled context stays this process's (its lease
// held at every heartbeat, Backend.Hold) until the handler returns; its
// slot takes new work after AbandonAfter; its outcome is finished when the
// handler returns, never before.

// holdCase runs item 1 (its handler ignores its context until unwedged)
// and item 2 on one executor whose timers run on a fake clock, with
// heartbeats every 10s and AbandonAfter 5s. The item is told to stop at
// its first heartbeat by renew's answer (nil: not told).
type holdCase struct {
	t       *testing.T
	fc      *clock.Fake
	b       *fakeBackend
	s       *scheduler.Scheduler[item]
	started chan int
	unwedge chan struct{}
	once    sync.Once
}

const (
	holdBeat    = 10 * time.Second
	holdAbandon = 5 * time.Second
)

func newHoldCase(t *testing.T, cfg scheduler.Config, renew func(item) error) *holdCase {
	t.Helper()
	h := &holdCase{t: t, fc: clock.NewFake(time.Unix(0, 0)), started: make(chan int, 10), unwedge: make(chan struct{})}
	h.b = newFakeBackend(item{id: 1, class: "default"}, item{id: 2, class: "default"})
	h.b.renew = renew
	h.b.handle = func(ctx context.Context, it item) error {
		h.started <- it.id
		if it.id == 1 {
			<-ctx.Done()
			<-h.unwedge // as a call that ignores its context would
			return ctx.Err()
		}
		return nil
	}
	cfg.Executors, cfg.MaxProcessingRows, cfg.ClaimAhead = 1, 1, -1
	cfg.HeartbeatEvery, cfg.AbandonAfter, cfg.Clock = holdBeat, holdAbandon, h.fc
	if cfg.HandlerDeadline == 0 {
		cfg.HandlerDeadline = time.Hour
	}
	h.s = start(t, h.b, cfg)
	// Registered after start's Stop, so it runs first: a failed test must
	// not leave Stop waiting for a wedged handler.
	t.Cleanup(h.release)
	return h
}

// release lets item 1's handler return.
func (h *holdCase) release() {
	h.once.Do(func() { close(h.unwedge) })
}

func (h *holdCase) claim() int {
	h.t.Helper()
	if _, err := h.s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
		h.t.Fatal(err)
	}
	select {
	case id := <-h.started:
		return id
	case <-time.After(10 * time.Second):
		h.t.Fatal("no handler started")
	}
	return 0
}

// advanceTo waits until a timer is armed at at, then moves the clock there.
func (h *holdCase) advanceTo(at time.Duration, what string) {
	h.t.Helper()
	if !h.fc.WaitArmed(time.Unix(0, 0).Add(at), 10*time.Second) {
		h.t.Fatalf("no timer armed at %s for %s", at, what)
	}
	h.fc.Advance(at - h.fc.Now().Sub(time.Unix(0, 0)))
}

func (h *holdCase) nextHold() {
	h.t.Helper()
	select {
	case id := <-h.b.held:
		if id != 1 {
			h.t.Fatalf("held item %d, want 1", id)
		}
	case <-time.After(10 * time.Second):
		h.t.Fatal("the item was not held")
	}
}

func (h *holdCase) finishedNone(when string) {
	h.t.Helper()
	if n := h.b.finishedCount(); n != 0 {
		h.t.Fatalf("%d items finished %s; item 1's handler still runs", n, when)
	}
}

func TestCancelledItemIsHeldUntilItsHandlerReturns(t *testing.T) {
	h := newHoldCase(t, scheduler.Config{}, func(item) error { return fmt.Errorf("work 1: %w", scheduler.ErrCancelled) })
	if id := h.claim(); id != 1 {
		t.Fatalf("started %d, want 1", id)
	}
	h.advanceTo(holdBeat, "the first heartbeat")
	<-h.b.renewed // refused: cancelled
	h.nextHold()  // at once: the refused renewal did not extend the lease
	if !h.fc.WaitArmed(time.Unix(0, 0).Add(2*holdBeat), 10*time.Second) {
		t.Fatal("the heartbeat after the hold is not armed")
	}
	h.advanceTo(holdBeat+holdAbandon, "the abandon timer")
	waitCapacity(t, h.s, h.b, 1)
	if st := h.s.Stats(); st.Abandoned != 1 || st.AbandonedRunning != 1 || st.Cancelled != 1 {
		t.Fatalf("abandoned %d, running %d, cancelled %d; want 1, 1, 1", st.Abandoned, st.AbandonedRunning, st.Cancelled)
	}
	// The slot takes new work; the item keeps its lease.
	if id := h.claim(); id != 2 {
		t.Fatalf("started %d, want 2", id)
	}
	if id := <-h.b.finished; id != 2 {
		t.Fatalf("finished %d, want 2", id)
	}
	h.advanceTo(2*holdBeat, "the next hold")
	h.nextHold()
	h.advanceTo(3*holdBeat, "the next hold")
	h.nextHold()
	if err := h.b.outcome(1); err != nil {
		t.Fatalf("item 1 finished (%v) while its handler runs", err)
	}
	h.release()
	waitFinished(t, h.b, 1)
	if err := h.b.outcome(1); !errors.Is(err, scheduler.ErrCancelled) {
		t.Fatalf("item 1 outcome %v, want the cancellation", err)
	}
	if st := h.s.Stats(); st.AbandonedRunning != 0 {
		t.Fatalf("%d abandoned handlers running after the last returned", st.AbandonedRunning)
	}
}

// A handler past its deadline is held the same way, and renewals go on
// through Hold (not Renew) once its context ended.
func TestItemPastItsDeadlineIsHeldUntilItsHandlerReturns(t *testing.T) {
	h := newHoldCase(t, scheduler.Config{HandlerDeadline: 12 * time.Second}, nil)
	h.claim()
	h.advanceTo(holdBeat, "the first heartbeat")
	<-h.b.renewed
	if !h.fc.WaitArmed(time.Unix(0, 0).Add(2*holdBeat), 10*time.Second) {
		t.Fatal("the heartbeat after the renewal is not armed")
	}
	h.advanceTo(12*time.Second, "the deadline")
	h.advanceTo(12*time.Second+holdAbandon, "the abandon timer")
	waitCapacity(t, h.s, h.b, 1)
	h.advanceTo(2*holdBeat, "the first hold")
	h.nextHold()
	h.advanceTo(3*holdBeat, "the next hold")
	h.nextHold()
	h.finishedNone("past the deadline")
	if n := len(h.b.renewed); n != 0 {
		t.Fatalf("%d renewals after the deadline; a handler told to stop is held, not renewed", n)
	}
	h.release()
	waitFinished(t, h.b, 1)
	if err := h.b.outcome(1); !errors.Is(err, scheduler.ErrHandlerDeadline) {
		t.Fatalf("item 1 outcome %v, want the deadline", err)
	}
}

// A hold that finds the item someone else's stops holding: the lease is
// gone, and the fence refuses the old handler's writes. The outcome is
// still finished when the handler returns (and fenced by the backend).
func TestHoldStopsOnceTheItemIsSomeoneElses(t *testing.T) {
	h := newHoldCase(t, scheduler.Config{}, func(item) error { return scheduler.ErrCancelled })
	h.b.hold = func(item) error { return fmt.Errorf("work 1: %w", scheduler.ErrOwnershipLost) }
	h.claim()
	h.advanceTo(holdBeat, "the first heartbeat")
	h.nextHold()
	h.advanceTo(holdBeat+holdAbandon, "the abandon timer")
	waitCapacity(t, h.s, h.b, 1)
	// No hold is armed any more: moving the clock on holds nothing.
	h.fc.Advance(5 * holdBeat)
	h.release()
	waitFinished(t, h.b, 1)
	if n := len(h.b.held); n != 0 {
		t.Fatalf("%d holds after the item was someone else's", n)
	}
}

// Stop holds the item of a handler that ignores shutdown until it returns,
// and then finishes it by its outcome.
func TestStopWaitsForAHandlerThatIgnoresShutdown(t *testing.T) {
	h := newHoldCase(t, scheduler.Config{GiveUpAfter: time.Hour}, nil)
	h.claim()
	stopped := make(chan struct{})
	go func() { h.s.Stop(); close(stopped) }()
	h.advanceTo(holdAbandon, "the abandon timer Stop's cancellation armed")
	h.advanceTo(holdBeat, "the first hold")
	h.nextHold()
	h.advanceTo(2*holdBeat, "the next hold")
	h.nextHold()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a handler still runs")
	default:
	}
	h.finishedNone("during the shutdown")
	h.release()
	waitFinished(t, h.b, 1)
	<-stopped
	if err := h.b.outcome(1); !errors.Is(err, scheduler.ErrShutdown) {
		t.Fatalf("item 1 outcome %v, want the shutdown (a release)", err)
	}
}

// Past GiveUpAfter, Stop returns without finishing or releasing the item
// of a handler that still runs, and stops holding it: it is left to its
// lease's expiry.
func TestStopGivesUpWithoutFinishing(t *testing.T) {
	h := newHoldCase(t, scheduler.Config{GiveUpAfter: 25 * time.Second}, nil)
	h.claim()
	stopped := make(chan struct{})
	go func() { h.s.Stop(); close(stopped) }()
	h.advanceTo(holdAbandon, "the abandon timer Stop's cancellation armed")
	h.advanceTo(holdBeat, "the first hold")
	h.nextHold()
	h.advanceTo(2*holdBeat, "the next hold")
	h.nextHold()
	h.advanceTo(25*time.Second, "giving up")
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return after GiveUpAfter")
	}
	// Stop waited for every goroutine of the scheduler: nothing can finish
	// or hold the item from here on.
	h.finishedNone("when Stop gave up on it")
	if st := h.s.Stats(); st.GaveUp != 1 || st.AbandonedRunning != 0 {
		t.Fatalf("gave up %d, running %d; want 1, 0", st.GaveUp, st.AbandonedRunning)
	}
	h.fc.Advance(5 * holdBeat)
	if n := len(h.b.held); n != 0 {
		t.Fatalf("%d holds after Stop gave up", n)
	}
	h.release()
}
