package scheduler_test

import (
	"context"
	"testing"

	"github.com/laneq/laneq/runtime/scheduler"
)

// TestPoolHoldsABusyMemberToItsShareWhileAnotherWaits: a busy member may
// fill the pool alone; once another member is refused, the next released
// row is offered to it (its OnFreed), and the busy member is denied until
// it is down to its fair share.
func TestPoolHoldsABusyMemberToItsShareWhileAnotherWaits(t *testing.T) {
	ctx := context.Background()
	p, err := scheduler.NewPool(8, 8)
	if err != nil {
		t.Fatal(err)
	}
	var offered int
	busy := p.Join(nil)
	small := p.Join(func() { offered++ })
	if g, _ := busy.Admit(ctx, 20); g.Max != 8 {
		t.Fatalf("alone, the busy member got %d rows, want the whole pool (8)", g.Max)
	}
	if g, _ := small.Admit(ctx, 2); g.Max != 0 {
		t.Fatalf("a full pool granted %d", g.Max)
	}
	busy.Release(1)
	if offered != 1 {
		t.Fatalf("the waiting member was offered %d released rows, want 1", offered)
	}
	if g, _ := busy.Admit(ctx, 4); g.Max != 0 {
		t.Fatalf("above its share (4 of 8) while another waits, the busy member got %d", g.Max)
	}
	if g, _ := small.Admit(ctx, 2); g.Max != 1 {
		t.Fatalf("the waiting member got %d, want the one free row", g.Max)
	}
	busy.Release(4) // down to 3, below its share
	if g, _ := small.Admit(ctx, 1); g.Max != 1 {
		t.Fatalf("the small member got %d of the freed rows, want 1", g.Max)
	}
	if g, _ := busy.Admit(ctx, 4); g.Max != 3 {
		t.Fatalf("with nobody waiting the busy member got %d, want the 3 free rows", g.Max)
	}
	if p.Processing() != 8 || busy.Processing() != 6 || small.Processing() != 2 {
		t.Fatalf("pool %d, busy %d, small %d; want 8, 6, 2", p.Processing(), busy.Processing(), small.Processing())
	}
	small.Leave()
	if p.Processing() != 6 {
		t.Fatalf("a member that left still holds rows: pool %d", p.Processing())
	}
	if g, _ := busy.Admit(ctx, 10); g.Max != 2 {
		t.Fatalf("alone again, the busy member got %d, want the rest of the pool (2)", g.Max)
	}
}

// TestPoolCapsAMember: MaxPerMember holds even with the pool free.
func TestPoolCapsAMember(t *testing.T) {
	p, err := scheduler.NewPool(10, 3)
	if err != nil {
		t.Fatal(err)
	}
	m := p.Join(nil)
	if g, _ := m.Admit(context.Background(), 5); g.Max != 3 || m.Available() != 0 {
		t.Fatalf("granted %d, available %d; want 3 and 0", g.Max, m.Available())
	}
	if _, err := scheduler.NewPool(4, 5); err == nil {
		t.Fatal("a member cap above the pool was accepted")
	}
}
