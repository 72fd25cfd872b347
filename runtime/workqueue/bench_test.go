package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/naivedb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Benchmarks run on whatever TiDB tidbtest finds; `make bench` runs them on
// the embedded server. Figures are items per second (higher is better) and
// claim latency percentiles; laneq and the naive loop run in the same binary
// on the same server, so their ratio holds on a noisy machine.

var benchScopes atomic.Int64

// prefill enqueues n lane-less items into a fresh scope and returns it.
func prefill(b *testing.B, qu *workqueue.Queue, n int) string {
	b.Helper()
	ctx := context.Background()
	scopeID := fmt.Sprintf("bench-%d", benchScopes.Add(1))
	if err := qu.EnsureScope(ctx, scopeID, 1); err != nil {
		b.Fatal(err)
	}
	const batch = 1000
	for start := 0; start < n; start += batch {
		events := make([]workqueue.Event, 0, batch)
		for i := start; i < min(start+batch, n); i++ {
			events = append(events, workqueue.Event{
				IdempotencyKey: fmt.Sprintf("e-%d", i),
				Payload:        []byte("{}"),
				Work:           []workqueue.Work{{WorkType: "deliver"}},
			})
		}
		if _, err := qu.Enqueue(ctx, scopeID, events); err != nil {
			b.Fatal(err)
		}
	}
	return scopeID
}

var benchRequest = workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 1}

// BenchmarkClaimComplete drains b.N items with 1, 4 and 16 executors.
//
// laneq runs in its designed shape: one Claimer per scope per process, whose
// single claim loop claims a batch for however many executor slots are free
// and hands the items to the executors, which complete them. The naive loop
// runs one SELECT ... LIMIT 1 FOR UPDATE transaction per executor.
func BenchmarkClaimComplete(b *testing.B) {
	db := tidbtest.NewDB(b)
	db.SetMaxOpenConns(64)
	db.SetMaxIdleConns(64)
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, executors := range []int{1, 4, 16} {
		b.Run(fmt.Sprintf("laneq/executors=%d", executors), func(b *testing.B) {
			scopeID := prefill(b, qu, b.N)
			c, err := qu.NewClaimer(scopeID, "bench", workqueue.ClaimerConfig{})
			if err != nil {
				b.Fatal(err)
			}
			dispatch(b, qu, c, executors)
		})
		b.Run(fmt.Sprintf("naive/executors=%d", executors), func(b *testing.B) {
			scopeID := prefill(b, qu, b.N)
			drain(b, executors, func(ctx context.Context, _ int) (bool, error) {
				return queuetest.NaiveClaimComplete(ctx, db, scopeID)
			})
		})
	}
}

// dispatch is the claim loop of one process: it waits for a free executor
// slot, claims as many items as slots are free in one scan, and hands them
// out; executors complete them and free their slots.
func dispatch(b *testing.B, qu *workqueue.Queue, c *workqueue.Claimer, executors int) {
	b.Helper()
	ctx := context.Background()
	work := make(chan workqueue.Claimed, executors)
	free := make(chan struct{}, executors)
	for range executors {
		free <- struct{}{}
	}
	errs := make(chan error, b.N+1)
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for range executors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range work {
				if _, err := qu.Complete(ctx, it.Lease); err != nil {
					errs <- err
				}
				free <- struct{}{}
			}
		}()
	}
	claimed, empty := 0, 0
	for claimed < b.N && empty < 100 {
		<-free
		slots := 1
		for more := true; more; {
			select {
			case <-free:
				slots++
			default:
				more = false
			}
		}
		req := benchRequest
		req.Max = min(slots, b.N-claimed)
		got, _, err := c.Claim(ctx, req)
		if err != nil {
			errs <- err
			break
		}
		if len(got) == 0 {
			empty++
		}
		for range slots - len(got) {
			free <- struct{}{}
		}
		for _, it := range got {
			work <- it
		}
		claimed += len(got)
	}
	close(work)
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if claimed != b.N {
		b.Fatalf("claimed %d of %d items", claimed, b.N)
	}
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "items/s")
}

// drain runs executors goroutines until b.N items were claimed and completed.
func drain(b *testing.B, executors int, step func(ctx context.Context, executor int) (bool, error)) {
	b.Helper()
	ctx := context.Background()
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, executors)
	b.ResetTimer()
	began := time.Now()
	for w := range executors {
		wg.Add(1)
		go func() {
			defer wg.Done()
			idle := 0
			for done.Load() < int64(b.N) {
				ok, err := step(ctx, w)
				if err != nil {
					errs <- err
					return
				}
				if ok {
					done.Add(1)
					idle = 0
					continue
				}
				// Nothing claimable for this executor right now: others hold
				// the remaining items. Stop once the scope has been empty
				// for a while (the others finish the rest).
				if idle++; idle > 200 {
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if got := done.Load(); got != int64(b.N) {
		b.Fatalf("drained %d of %d items", got, b.N)
	}
	b.ReportMetric(float64(b.N)/time.Since(began).Seconds(), "items/s")
}

// BenchmarkChurn is the MVCC-churn proof. 20,000 items flow through the claim
// path of one scope in steady state: a backlog of 2,000 is kept by enqueueing
// as items are claimed and completed, so the only thing that grows is the
// number of MVCC delete markers every claim leaves in the claim index (until
// GC, 10 minutes). Claim latency p50/p99 is reported per window of 2,000
// claims; the last window's p50 must stay within 2x of the first's.
// Afterwards, on the same churned table, it times laneq's scan from its floor,
// laneq's scan from the front of the range (what a reconciliation rescan
// pays) and the naive SELECT ... LIMIT 1 FOR UPDATE, 200 times each.
//
// Run with -benchtime=1x: one flow is the measurement.
func BenchmarkChurn(b *testing.B) {
	const flow, window, backlog, refill = 20000, 2000, 2000, 100
	db := tidbtest.NewDB(b)
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for range b.N {
		scopeID := prefill(b, qu, backlog)
		enqueued := backlog
		c, err := qu.NewClaimer(scopeID, "churn", workqueue.ClaimerConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		var firstP50, lastP50 time.Duration
		lat := make([]time.Duration, 0, window)
		for i := range flow {
			if i%refill == 0 { // keep the backlog constant
				events := make([]workqueue.Event, refill)
				for j := range events {
					events[j] = workqueue.Event{IdempotencyKey: fmt.Sprintf("e-%d", enqueued), Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}}
					enqueued++
				}
				b.StopTimer()
				if _, err := qu.Enqueue(ctx, scopeID, events); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			t0 := time.Now()
			got, _, err := c.Claim(ctx, benchRequest)
			lat = append(lat, time.Since(t0))
			if err != nil || len(got) != 1 {
				b.Fatalf("claim %d: %v (%d items)", i, err, len(got))
			}
			if _, err := qu.Complete(ctx, got[0].Lease); err != nil {
				b.Fatal(err)
			}
			if len(lat) == window {
				p50, p99 := queuetest.Percentile(lat, 50), queuetest.Percentile(lat, 99)
				b.Logf("window %2d (claims %5d-%5d): claim p50 %-9s p99 %s", i/window, i+1-window, i, p50.Round(time.Microsecond), p99.Round(time.Microsecond))
				if i < window {
					firstP50 = p50
				}
				lastP50 = p50
				lat = lat[:0]
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(firstP50.Microseconds()), "first-p50-µs")
		b.ReportMetric(float64(lastP50.Microseconds()), "last-p50-µs")
		if lastP50 > 2*firstP50 {
			b.Errorf("claim p50 grew from %s to %s over %d claims: the claim scan is not churn-proof", firstP50, lastP50, flow)
		}

		// The same churned table, scans only (no claims), 200 times each.
		q := gen.New(db)
		floored, ok := c.Floor("default")
		if !ok {
			b.Fatal("the claimer has no floor after the flow")
		}
		var dbNow time.Time
		if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&dbNow); err != nil {
			b.Fatal(err)
		}
		// scan reads candidates as a Claimer does: from its floor (less the
		// straggler window), or from the front of the range (what a
		// reconciliation rescan pays), up to now.
		scan := func(from time.Time) error {
			rows, err := q.ClaimCandidates(ctx, gen.ClaimCandidatesParams{ScopeID: scopeID, Generation: 1, QueueClass: "default",
				FromTime: from, UntilTime: dbNow, WorkTypes: []string{"deliver"}, Limit: 1})
			if err == nil && len(rows) == 0 {
				err = errors.New("no candidate found")
			}
			return err
		}
		naive := func() error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer tx.Rollback()
			_, err = naivedb.New(tx).NaiveClaimNext(ctx, naivedb.NaiveClaimNextParams{ScopeID: scopeID, Generation: 1})
			return err
		}
		for _, m := range []struct {
			name string
			run  func() error
		}{
			{"laneq scan from its floor", func() error { return scan(floored.Add(-2 * time.Second)) }},
			{"laneq rescan from the front", func() error { return scan(time.Unix(0, 0)) }},
			{"naive SELECT ... LIMIT 1 FOR UPDATE", naive},
		} {
			var ds []time.Duration
			for range 200 {
				t0 := time.Now()
				if err := m.run(); err != nil {
					b.Fatalf("%s: %v", m.name, err)
				}
				ds = append(ds, time.Since(t0))
			}
			b.Logf("after %d claims, %-36s p50 %-9s p99 %s", flow, m.name, queuetest.Percentile(ds, 50).Round(time.Microsecond), queuetest.Percentile(ds, 99).Round(time.Microsecond))
		}
	}
}
