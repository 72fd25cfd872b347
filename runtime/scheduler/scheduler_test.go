package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
)

type item struct {
	id    int
	class string
}

// fakeBackend is an in-memory queue: Claim takes the oldest items of the
// requested classes (preferred first), Handle runs a per-test function.
type fakeBackend struct {
	mu       sync.Mutex
	queue    []item
	requests []scheduler.Request
	outcomes map[int]error
	finished chan int

	inClaim, maxInClaim atomic.Int64
	calls               atomic.Int64                   // backend Claim calls
	onClaim             func(reqs []scheduler.Request) // once per backend call
	handle              func(ctx context.Context, it item) error
	renew               func(it item) error
	renewed             chan int
	hold                func(it item) error // nil: holds succeed
	held                chan int            // one per Hold call
	freed               chan struct{}       // one per slot or budget row released
	beforeFinish        func(it item)       // runs as Finish starts (may block it)
}

func newFakeBackend(items ...item) *fakeBackend {
	return &fakeBackend{queue: items, outcomes: map[int]error{}, finished: make(chan int, 100_000), renewed: make(chan int, 1000), held: make(chan int, 1000), freed: make(chan struct{}, 100_000)}
}

func classItems(class string, from, n int) []item {
	out := make([]item, n)
	for i := range out {
		out[i] = item{id: from + i, class: class}
	}
	return out
}

func (b *fakeBackend) Claim(_ context.Context, reqs []scheduler.Request) []scheduler.ClaimResult[item] {
	if n := b.inClaim.Add(1); n > b.maxInClaim.Load() {
		b.maxInClaim.Store(n)
	}
	defer b.inClaim.Add(-1)
	b.calls.Add(1)
	if b.onClaim != nil {
		b.onClaim(reqs)
	}
	return perRequest(reqs, b.claimOne)
}

// perRequest answers a turn's requests one at a time.
func perRequest(reqs []scheduler.Request, one func(scheduler.Request) ([]item, error)) []scheduler.ClaimResult[item] {
	out := make([]scheduler.ClaimResult[item], len(reqs))
	for i, req := range reqs {
		out[i].Items, out[i].Err = one(req)
	}
	return out
}

func (b *fakeBackend) claimOne(req scheduler.Request) ([]item, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.requests = append(b.requests, req)
	if req.StaleOnly {
		return nil, nil // this fake has no expired leases
	}
	var got []item
	take := func(classes []string) {
		for i := 0; i < len(b.queue) && len(got) < req.Max; {
			if slices.Contains(classes, b.queue[i].class) {
				got = append(got, b.queue[i])
				b.queue = slices.Delete(b.queue, i, i+1)
				continue
			}
			i++
		}
	}
	if len(req.Preferred) > 0 {
		take(req.Preferred)
	}
	take(req.QueueClasses)
	return got, nil
}

func (b *fakeBackend) Renew(_ context.Context, it item) error {
	b.renewed <- it.id
	if b.renew != nil {
		return b.renew(it)
	}
	return nil
}

func (b *fakeBackend) Hold(_ context.Context, it item) error {
	b.held <- it.id
	if b.hold != nil {
		return b.hold(it)
	}
	return nil
}

func (b *fakeBackend) Handle(ctx context.Context, it item) error {
	if b.handle != nil {
		return b.handle(ctx, it)
	}
	return nil
}

func (b *fakeBackend) Finish(_ context.Context, it item, outcome error) error {
	if b.beforeFinish != nil {
		b.beforeFinish(it)
	}
	b.mu.Lock()
	b.outcomes[it.id] = outcome
	b.mu.Unlock()
	b.finished <- it.id
	return nil
}

func (b *fakeBackend) finishedCount() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.outcomes)
}

func (b *fakeBackend) outcome(id int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.outcomes[id]
}

func (b *fakeBackend) Requests() []scheduler.Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.requests)
}

// waitCapacity waits until a fresh claim turn could start n items (free
// slots with budget), woken by every release (start wires OnCapacityFreed
// to b.freed).
func waitCapacity(t *testing.T, s *scheduler.Scheduler[item], b *fakeBackend, n int) {
	t.Helper()
	for s.Capacity(false) < n {
		select {
		case <-b.freed:
		case <-time.After(10 * time.Second):
			t.Fatalf("capacity %d, waiting for %d", s.Capacity(false), n)
		}
	}
}

func waitFinished(t *testing.T, b *fakeBackend, n int) []int {
	t.Helper()
	var ids []int
	for range n {
		select {
		case id := <-b.finished:
			ids = append(ids, id)
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of %d items finished", len(ids), n)
		}
	}
	return ids
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func start(t *testing.T, b *fakeBackend, cfg scheduler.Config) *scheduler.Scheduler[item] {
	t.Helper()
	if cfg.OnCapacityFreed == nil {
		cfg.OnCapacityFreed = func() { b.freed <- struct{}{} }
	}
	return startBackend(t, b, cfg)
}

// startBackend starts a quiet scheduler on backend, stopped at cleanup.
func startBackend(t *testing.T, backend scheduler.Backend[item], cfg scheduler.Config) *scheduler.Scheduler[item] {
	t.Helper()
	cfg.Logger = quiet
	s, err := scheduler.New[item](backend, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestProfiles(t *testing.T) {
	heavy, err := scheduler.Shapes(scheduler.ProfileDefaultHeavy, 16, scheduler.Classes{})
	if err != nil {
		t.Fatal(err)
	}
	all := []string{"interactive", "default", "bulk"}
	want := []scheduler.Shape{
		{Name: "latency", Executors: 4, QueueClasses: []string{"interactive", "default"}},
		{Name: "shared", Executors: 8, QueueClasses: all},
		{Name: "bulk-preferred", Executors: 4, QueueClasses: all, Preferred: []string{"bulk"}},
	}
	if diff := cmp.Diff(want, heavy); diff != "" {
		t.Fatalf("default-heavy (-want +got):\n%s", diff)
	}
	reserved, err := scheduler.Shapes(scheduler.ProfileReserved, 10, scheduler.Classes{})
	if err != nil {
		t.Fatal(err)
	}
	want = []scheduler.Shape{
		{Name: "latency", Executors: 2, QueueClasses: []string{"interactive", "default"}},
		{Name: "shared", Executors: 6, QueueClasses: all},
		{Name: "bulk", Executors: 2, QueueClasses: []string{"bulk"}},
	}
	if diff := cmp.Diff(want, reserved); diff != "" {
		t.Fatalf("reserved (-want +got):\n%s", diff)
	}
	small, err := scheduler.Shapes(scheduler.ProfileReserved, 3, scheduler.Classes{})
	if err != nil || len(small) != 1 || small[0].Executors != 3 {
		t.Fatalf("3 executors: %+v %v", small, err)
	}
	for _, bad := range []struct {
		p scheduler.Profile
		n int
		c scheduler.Classes
	}{
		{"fastest", 16, scheduler.Classes{}},
		{scheduler.ProfileReserved, 0, scheduler.Classes{}},
		{scheduler.ProfileReserved, 8, scheduler.Classes{Latency: []string{"bulk"}}},
	} {
		if _, err := scheduler.Shapes(bad.p, bad.n, bad.c); err == nil {
			t.Errorf("Shapes(%q, %d, %+v) accepted", bad.p, bad.n, bad.c)
		}
	}
}

// TestClaimReservesOnlyTheClaimingShapes: during a turn's claim each
// shape has exactly its request's slots reserved, a shape not claiming has
// none, and the budget holds exactly the requests. One backend call serves
// the turn.
func TestClaimReservesOnlyTheClaimingShapes(t *testing.T) {
	b := newFakeBackend() // nothing to win: every shape claims
	var s *scheduler.Scheduler[item]
	var violations []string
	var calls int
	lim, err := scheduler.NewBudgetLimiter(16, nil)
	if err != nil {
		t.Fatal(err)
	}
	b.onClaim = func(reqs []scheduler.Request) {
		calls++
		requested := map[string]int{}
		total := 0
		for _, r := range reqs {
			requested[r.Shape] += r.Max
			total += r.Max
		}
		if lim.Processing() != total {
			violations = append(violations, fmt.Sprintf("budget holds %d rows for requests of %d", lim.Processing(), total))
		}
		for name, free := range s.FreeSlots() {
			for _, sh := range s.Shapes() {
				if sh.Name == name && free != sh.Executors-requested[name] {
					violations = append(violations, fmt.Sprintf("shape %s has %d free slots for a request of %d", name, free, requested[name]))
				}
			}
		}
	}
	s = start(t, b, scheduler.Config{Executors: 16, Profile: scheduler.ProfileDefaultHeavy, Limiter: lim})
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if len(violations) > 0 {
		t.Fatal(violations)
	}
	if batch.Started != 0 || batch.More {
		t.Fatalf("batch %+v, want nothing started and no More", batch)
	}
	var got []string
	for _, r := range b.Requests() {
		got = append(got, fmt.Sprintf("%s/%d", r.Shape, r.Max))
	}
	if diff := cmp.Diff([]string{"latency/4", "shared/8", "bulk-preferred/4"}, got); diff != "" {
		t.Fatalf("requests (-want +got):\n%s", diff)
	}
	if calls != 1 {
		t.Fatalf("%d backend calls for one turn; want 1", calls)
	}
	if lim.Processing() != 0 {
		t.Fatalf("an empty turn kept %d rows of budget", lim.Processing())
	}
}

func TestPreferenceAndReservationByShape(t *testing.T) {
	// An old bulk backlog ahead of interactive work: latency-only executors
	// still take the interactive item; bulk-preferred ones take bulk.
	items := append(classItems("bulk", 0, 40), item{id: 100, class: "interactive"})
	b := newFakeBackend(items...)
	release := make(chan struct{})
	b.handle = func(ctx context.Context, _ item) error { <-release; return nil }
	s := start(t, b, scheduler.Config{Executors: 16, Profile: scheduler.ProfileDefaultHeavy})
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFinished(t, b, batch.Started)
	reqs := b.Requests()
	if reqs[0].Shape != "latency" || !slices.Equal(reqs[0].QueueClasses, []string{"interactive", "default"}) {
		t.Fatalf("first request %+v", reqs[0])
	}
	if reqs[2].Shape != "bulk-preferred" || !slices.Equal(reqs[2].Preferred, []string{"bulk"}) {
		t.Fatalf("third request %+v", reqs[2])
	}
	if batch.Started != 13 || !batch.More {
		t.Fatalf("batch %+v: want 1 latency + 8 shared + 4 bulk-preferred and More", batch)
	}
}

func TestLimiterBoundsProcessingRows(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 50)...)
	release := make(chan struct{})
	b.handle = func(ctx context.Context, _ item) error { <-release; return nil }
	s := start(t, b, scheduler.Config{Executors: 16, MaxProcessingRows: 5})
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if batch.Started != 5 {
		t.Fatalf("started %d with a budget of 5", batch.Started)
	}
	if c := s.Capacity(false); c != 0 {
		t.Fatalf("capacity %d with the budget spent", c)
	}
	if st := s.Stats(); st.LimiterDenials == 0 {
		t.Fatalf("no denial counted: %+v", st)
	}
	close(release)
	waitFinished(t, b, 5)
}

func TestDegradedPressureClaimsStaleOnly(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 10)...)
	lim, err := scheduler.NewBudgetLimiter(16, func(context.Context) scheduler.Pressure { return scheduler.PressureDegraded })
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, b, scheduler.Config{Executors: 16, Profile: scheduler.ProfileDefaultHeavy, Limiter: lim})
	for range 5 {
		batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
		if err != nil || batch.Started != 0 {
			t.Fatalf("batch %+v err %v under stale-only pressure", batch, err)
		}
	}
	for _, r := range b.Requests() {
		if !r.StaleOnly {
			t.Fatalf("fresh claim under degraded pressure: %+v", r)
		}
	}
	if lim.Processing() != 0 {
		t.Fatalf("unused stale-only grants kept %d rows of budget", lim.Processing())
	}
	over, _ := scheduler.NewBudgetLimiter(16, func(context.Context) scheduler.Pressure { return scheduler.PressureOverloaded })
	s2 := start(t, newFakeBackend(classItems("default", 0, 10)...), scheduler.Config{Limiter: over})
	if batch, err := s2.ClaimTurn(context.Background(), controller.Turn{}); err != nil || batch.Started != 0 {
		t.Fatalf("overloaded pressure claimed: %+v %v", batch, err)
	}
}

func TestContinuationClaimsOnlyHungryShapes(t *testing.T) {
	b := newFakeBackend(classItems("bulk", 0, 100)...)
	release := make(chan struct{})
	b.handle = func(ctx context.Context, _ item) error { <-release; return nil }
	s := start(t, b, scheduler.Config{Executors: 8, Profile: scheduler.ProfileReserved})
	first, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	// latency found nothing (not hungry); shared (4) and bulk (2) filled up.
	if first.Started != 6 || !first.More {
		t.Fatalf("first turn %+v", first)
	}
	if c := s.Capacity(true); c != 0 {
		t.Fatalf("continuation capacity %d: only the idle latency shape has slots and it is not hungry", c)
	}
	if c := s.Capacity(false); c != 2 {
		t.Fatalf("fresh capacity %d, want the latency shape's 2", c)
	}
	n := len(b.Requests())
	if batch, err := s.ClaimTurn(context.Background(), controller.Turn{Continuation: true}); err != nil || batch.Started != 0 || !batch.More {
		t.Fatalf("continuation %+v %v", batch, err)
	}
	if len(b.Requests()) != n {
		t.Fatal("a continuation claimed for a shape that did not ask for more")
	}
	close(release)
	waitFinished(t, b, 6)
}

func TestPanicIsRecoveredInTheSlot(t *testing.T) {
	b := newFakeBackend(item{id: 1, class: "default"}, item{id: 2, class: "default"})
	b.handle = func(ctx context.Context, it item) error {
		if it.id == 1 {
			panic("boom")
		}
		return nil
	}
	s := start(t, b, scheduler.Config{Executors: 1})
	for range 2 { // one slot: one item per turn
		if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
			t.Fatal(err)
		}
		waitFinished(t, b, 1)
		waitCapacity(t, s, b, 1)
	}
	var p *scheduler.PanicError
	if !errors.As(b.outcome(1), &p) || p.Value != "boom" {
		t.Fatalf("item 1 outcome %v, want a PanicError", b.outcome(1))
	}
	if b.outcome(2) != nil {
		t.Fatalf("item 2 outcome %v", b.outcome(2))
	}
	if st := s.Stats(); st.Panics != 1 || !s.Running() {
		t.Fatalf("stats %+v running %v", st, s.Running())
	}
	// The same slot keeps serving.
	b.mu.Lock()
	b.queue = append(b.queue, item{id: 3, class: "default"})
	b.mu.Unlock()
	if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
		t.Fatal(err)
	}
	waitFinished(t, b, 1)
}

func TestDeadlineCancelsAndAbandonsWedgedHandlers(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	b := newFakeBackend(item{id: 1, class: "default"}, item{id: 2, class: "default"}, item{id: 3, class: "default"})
	started := make(chan int, 3)
	unwedge := make(chan struct{})
	b.handle = func(ctx context.Context, it item) error {
		started <- it.id
		switch it.id {
		case 1: // respects its context
			<-ctx.Done()
			return ctx.Err()
		case 2: // wedged: ignores it, then says why it stopped
			<-unwedge
			return ctx.Err()
		}
		return nil
	}
	s := start(t, b, scheduler.Config{Executors: 1, MaxProcessingRows: 1, HandlerDeadline: time.Minute, AbandonAfter: 5 * time.Second, HeartbeatEvery: time.Hour, Clock: fc})
	claimOne := func() {
		if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
			t.Fatal(err)
		}
	}
	claimOne()
	<-started
	fc.Advance(time.Minute)
	waitFinished(t, b, 1)
	waitCapacity(t, s, b, 1)
	if err := b.outcome(1); !errors.Is(err, scheduler.ErrHandlerDeadline) {
		t.Fatalf("item 1 outcome %v", err)
	}
	claimOne()
	<-started
	fc.Advance(time.Minute)
	if !fc.WaitArmed(fc.Now().Add(5*time.Second), 10*time.Second) {
		t.Fatal("the slot never armed its abandon timer")
	}
	fc.Advance(5 * time.Second)
	// The slot is given back; the item is not: it is held until its
	// handler returns.
	waitCapacity(t, s, b, 1)
	if st := s.Stats(); st.Abandoned != 1 || st.AbandonedRunning != 1 {
		t.Fatalf("abandoned %d, running %d; want 1, 1", st.Abandoned, st.AbandonedRunning)
	}
	claimOne() // the slot took new work while item 2's handler is still wedged
	if id := <-started; id != 3 {
		t.Fatalf("started item %d, want 3", id)
	}
	if id := <-b.finished; id != 3 {
		t.Fatalf("item %d finished while item 2's handler is still wedged; want item 3", id)
	}
	if err := b.outcome(2); err != nil || b.finishedCount() != 2 {
		t.Fatalf("item 2 finished (%v) while its abandoned handler still runs", err)
	}
	close(unwedge)
	waitFinished(t, b, 1)
	if err := b.outcome(2); !errors.Is(err, scheduler.ErrHandlerDeadline) {
		t.Fatalf("item 2 outcome %v", err)
	}
	if st := s.Stats(); st.AbandonedRunning != 0 {
		t.Fatalf("%d abandoned handlers running after the last returned", st.AbandonedRunning)
	}
}

// TestHeartbeatToleratesFailedRenewalsWhileTheLeaseLasts: a renewal that
// fails with most of the lease left is retried soon, and the attempt goes
// on; a renewal that reports the item lost ends the attempt at once.
func TestHeartbeatToleratesFailedRenewalsWhileTheLeaseLasts(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	b := newFakeBackend(item{id: 1, class: "default"})
	started := make(chan struct{})
	var renewals atomic.Int32
	b.renew = func(item) error {
		switch renewals.Add(1) {
		case 2:
			return errors.New("lock wait timeout")
		case 4:
			return fmt.Errorf("work 1: %w", scheduler.ErrOwnershipLost)
		}
		return nil
	}
	b.handle = func(ctx context.Context, _ item) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	s := start(t, b, scheduler.Config{Executors: 1, HeartbeatEvery: 10 * time.Second, HandlerDeadline: time.Hour, Clock: fc})
	if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
		t.Fatal(err)
	}
	<-started
	// Renewal 1 at 10s succeeds, renewal 2 at 20s fails, its retry 2.5s
	// later (renewal 3) succeeds, renewal 4 at 32.5s says the item is lost.
	stepRenewals(t, fc, b, 10*time.Second, 10*time.Second, 2500*time.Millisecond, 10*time.Second)
	waitFinished(t, b, 1)
	if err := b.outcome(1); !errors.Is(err, scheduler.ErrLeaseRenewal) || !errors.Is(err, scheduler.ErrOwnershipLost) {
		t.Fatalf("outcome %v, want a lease-renewal failure carrying the lost ownership", err)
	}
	if st := s.Stats(); st.HeartbeatFailures != 2 {
		t.Fatalf("heartbeat failures %d, want 2", st.HeartbeatFailures)
	}
}

// stepRenewals advances the fake clock to each renewal in turn (steps apart),
// checking that the attempt is still running before each.
func stepRenewals(t *testing.T, fc *clock.Fake, b *fakeBackend, steps ...time.Duration) {
	t.Helper()
	for i, step := range steps {
		if !fc.WaitArmed(fc.Now().Add(step), 10*time.Second) {
			t.Fatalf("renewal %d was not armed %s ahead", i+1, step)
		}
		if n := b.finishedCount(); n != 0 {
			t.Fatalf("the attempt ended before renewal %d", i+1)
		}
		fc.Advance(step)
		select {
		case <-b.renewed:
		case <-time.After(10 * time.Second):
			t.Fatalf("renewal %d did not happen", i+1)
		}
	}
}

// TestHeartbeatGivesUpAfterTheGrace: renewals that keep failing end the
// attempt once RenewGrace has passed since the last success, not before.
func TestHeartbeatGivesUpAfterTheGrace(t *testing.T) {
	fc := clock.NewFake(time.Unix(0, 0))
	b := newFakeBackend(item{id: 1, class: "default"})
	started := make(chan struct{})
	b.renew = func(item) error { return errors.New("tidb unreachable") }
	b.handle = func(ctx context.Context, _ item) error {
		close(started)
		<-ctx.Done()
		return ctx.Err()
	}
	s := start(t, b, scheduler.Config{Executors: 1, HeartbeatEvery: 8 * time.Second, RenewGrace: 16 * time.Second, HandlerDeadline: time.Hour, Clock: fc})
	if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); err != nil {
		t.Fatal(err)
	}
	<-started
	// Failures at 8s, 10s, 12s, 14s are retried; the one at 16s is past the grace.
	stepRenewals(t, fc, b, 8*time.Second, 2*time.Second, 2*time.Second, 2*time.Second, 2*time.Second)
	waitFinished(t, b, 1)
	if err := b.outcome(1); !errors.Is(err, scheduler.ErrLeaseRenewal) {
		t.Fatalf("outcome %v", err)
	}
}

func TestStopFinishesRunningAttemptsWithShutdown(t *testing.T) {
	b := newFakeBackend(classItems("default", 0, 4)...)
	running := make(chan struct{}, 4)
	b.handle = func(ctx context.Context, _ item) error {
		running <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	s, err := scheduler.New[item](b, scheduler.Config{Executors: 4, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	batch, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil {
		t.Fatal(err)
	}
	if batch.Started != 3 { // latency 1 + shared 2; the bulk slot has no default work
		t.Fatalf("started %d", batch.Started)
	}
	for range batch.Started {
		<-running
	}
	s.Stop()
	waitFinished(t, b, 3)
	for id := range 3 {
		if !errors.Is(b.outcome(id), scheduler.ErrShutdown) {
			t.Fatalf("item %d outcome %v", id, b.outcome(id))
		}
	}
	if _, err := s.ClaimTurn(context.Background(), controller.Turn{}); !errors.Is(err, controller.ErrSourceOperationNotCommitted) {
		t.Fatalf("claim after stop: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	a := scheduler.Config{Executors: 16, Profile: scheduler.ProfileDefaultHeavy}
	if a.Fingerprint() != (scheduler.Config{Executors: 16, Profile: scheduler.ProfileDefaultHeavy, OnCapacityFreed: func() {}}).Fingerprint() {
		t.Fatal("a callback changed the fingerprint")
	}
	if a.Fingerprint() == (scheduler.Config{Executors: 8, Profile: scheduler.ProfileDefaultHeavy}).Fingerprint() {
		t.Fatal("executor count did not change the fingerprint")
	}
	if (scheduler.Config{}).Fingerprint() != (scheduler.Config{Executors: 4, Profile: scheduler.ProfileReserved}).Fingerprint() {
		t.Fatal("defaults and their explicit values differ")
	}
}

// contendedBackend wraps fakeBackend: its first claim comes back short with
// ErrContended, as a claim whose candidates another process took.
type contendedBackend struct {
	*fakeBackend
	calls atomic.Int64
}

func (c *contendedBackend) Claim(ctx context.Context, reqs []scheduler.Request) []scheduler.ClaimResult[item] {
	if c.calls.Add(1) == 1 {
		return perRequest(reqs, func(scheduler.Request) ([]item, error) { return nil, scheduler.ErrContended })
	}
	return c.fakeBackend.Claim(ctx, reqs)
}

// A contended short claim is not a failure and keeps its shape hungry, so
// the controller continues claiming; an ordinary short claim does not.
func TestContendedClaimKeepsTheShapeClaiming(t *testing.T) {
	fb := newFakeBackend(classItems("default", 0, 10)...)
	release := make(chan struct{})
	fb.handle = func(ctx context.Context, _ item) error { <-release; return nil }
	b := &contendedBackend{fakeBackend: fb}
	s := startBackend(t, b, scheduler.Config{Executors: 2})
	first, err := s.ClaimTurn(context.Background(), controller.Turn{})
	if err != nil || first.Started != 0 || !first.More {
		t.Fatalf("contended turn: %+v, %v; want no error, nothing started, More", first, err)
	}
	if st := s.Stats(); st.ContendedClaims != 1 {
		t.Fatalf("stats %+v", st)
	}
	next, err := s.ClaimTurn(context.Background(), controller.Turn{Continuation: true})
	if err != nil || next.Started != 2 {
		t.Fatalf("continuation after contention: %+v, %v; want both slots filled", next, err)
	}
	close(release)
	waitFinished(t, fb, 2)
}
