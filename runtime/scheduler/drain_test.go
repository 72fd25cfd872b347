package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

// schedSource puts a scheduler behind the controller, as the worker does,
// over an in-memory backend with nothing scheduled for later.
type schedSource struct{ s *scheduler.Scheduler[item] }

func (schedSource) Ready(context.Context) error     { return nil }
func (schedSource) Reconcile(context.Context) error { return nil }
func (x schedSource) Claim(ctx context.Context, t controller.Turn) (controller.ClaimBatch, error) {
	return x.s.ClaimTurn(ctx, t)
}
func (schedSource) NextWorkAt(context.Context) (time.Time, bool, error) {
	return time.Time{}, false, nil
}
func (schedSource) Generation(context.Context) (uint64, error) { return 0, nil }
func (x schedSource) Capacity(c bool) int                      { return x.s.Capacity(c) }

type drainResult struct {
	claims, calls, turns uint64 // shape claims, backend calls, claim turns
	maxConcurrentClaims  int64
}

// driven is a started scheduler behind a running controller, as the
// worker wires them.
type driven struct {
	s      *scheduler.Scheduler[item]
	ctrl   *controller.Controller
	cancel context.CancelFunc
	runErr chan error
}

// drive starts a 16-executor default-heavy scheduler over b (with lim, if
// not nil) and a controller without periodic reads; stop ends both.
func drive(tb testing.TB, b *fakeBackend, lim scheduler.Limiter) *driven {
	tb.Helper()
	d := &driven{runErr: make(chan error, 1)}
	var err error
	d.s, err = scheduler.New[item](b, scheduler.Config{
		Executors: 16, Profile: scheduler.ProfileDefaultHeavy, Limiter: lim, Logger: quiet,
		OnCapacityFreed: func() { d.ctrl.CapacityFreed() },
	})
	if err != nil {
		tb.Fatal(err)
	}
	d.ctrl, err = controller.New(schedSource{d.s}, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: -1, Logger: quiet})
	if err != nil {
		tb.Fatal(err)
	}
	var ctx context.Context
	ctx, d.cancel = context.WithCancel(context.Background())
	if err := d.s.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	go func() { d.runErr <- d.ctrl.Run(ctx) }()
	return d
}

func (d *driven) stop() {
	d.cancel()
	<-d.runErr
	d.s.Stop()
}

// drain runs n items of mixed classes through 16 default-heavy executors
// driven by a controller and returns what the claim side did.
func drain(tb testing.TB, n int) drainResult {
	tb.Helper()
	var items []item
	for i := range n {
		class := []string{"interactive", "default", "bulk", "bulk"}[i%4]
		items = append(items, item{id: i, class: class})
	}
	b := newFakeBackend(items...)
	b.onClaim = func([]scheduler.Request) { runtime.Gosched() } // widen any overlap window
	var done atomic.Int64
	all := make(chan struct{})
	b.handle = func(context.Context, item) error {
		runtime.Gosched()
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	}
	d := drive(tb, b, nil)
	select {
	case <-all:
	case err := <-d.runErr:
		tb.Fatalf("controller stopped: %v", err)
	case <-time.After(time.Minute):
		tb.Fatalf("drained %d of %d", done.Load(), n)
	}
	d.stop()
	st := d.s.Stats()
	return drainResult{claims: st.Claims, calls: uint64(b.calls.Load()), turns: st.ClaimTurns, maxConcurrentClaims: b.maxInClaim.Load()}
}

func TestSixteenExecutorsIssueOneClaimAtATime(t *testing.T) {
	r := drain(t, 5000)
	if r.maxConcurrentClaims != 1 {
		t.Fatalf("%d claims were in flight at once; want 1", r.maxConcurrentClaims)
	}
	// Batches, not one claim per item: with 16 slots the drain needs far
	// fewer backend calls than items.
	if r.calls >= 5000/2 {
		t.Fatalf("%d backend claim calls for 5000 items", r.calls)
	}
	if r.calls > r.turns || r.claims <= r.calls {
		t.Fatalf("%d backend calls for %d turns and %d shape claims: want at most one call per turn, serving several shapes", r.calls, r.turns, r.claims)
	}
	t.Logf("5000 items: %d claim turns, %d backend calls, %d shape claims", r.turns, r.calls, r.claims)
}

func BenchmarkSchedulerDrain16Executors(b *testing.B) {
	const items = 2000
	var last drainResult
	for b.Loop() {
		last = drain(b, items)
		if last.maxConcurrentClaims != 1 {
			b.Fatalf("%d concurrent claims", last.maxConcurrentClaims)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*items), "ns/item")
	b.ReportMetric(float64(last.calls)/items, "backend-calls/item")
	b.ReportMetric(float64(last.maxConcurrentClaims), "max-concurrent-claims")
}

// TestOverloadedPressureDoesNotSpin: claims the limiter denies for pressure
// end the turn; only the next event claims again.
func TestOverloadedPressureDoesNotSpin(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 10)...)
	var probes atomic.Int64
	lim, err := scheduler.NewBudgetLimiter(16, func(context.Context) scheduler.Pressure {
		probes.Add(1)
		return scheduler.PressureOverloaded
	})
	if err != nil {
		t.Fatal(err)
	}
	d := drive(t, b, lim)
	defer d.stop()
	ctx := context.Background()
	if err := d.ctrl.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	d.ctrl.Wake()
	if err := d.ctrl.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if st := d.s.Stats(); st.ClaimTurns != 2 || st.Claims != 0 || probes.Load() != 6 {
		t.Fatalf("turns %d claims %d probes %d: want 2 turns (start-up, wake), no claim, one probe per shape per turn",
			st.ClaimTurns, st.Claims, probes.Load())
	}
}

// failingBackend fails the claim of one shape with a proven no-commit read
// error after another shape already won items.
type failingBackend struct {
	*fakeBackend
	failShape string
}

func (f failingBackend) Claim(_ context.Context, reqs []scheduler.Request) []scheduler.ClaimResult[item] {
	return perRequest(reqs, func(req scheduler.Request) ([]item, error) {
		if req.Shape == f.failShape {
			return nil, fmt.Errorf("scan: connection refused: %w", controller.ErrSourceOperationNotCommitted)
		}
		return f.fakeBackend.claimOne(req)
	})
}

func TestReadErrorAfterItemsWereWonEndsTheTurnCleanly(t *testing.T) {
	b := failingBackend{fakeBackend: newFakeBackend(classItems("default", 0, 3)...), failShape: "shared"}
	s := startBackend(t, b, scheduler.Config{Executors: 8})
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil || batch.Started != 2 {
		t.Fatalf("batch %+v err %v: want the latency shape's 2 items and no error", batch, err)
	}
	waitFinished(t, b.fakeBackend, 2)
	// With nothing won, the same error goes up as a proven no-commit.
	s2 := startBackend(t, failingBackend{fakeBackend: newFakeBackend(), failShape: "latency"}, scheduler.Config{Executors: 8})
	if _, err := s2.ClaimTurn(context.Background(), controller.Turn{}); !errors.Is(err, controller.ErrSourceOperationNotCommitted) {
		t.Fatalf("error %v", err)
	}
}

// A shape whose claim failed stays hungry even when another shape's win
// swallowed the error: the turn asks for a continuation, which claims for it
// again, instead of leaving it to wait for an event.
func TestFailedShapeStaysHungryWhenTheTurnWonItems(t *testing.T) {
	fb := newFakeBackend(classItems("default", 0, 1)...) // the latency shape's claim comes back short
	b := &failOnceBackend{failingBackend: failingBackend{fakeBackend: fb, failShape: "shared"}}
	s := startBackend(t, b, scheduler.Config{Executors: 8})
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil || batch.Started != 1 || !batch.More {
		t.Fatalf("turn %+v, %v: want the one item, no error, and More for the failed shape", batch, err)
	}
	fb.mu.Lock()
	fb.queue = append(fb.queue, classItems("bulk", 100, 1)...)
	fb.mu.Unlock()
	next, err := s.ClaimTurn(context.Background(), controller.Turn{Continuation: true})
	if err != nil || next.Started != 1 {
		t.Fatalf("continuation %+v, %v: want the failed shape to claim again and win the bulk item", next, err)
	}
	waitFinished(t, fb, 2)
}

// failOnceBackend fails its shape's claim on the first call only.
type failOnceBackend struct {
	failingBackend
	calls atomic.Int64
}

func (f *failOnceBackend) Claim(ctx context.Context, reqs []scheduler.Request) []scheduler.ClaimResult[item] {
	if f.calls.Add(1) == 1 {
		return f.failingBackend.Claim(ctx, reqs)
	}
	return f.fakeBackend.Claim(ctx, reqs)
}
