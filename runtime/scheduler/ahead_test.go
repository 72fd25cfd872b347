package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

// claimTurn runs one fresh claim turn and returns how many items it
// handed to the shapes.
func claimTurn(t *testing.T, s *scheduler.Scheduler[item]) int {
	t.Helper()
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	return batch.Started
}

// TestClaimAheadWhileHandlersAreShort: before any handler returned a turn
// claims only for the slots; once handlers are known to be short (well
// under ClaimAheadWait), a turn also claims the items the slots will start
// next, which wait for them, and every item runs once.
func TestClaimAheadWhileHandlersAreShort(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 20)...)
	release := make(chan struct{})
	b.handle = func(ctx context.Context, it item) error {
		if it.id >= 2 {
			<-release // the slots stay busy while the next turn claims
		}
		return nil
	}
	s := start(t, b, scheduler.Config{Executors: 2, Profile: scheduler.ProfileDefaultHeavy, ClaimAheadWait: time.Hour})
	if got := claimTurn(t, s); got != 2 {
		t.Fatalf("first turn claimed %d, want the 2 slots: no handler time is known yet", got)
	}
	waitFinished(t, b, 2)
	want := 2 + 2*scheduler.DefaultClaimAheadPerExecutor // the slots and the default items ahead
	waitCapacity(t, s, b, want)
	if got := s.Capacity(false); got != want {
		t.Fatalf("capacity %d after two short handlers, want 2 slots + %d ahead", got, want-2)
	}
	if got := claimTurn(t, s); got != want {
		t.Fatalf("second turn claimed %d, want %d", got, want)
	}
	if got := s.Capacity(false); got != 0 {
		t.Fatalf("capacity %d with 2 items running and %d waiting, want 0", got, want-2)
	}
	close(release)
	ids := waitFinished(t, b, want)
	seen := map[int]bool{}
	for _, id := range ids {
		if seen[id] {
			t.Fatalf("item %d finished twice", id)
		}
		seen[id] = true
	}
	if st := s.Stats(); st.AheadRenewals != 0 {
		t.Fatalf("%d renewals before start, want none (no item waited a heartbeat)", st.AheadRenewals)
	}
}

// TestNoClaimAheadForSlowHandlers: handlers slower than ClaimAheadWait
// leave nothing claimed ahead (the items stay free for another process's
// idle slots), as does a negative ClaimAhead.
func TestNoClaimAheadForSlowHandlers(t *testing.T) {
	for _, cfg := range []scheduler.Config{
		{Executors: 2, Profile: scheduler.ProfileDefaultHeavy, ClaimAheadWait: time.Nanosecond},
		{Executors: 2, Profile: scheduler.ProfileDefaultHeavy, ClaimAheadWait: time.Hour, ClaimAhead: -1},
	} {
		t.Run(fmt.Sprintf("wait=%s,ahead=%d", cfg.ClaimAheadWait, cfg.ClaimAhead), func(t *testing.T) {
			b := newFakeBackend(classItems("default", 0, 20)...)
			s := start(t, b, cfg)
			for turn := range 3 {
				if got := claimTurn(t, s); got != 2 {
					t.Fatalf("turn %d claimed %d, want the 2 slots", turn, got)
				}
				waitFinished(t, b, 2)
				waitCapacity(t, s, b, 2)
				if got := s.Capacity(false); got != 2 {
					t.Fatalf("capacity %d after turn %d, want 2 (nothing ahead)", got, turn)
				}
			}
		})
	}
}

// TestItemThatWaitedAHeartbeatRenewsBeforeItStarts: an item claimed ahead
// that waited HeartbeatEvery or longer for its slot (the handler ahead of
// it turned slow) renews its lease before it starts; when the renewal says
// the item is someone else's, it never starts and goes back with
// ErrNotStarted (which backends release).
func TestItemThatWaitedAHeartbeatRenewsBeforeItStarts(t *testing.T) {
	const heartbeat = 50 * time.Millisecond
	b := newFakeBackend(classItems("default", 0, 20)...)
	release := make(chan struct{})
	started := make(chan int, 20)
	b.handle = func(ctx context.Context, it item) error {
		started <- it.id
		if it.id == 1 {
			<-release // the slot turns slow while item 2 waits for it
		}
		return nil
	}
	lost := errors.New("taken over")
	b.renew = func(it item) error {
		if it.id == 2 {
			return fmt.Errorf("%w: %w", scheduler.ErrOwnershipLost, lost)
		}
		return nil
	}
	s := start(t, b, scheduler.Config{Executors: 1, ClaimAhead: 1, ClaimAheadWait: time.Hour, HeartbeatEvery: heartbeat, Profile: scheduler.ProfileDefaultHeavy})
	if got := claimTurn(t, s); got != 1 {
		t.Fatalf("first turn claimed %d", got)
	}
	waitFinished(t, b, 1)
	waitCapacity(t, s, b, 2)
	if got := claimTurn(t, s); got != 2 {
		t.Fatalf("second turn claimed %d, want the slot and one ahead", got)
	}
	claimedAt := time.Now() // no earlier than the scheduler's stamp of the claim
	if id := <-started; id != 0 {
		t.Fatalf("item %d started first", id)
	}
	if id := <-started; id != 1 {
		t.Fatalf("item %d started second", id)
	}
	// Item 2 waits behind item 1 for longer than a heartbeat.
	time.Sleep(heartbeat - time.Since(claimedAt) + 10*time.Millisecond)
	close(release)
	waitFinished(t, b, 2)
	select {
	case id := <-started:
		t.Fatalf("item %d started although its renewal said it was lost", id)
	default:
	}
	if err := b.outcome(2); !errors.Is(err, scheduler.ErrNotStarted) || !errors.Is(err, lost) {
		t.Fatalf("item 2 outcome %v, want ErrNotStarted carrying the lost ownership", err)
	}
	if st := s.Stats(); st.AheadRenewals != 1 || st.AheadReleased != 1 {
		t.Fatalf("ahead renewals %d released %d, want 1 and 1", st.AheadRenewals, st.AheadReleased)
	}
}

// TestWaitedItemsHeartbeatCountsFromItsClaim: an item that waited for its
// slot less than a heartbeat period starts without a renewal, and its
// first heartbeat comes one period after its claim, not after its start:
// the lease it runs on is as old as the claim.
func TestWaitedItemsHeartbeatCountsFromItsClaim(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	b := newFakeBackend(classItems("default", 0, 3)...)
	release := make(chan struct{})
	started := make(chan int, 3)
	b.handle = func(ctx context.Context, it item) error {
		started <- it.id
		switch it.id {
		case 1:
			<-release
		case 2:
			<-ctx.Done()
		}
		return nil
	}
	s := start(t, b, scheduler.Config{Executors: 1, ClaimAhead: 1, ClaimAheadWait: time.Hour, HeartbeatEvery: 10 * time.Second,
		HandlerDeadline: time.Hour, Profile: scheduler.ProfileDefaultHeavy, Clock: fc})
	if got := claimTurn(t, s); got != 1 {
		t.Fatalf("first turn claimed %d", got)
	}
	waitFinished(t, b, 1)
	waitCapacity(t, s, b, 2)
	if got := claimTurn(t, s); got != 2 {
		t.Fatalf("second turn claimed %d, want the slot and one ahead", got)
	}
	<-started // item 0
	<-started // item 1 runs; item 2 waits for the slot
	fc.Advance(4 * time.Second)
	close(release)
	if id := <-started; id != 2 {
		t.Fatalf("item %d started third", id)
	}
	if !fc.WaitArmed(fc.Now().Add(6*time.Second), 10*time.Second) {
		t.Fatal("item 2's first heartbeat is not armed 10s after its claim (6s after its start)")
	}
	fc.Advance(6 * time.Second)
	select {
	case id := <-b.renewed:
		if id != 2 {
			t.Fatalf("renewed item %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("item 2 was not renewed 10s after its claim")
	}
	if st := s.Stats(); st.AheadRenewals != 0 {
		t.Fatalf("%d renewals before a start, want none: it waited less than a heartbeat", st.AheadRenewals)
	}
}
