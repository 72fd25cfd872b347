package workqueue_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// enqueuePaths are the two ways an enqueue writes its rows: "loads" as
// Enqueue is (SetLoadMinRows untouched: 0), "per-row" with every row
// inserted alone, as enqueue did before the loads.
var enqueuePaths = []enqueuePath{{"loads", 0}, {"per-row", math.MaxInt}}

type enqueuePath struct {
	name    string
	minRows int
}

// BenchmarkMaterialize400x10 enqueues seed 004's batch in one call: 400
// sources with 10 events each (each event's work item in its source's
// lane) and 400 per-event actions (no lane), 4,400 events and 4,400 work
// items. "loads" is Enqueue as it is (the batch's rows written by one load
// per table); "per-row" is the same batch with every row inserted alone, as
// enqueue did before. Each iteration writes into a fresh scope of one
// database. Reports ms/batch, statements/batch (internal/sqlcount) and
// events/s. "projected" is the batch as seed 004 has it: the source events'
// work is a source projection (Work.Projection), reduced in the batch to the
// newest event per source, so it writes 4,400 events and 800 work items
// (400 projection generations, 400 actions), with the loads.
func BenchmarkMaterialize400x10(b *testing.B) {
	paths := append(slices.Clip(enqueuePaths), enqueuePath{"projected", 0})
	for _, path := range paths {
		b.Run(path.name, func(b *testing.B) {
			_, _, dsn := queuetest.New(b, workqueue.Config{}, scope)
			qu, counter := queuetest.Counted(b, dsn, workqueue.Config{MaxEnqueueBatch: 5000})
			if path.minRows != 0 {
				defer workqueue.SetLoadMinRows(path.minRows)()
			}
			ctx := context.Background()
			var elapsed time.Duration
			var statements int64
			for i := range b.N {
				batchScope := fmt.Sprintf("materialize-%d", i)
				if err := qu.EnsureScope(ctx, batchScope, 1); err != nil {
					b.Fatal(err)
				}
				evs := materializeBatch(path.name == "projected")
				before := counter.Executed()
				began := time.Now()
				if _, err := qu.Enqueue(ctx, batchScope, evs); err != nil {
					b.Fatalf("enqueue: %v", err)
				}
				elapsed += time.Since(began)
				statements += counter.Executed() - before
			}
			perBatch := elapsed / time.Duration(b.N)
			b.ReportMetric(float64(perBatch.Microseconds())/1000, "ms/batch")
			b.ReportMetric(float64(statements)/float64(b.N), "statements/batch")
			b.ReportMetric(4400/perBatch.Seconds(), "events/s")
		})
	}
}

// materializeBatch is 400 sources x 10 events in source lanes (source
// projections when projected) and 400 actions without a lane.
func materializeBatch(projected bool) []workqueue.Event {
	evs := make([]workqueue.Event, 0, 4400)
	for s := range 400 {
		for e := range 10 {
			evs = append(evs, workqueue.Event{
				IdempotencyKey: fmt.Sprintf("source-%d/event-%d", s, e), EventKind: "changed",
				SourceKind: "record", SourceID: fmt.Sprint(s), DeliverySequence: int64(e), Payload: []byte(`{"field":"value"}`),
				Work: []workqueue.Work{{WorkType: "project", SourceLane: fmt.Sprintf("record/%d", s), Projection: projected}},
			})
		}
		evs = append(evs, workqueue.Event{
			IdempotencyKey: fmt.Sprintf("action-%d", s), EventKind: "action", Payload: []byte(`{}`),
			Work: []workqueue.Work{{WorkType: "act", QueueClass: "interactive"}},
		})
	}
	return evs
}

// BenchmarkEnqueueLaned20000 enqueues 20,000 items in lanes of five, 1,000
// events per call (one item each), as a producer feeding a backlog does:
// with the loads ("loads") and row by row ("per-row"). Reports items/s
// over the 20 calls.
func BenchmarkEnqueueLaned20000(b *testing.B) {
	const items, perCall, laneSize = 20000, 1000, 5
	for _, path := range enqueuePaths {
		b.Run(path.name, func(b *testing.B) {
			qu, _, _ := queuetest.New(b, workqueue.Config{}, scope)
			if path.minRows != 0 {
				defer workqueue.SetLoadMinRows(path.minRows)()
			}
			ctx := context.Background()
			var elapsed time.Duration
			for i := range b.N {
				batchScope := fmt.Sprintf("laned-%d", i)
				if err := qu.EnsureScope(ctx, batchScope, 1); err != nil {
					b.Fatal(err)
				}
				began := time.Now()
				for start := 0; start < items; start += perCall {
					evs := make([]workqueue.Event, 0, perCall)
					for n := start; n < start+perCall; n++ {
						evs = append(evs, workqueue.Event{
							IdempotencyKey: fmt.Sprintf("ev-%d", n), Payload: []byte("{}"),
							Work: []workqueue.Work{{WorkType: "deliver", SourceLane: fmt.Sprintf("lane-%d", n%(items/laneSize))}},
						})
					}
					if _, err := qu.Enqueue(ctx, batchScope, evs); err != nil {
						b.Fatalf("enqueue: %v", err)
					}
				}
				elapsed += time.Since(began)
			}
			b.ReportMetric(float64(items*b.N)/elapsed.Seconds(), "items/s")
		})
	}
}
