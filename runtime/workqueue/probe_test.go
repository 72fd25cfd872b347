package workqueue_test

import (
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The probe changes with an enqueue (the scope row), with a row made
// claimable without one (a release), and with a lease that expired in a
// process that stopped, so a worker whose wakes are all lost still finds
// each within a probe period.
func TestProbeSeesEnqueueReleaseAndExpiredLease(t *testing.T) {
	t.Parallel()
	// The lease must outlast the claim and the probe after it, however
	// slow the machine: that probe's value is the one expiry must change.
	const lease = 5 * time.Second
	f := newFixture(t, workqueue.Config{Lease: lease})
	classes, types := []string{"default"}, []string{"deliver"}
	c := f.claimer("prober")
	probe := func() uint64 {
		t.Helper()
		g, err := c.Probe(f.ctx, classes, types)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	base := probe()
	if probe() != base {
		t.Fatal("the probe changed with nothing done")
	}
	f.one(workqueue.Work{})
	afterEnqueue := probe()
	if afterEnqueue == base {
		t.Fatal("the probe did not change after an enqueue")
	}
	other := f.claimer("other")
	got := f.claim(other, workqueue.ClaimRequest{})
	if len(got) != 1 {
		t.Fatalf("claimed %d", len(got))
	}
	claimed := probe()
	if claimed == afterEnqueue {
		t.Fatal("the probe did not change when the only claimable row was claimed")
	}
	// The claimer stops; its lease expires.
	waitfor.Until(t, lease+time.Minute, func() (bool, error) { return probe() != claimed, nil },
		func() string { return "the probe never saw the expired lease" })
}
