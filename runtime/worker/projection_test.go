package worker_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A source projection through the assembled worker: a handler's
// Job.Input is the generation's whole input; events enqueued while it runs
// (the handler held at a barrier) run as one successor after it, with only
// the events the first run did not have.
func TestWorkerRunsProjectionGenerations(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	event := func(n int) workqueue.Event {
		return workqueue.Event{
			IdempotencyKey: fmt.Sprintf("p%d", n), RouteID: "r", RouteVersion: 1, EventKind: "state",
			SourceKind: "crm", SourceID: "acct-1", Payload: []byte(fmt.Sprint(n)),
			Work: []workqueue.Work{{WorkType: "project", SourceLane: "acct-1", Projection: true}},
		}
	}
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{event(1), event(2), event(3)}); err != nil {
		t.Fatal(err)
	}
	runs := make(chan []string, 2)
	release := make(chan struct{})
	first := true
	h := func(ctx context.Context, job *worker.Job) error {
		in, err := job.Input(ctx)
		if err != nil {
			return err
		}
		var keys []string
		for _, e := range in {
			keys = append(keys, e.IdempotencyKey)
		}
		runs <- keys
		if first { // one executor: runs are sequential
			first = false
			<-release
		}
		return nil
	}
	w, err := worker.New(f.qu, quietCfg(1), map[string]worker.Handler{"project": h})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	if diff := cmp.Diff([]string{"p1", "p2", "p3"}, <-runs); diff != "" {
		t.Fatalf("first run's input (-want +got):\n%s", diff)
	}
	// The first generation is running: these collapse into one successor.
	var successor int64
	for n := 4; n <= 6; n++ {
		res, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{event(n)})
		if err != nil {
			t.Fatal(err)
		}
		if got := res[0].Work[0].Projection; got != workqueue.ProjectionQueued && got != workqueue.ProjectionReplaced {
			t.Fatalf("event p%d while the generation runs: %s, want queued or replaced", n, got)
		}
		successor = res[0].Work[0].WorkID
	}
	close(release)
	if diff := cmp.Diff([]string{"p4", "p5", "p6"}, <-runs); diff != "" {
		t.Fatalf("successor's input (-want +got):\n%s", diff)
	}
	f.waitForState(successor, workqueue.StateCompleted)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := f.states(); got[workqueue.StateCompleted] != 2 || len(got) != 1 {
		t.Fatalf("states %v, want two completed generations and nothing else", got)
	}
}
