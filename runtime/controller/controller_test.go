package controller_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
)

var epoch = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

const (
	probeEvery     = 15 * time.Second
	reconcileEvery = time.Hour
)

type harness struct {
	t     *testing.T
	clock *clock.Fake
	src   *countingSource
	ctrl  *controller.Controller
	done  chan error
	stop  context.CancelFunc
}

// newHarness builds a controller over a counting source on a fake clock;
// tweak adjusts the source before Run starts.
func newHarness(t *testing.T, cfg controller.Config, tweak func(*countingSource)) *harness {
	t.Helper()
	return newHarnessOf(t, cfg, tweak, func(s *countingSource) controller.Source { return s })
}

// newHarnessOf is newHarness for a source that wraps the counting one (to
// add an optional interface such as Maintainer).
func newHarnessOf(t *testing.T, cfg controller.Config, tweak func(*countingSource), wrap func(*countingSource) controller.Source) *harness {
	t.Helper()
	fc := clock.NewFake(epoch)
	src := newCountingSource(fc)
	if tweak != nil {
		tweak(src)
	}
	cfg.Clock = fc
	if cfg.GenerationProbeEvery == 0 {
		cfg.GenerationProbeEvery = probeEvery
	}
	if cfg.ReconcileEvery == 0 {
		cfg.ReconcileEvery = reconcileEvery
	}
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	ctrl, err := controller.New(wrap(src), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{t: t, clock: fc, src: src, ctrl: ctrl}
}

func (h *harness) run() {
	ctx, cancel := context.WithCancel(context.Background())
	h.stop = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.ctrl.Run(ctx) }()
	h.t.Cleanup(func() {
		cancel()
		<-h.done
	})
}

// settle waits until the controller handled everything sent so far.
func (h *harness) settle() {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.ctrl.Settle(ctx); err != nil {
		h.t.Fatalf("settle: %v", err)
	}
}

// advance moves the fake clock in steps, settling after each.
func (h *harness) advance(total, step time.Duration) {
	h.t.Helper()
	for d := time.Duration(0); d < total; d += step {
		h.clock.Advance(step)
		h.settle()
	}
}

func (h *harness) wantCounts(want map[string]int) {
	h.t.Helper()
	if diff := cmp.Diff(want, h.src.Counts()); diff != "" {
		h.t.Fatalf("source calls (-want +got):\n%s", diff)
	}
}

// runErr waits for Run to return.
func (h *harness) runErr() error {
	h.t.Helper()
	select {
	case err := <-h.done:
		h.done <- err // keep it for Cleanup
		return err
	case <-time.After(10 * time.Second):
		h.t.Fatal("Run did not return")
		return nil
	}
}

var startup = map[string]int{"ready": 1, "generation": 1, "reconcile": 1, "claim": 1, "next_work_at": 1}

func TestStartupReadsExactlyOnce(t *testing.T) {
	h := newHarness(t, controller.Config{}, nil)
	h.run()
	h.settle()
	h.wantCounts(startup)
	if diff := cmp.Diff([]string{"ready", "generation", "reconcile", "claim", "next_work_at"}, h.src.Calls()); diff != "" {
		t.Fatalf("start-up order (-want +got):\n%s", diff)
	}
}

func TestIdleControllerMakesNoSourceReads(t *testing.T) {
	// Probing off, backstop at one hour: 59 idle minutes read nothing.
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1}, nil)
	h.run()
	h.settle()
	before := h.src.Counts()
	h.advance(59*time.Minute, time.Minute)
	h.wantCounts(before)
	// Only the backstop itself reads, once, with one claim pass.
	h.advance(time.Minute, time.Minute)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 2, "claim": 2, "next_work_at": 2})
}

func TestUnchangedGenerationProbesOnlyProbe(t *testing.T) {
	h := newHarness(t, controller.Config{}, nil)
	h.run()
	h.settle()
	h.advance(10*probeEvery, probeEvery)
	want := map[string]int{"ready": 1, "generation": 11, "reconcile": 1, "claim": 1, "next_work_at": 1}
	h.wantCounts(want)
	if st := h.ctrl.Stats(); st.GenerationProbes != 11 || st.GenerationChanges != 0 {
		t.Fatalf("stats %+v", st)
	}
	// A changed generation makes exactly one claim pass.
	h.src.SetGeneration(7)
	h.advance(probeEvery, probeEvery)
	want["generation"], want["claim"], want["next_work_at"] = 12, 2, 2
	h.wantCounts(want)
}

func TestWakeStormWhileClaimBlockedQueuesOneWake(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	h := newHarness(t, controller.Config{}, func(s *countingSource) {
		s.onClaim = func(_ context.Context, n int) {
			if n == 1 {
				close(entered)
				<-release
			}
		}
	})
	h.run()
	<-entered
	for range 100_000 {
		h.ctrl.Wake()
	}
	close(release)
	h.settle()
	st := h.ctrl.Stats()
	if st.WakesQueued != 1 || st.WakeCoalescings != 1 {
		t.Fatalf("wakes queued %d, coalescings %d, want 1 and 1", st.WakesQueued, st.WakeCoalescings)
	}
	h.wantCounts(map[string]int{"ready": 1, "generation": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
}

func TestExactDueTimerClaimsOnceAtTheDueTime(t *testing.T) {
	var h *harness
	h = newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.nextWorkAt = func(n int) (time.Time, bool, error) {
			if n == 1 {
				return epoch.Add(time.Hour - time.Second), true, nil
			}
			return time.Time{}, false, nil
		}
	})
	h.run()
	h.settle()
	h.advance(time.Hour-2*time.Second, time.Minute-time.Second/30) // stops short of the due time
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
	h.clock.Advance(time.Second)
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
	if st := h.ctrl.Stats(); st.DueTimerFires != 1 {
		t.Fatalf("due fires %d, want 1", st.DueTimerFires)
	}
}

func TestOverdueNextWorkIsSuppressedNotLooped(t *testing.T) {
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: 10 * time.Minute}, func(s *countingSource) {
		s.nextWorkAt = func(int) (time.Time, bool, error) { return epoch.Add(-time.Hour), true, nil }
	})
	h.run()
	h.settle()
	h.advance(9*time.Minute, 10*time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
	if st := h.ctrl.Stats(); st.OverdueSuppressions != 1 {
		t.Fatalf("overdue suppressions %d, want 1", st.OverdueSuppressions)
	}
	// The backstop is the bounded recovery: one reconcile, one claim pass.
	h.advance(time.Minute, 10*time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 2, "claim": 2, "next_work_at": 2})
}

// TestDueTimePassedWhileLookingUpStillFires is the busy-machine case: the
// next due time was in the future when the lookup began (20ms away), but by
// the time the lookup returned the machine had let it pass. That is not an
// overdue contradiction: the timer fires at once and the due item is
// claimed, with no backstop, probe or wake.
func TestDueTimePassedWhileLookingUpStillFires(t *testing.T) {
	var h *harness
	h = newHarness(t, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: -1}, func(s *countingSource) {
		s.nextWorkAt = func(n int) (time.Time, bool, error) {
			if n > 1 {
				return time.Time{}, false, nil
			}
			at := h.clock.Now().Add(20 * time.Millisecond)
			h.clock.Advance(50 * time.Millisecond) // scheduling latency on a loaded machine
			return at, true, nil
		}
	})
	h.run()
	h.settle()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
	if st := h.ctrl.Stats(); st.DueTimerFires != 1 || st.OverdueSuppressions != 0 {
		t.Fatalf("due fires %d, overdue suppressions %d; want 1 and 0", st.DueTimerFires, st.OverdueSuppressions)
	}
}

// TestDueTimePassingDuringAClaimIsNotLost: the due timer was armed; a claim
// for another reason runs across the due time, and the lookup after it only
// sees the future. The controller claims once more instead of dropping the
// fire it stopped.
func TestDueTimePassingDuringAClaimIsNotLost(t *testing.T) {
	var h *harness
	h = newHarness(t, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: -1}, func(s *countingSource) {
		s.nextWorkAt = func(n int) (time.Time, bool, error) {
			if n == 1 {
				return epoch.Add(time.Second), true, nil
			}
			return time.Time{}, false, nil
		}
		s.onClaim = func(_ context.Context, n int) {
			if n == 2 {
				h.clock.Advance(2 * time.Second) // the claim outlasts the due time
			}
		}
	})
	h.run()
	h.settle()
	h.ctrl.Wake()
	h.settle()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 3})
	if st := h.ctrl.Stats(); st.DueTimerFires != 1 {
		t.Fatalf("due fires %d, want 1", st.DueTimerFires)
	}
}

// TestEveryScheduledTimeFires: two retries scheduled 100ms apart each get
// a claim turn at their own time, even when the lookups after the first
// turn report nothing (the second came due while that turn ran, and a
// lookup sees only the future).
func TestEveryScheduledTimeFires(t *testing.T) {
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: -1}, nil)
	h.run()
	h.settle()
	h.ctrl.NotifyDue(epoch.Add(time.Second))
	h.ctrl.NotifyDue(epoch.Add(1100 * time.Millisecond))
	h.settle()
	h.clock.Advance(time.Second)
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
	h.clock.Advance(100 * time.Millisecond)
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 3})
	if st := h.ctrl.Stats(); st.DueTimerFires != 2 {
		t.Fatalf("due fires %d, want 2", st.DueTimerFires)
	}
}

func TestTerminalNonEmptyBatchRefreshesTimerAndCompletionDoesNotClaim(t *testing.T) {
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.claim = func(n int, _ controller.Turn) (controller.ClaimBatch, error) {
			if n == 1 {
				return controller.ClaimBatch{Started: 3}, nil
			}
			return controller.ClaimBatch{}, nil
		}
		s.nextWorkAt = func(n int) (time.Time, bool, error) {
			if n == 1 {
				return epoch.Add(50 * time.Minute), true, nil
			}
			return time.Time{}, false, nil
		}
	})
	h.run()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
	for range 3 {
		h.ctrl.CapacityFreed() // the three attempts complete
	}
	h.settle()
	h.advance(49*time.Minute, time.Minute)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
	h.advance(time.Minute, time.Minute)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
}

func TestMoreContinuesOnlyWithCapacity(t *testing.T) {
	var turns []controller.Turn
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			turns = append(turns, turn)
			switch n {
			case 1:
				return controller.ClaimBatch{Started: 16, More: true}, nil
			case 2:
				return controller.ClaimBatch{Started: 4, More: true}, nil
			}
			return controller.ClaimBatch{Started: 1}, nil
		}
	})
	h.src.SetCapacity(16)
	h.src.onClaim = func(_ context.Context, n int) {
		if n == 1 {
			h.src.SetCapacity(0) // every slot busy after the first batch
		}
	}
	h.run()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1})
	// A slot frees: the pending More continues.
	h.src.SetCapacity(4)
	h.ctrl.CapacityFreed()
	h.settle()
	h.src.SetCapacity(1)
	h.ctrl.CapacityFreed()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 1})
	want := []controller.Turn{{Continuation: false}, {Continuation: true}, {Continuation: true}}
	if diff := cmp.Diff(want, turns); diff != "" {
		t.Fatalf("turns (-want +got):\n%s", diff)
	}
	// No More pending: freed capacity reads nothing.
	h.ctrl.CapacityFreed()
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 1})
}

func TestQueuedReconcileRunsBeforeTheNextClaim(t *testing.T) {
	var h *harness
	h = newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.claim = func(n int, _ controller.Turn) (controller.ClaimBatch, error) {
			return controller.ClaimBatch{Started: 1, More: n == 2}, nil
		}
	})
	h.src.onClaim = func(_ context.Context, n int) {
		if n == 2 {
			h.ctrl.RequestReconcile()
			h.ctrl.Wake()
		}
	}
	h.run()
	h.settle()
	h.ctrl.Wake()
	h.settle()
	want := []string{"ready", "reconcile", "claim", "next_work_at", "claim", "reconcile", "claim", "next_work_at"}
	if diff := cmp.Diff(want, h.src.Calls()); diff != "" {
		t.Fatalf("call order (-want +got):\n%s", diff)
	}
}

func TestNotifyDueArmsEarlierTimer(t *testing.T) {
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.nextWorkAt = func(n int) (time.Time, bool, error) {
			if n == 1 {
				return epoch.Add(time.Hour), true, nil
			}
			return time.Time{}, false, nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.NotifyDue(epoch.Add(10 * time.Second))
	h.ctrl.NotifyDue(epoch.Add(20 * time.Minute)) // later: ignored
	h.settle()
	h.advance(9*time.Second, time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
	h.advance(time.Second, time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2})
	// A due time already past is a wake.
	h.ctrl.NotifyDue(epoch)
	h.settle()
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 3})
}

func TestMutatingErrorsFailClosed(t *testing.T) {
	notCommitted := func(msg string) error {
		return errors.Join(errors.New(msg), controller.ErrSourceOperationNotCommitted)
	}
	cases := []struct {
		name         string
		tweak        func(*countingSource)
		wantUsable   bool
		wantErrMatch error
	}{
		{"claim unknown outcome", func(s *countingSource) {
			s.claim = func(int, controller.Turn) (controller.ClaimBatch, error) {
				return controller.ClaimBatch{}, errors.New("connection reset during CAS")
			}
		}, false, controller.ErrUnusable},
		{"claim proven not committed", func(s *countingSource) {
			s.claim = func(int, controller.Turn) (controller.ClaimBatch, error) {
				return controller.ClaimBatch{}, notCommitted("scan failed before any write")
			}
		}, true, controller.ErrSourceOperationNotCommitted},
		{"claim marker contradicted by started attempts", func(s *countingSource) {
			s.claim = func(int, controller.Turn) (controller.ClaimBatch, error) {
				return controller.ClaimBatch{Started: 2}, notCommitted("read-back failed")
			}
		}, false, controller.ErrUnusable},
		{"claim cancelled is not proof", func(s *countingSource) {
			s.claim = func(int, controller.Turn) (controller.ClaimBatch, error) {
				return controller.ClaimBatch{}, context.Canceled
			}
		}, false, controller.ErrUnusable},
		{"reconcile unknown outcome", func(s *countingSource) {
			s.reconcile = func(int) error { return errors.New("commit lost") }
		}, false, controller.ErrUnusable},
		{"reconcile proven not committed", func(s *countingSource) {
			s.reconcile = func(int) error { return notCommitted("rolled back") }
		}, true, controller.ErrSourceOperationNotCommitted},
		{"claim that only leased", func(s *countingSource) {
			s.claim = func(int, controller.Turn) (controller.ClaimBatch, error) {
				return controller.ClaimBatch{Started: 2}, errors.Join(errors.New("route failed after the claim"), controller.ErrSourceOperationRecoverable)
			}
		}, true, controller.ErrSourceOperationRecoverable},
		{"reconcile cancelled is not proof", func(s *countingSource) {
			s.reconcile = func(int) error { return context.DeadlineExceeded }
		}, false, controller.ErrUnusable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, controller.Config{}, tc.tweak)
			h.run()
			err := h.runErr()
			if !errors.Is(err, tc.wantErrMatch) {
				t.Fatalf("Run error %v, want %v", err, tc.wantErrMatch)
			}
			if h.ctrl.Usable() != tc.wantUsable {
				t.Fatalf("Usable() = %v, want %v", h.ctrl.Usable(), tc.wantUsable)
			}
			again := h.ctrl.Run(context.Background())
			if !tc.wantUsable && !errors.Is(again, controller.ErrUnusable) {
				t.Fatalf("second Run error %v, want ErrUnusable", again)
			}
		})
	}
}

func TestRuntimeReconcileFailureAfterStartupFailsClosed(t *testing.T) {
	h := newHarness(t, controller.Config{GenerationProbeEvery: -1}, func(s *countingSource) {
		s.reconcile = func(n int) error {
			if n == 2 {
				return errors.New("unknown")
			}
			return nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.RequestReconcile()
	if err := h.runErr(); !errors.Is(err, controller.ErrUnusable) {
		t.Fatalf("Run error %v", err)
	}
	if h.src.Count("claim") != 1 {
		t.Fatalf("claimed after a failed reconcile: %d claims", h.src.Count("claim"))
	}
}

func TestCancellationWhileIdleKeepsControllerUsable(t *testing.T) {
	h := newHarness(t, controller.Config{}, nil)
	h.run()
	h.settle()
	h.stop()
	if err := h.runErr(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run error %v", err)
	}
	if !h.ctrl.Usable() {
		t.Fatal("idle cancellation made the controller unusable")
	}
}

func TestConfigValidation(t *testing.T) {
	src := newCountingSource(clock.NewFake(epoch))
	if _, err := controller.New(src, controller.Config{GenerationProbeEvery: time.Millisecond}); err == nil {
		t.Fatal("a 1ms probe period was accepted")
	}
	if _, err := controller.New(nil, controller.Config{}); err == nil {
		t.Fatal("a nil source was accepted")
	}
}

func TestCoalescedSignalsDoNotAllocate(t *testing.T) {
	h := newHarness(t, controller.Config{}, nil)
	h.ctrl.Wake()
	h.ctrl.RequestReconcile()
	if n := testing.AllocsPerRun(10_000, func() {
		h.ctrl.Wake()
		h.ctrl.RequestReconcile()
	}); n != 0 {
		t.Fatalf("coalesced wake+reconcile pair allocates %v times", n)
	}
}

func BenchmarkCoalescedWake(b *testing.B) {
	ctrl := idleController(b)
	ctrl.Wake()
	b.ReportAllocs()
	for b.Loop() {
		ctrl.Wake()
	}
}

// BenchmarkCoalescedWakeParallel is the wake storm: every goroutine wakes
// a controller whose wake is already pending, which must stay a load of a
// shared cache line, never a write to it.
func BenchmarkCoalescedWakeParallel(b *testing.B) {
	ctrl := idleController(b)
	ctrl.Wake()
	ctrl.Wake()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			ctrl.Wake()
		}
	})
}

func BenchmarkCoalescedReconcileSignal(b *testing.B) {
	ctrl := idleController(b)
	ctrl.RequestReconcile()
	b.ReportAllocs()
	for b.Loop() {
		ctrl.RequestReconcile()
	}
}

// idleController is a controller whose loop never runs: its signals only
// coalesce.
func idleController(b *testing.B) *controller.Controller {
	b.Helper()
	ctrl, err := controller.New(newCountingSource(clock.NewFake(epoch)), controller.Config{})
	if err != nil {
		b.Fatal(err)
	}
	return ctrl
}

// A source whose turns run inline never waits for capacity: while its
// backlog lasts every turn says More. The probe (and every other timer)
// still runs between those turns rather than after the backlog.
func TestTimersRunBetweenTheTurnsOfABacklog(t *testing.T) {
	var h *harness
	probesBefore := 0
	h = newHarness(t, controller.Config{}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			switch {
			case n == 1:
				return controller.ClaimBatch{}, nil // start-up: nothing yet
			case n == 2:
				// The backlog starts; the probe period passes during its
				// first turn.
				probesBefore = s.Count("generation")
				h.clock.Advance(probeEvery)
			case n < 10:
			default:
				return controller.ClaimBatch{Started: 1}, nil // the backlog ends
			}
			return controller.ClaimBatch{Started: 1, More: true}, nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.Wake()
	h.settle()
	if got := h.src.Count("claim"); got != 10 {
		t.Fatalf("%d claims, want the backlog's 10: %v", got, h.src.Calls())
	}
	// The probe ran during the backlog: the call log has a generation read
	// between claim 2 and claim 10.
	calls, claims, probedDuring := h.src.Calls(), 0, false
	for _, c := range calls {
		switch c {
		case "claim":
			claims++
		case "generation":
			probedDuring = probedDuring || (claims >= 2 && claims < 10)
		}
	}
	if !probedDuring || h.src.Count("generation") != probesBefore+1 {
		t.Fatalf("calls %v: want one probe between the backlog's turns", calls)
	}
}

// RunRestarting runs a controller again after an error that left it
// usable, after the backoff on its clock, and returns the error that made
// it unusable.
func TestRunRestartingRestartsOnlyWhileUsable(t *testing.T) {
	var h *harness
	h = newHarness(t, controller.Config{}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			switch n {
			case 1, 2:
				return controller.ClaimBatch{}, errors.Join(errors.New("scan failed"), controller.ErrSourceOperationNotCommitted)
			default:
				return controller.ClaimBatch{}, errors.New("commit reply lost")
			}
		}
	})
	var waits []time.Duration
	done := make(chan error, 1)
	go func() {
		done <- h.ctrl.RunRestarting(context.Background(), controller.Restart{
			Min: time.Second, Max: 30 * time.Second,
			Restarted: func(_ error, after time.Duration) { waits = append(waits, after) },
		})
	}()
	for i, at := range []time.Duration{time.Second, 2 * time.Second} {
		if !h.clock.WaitArmed(h.clock.Now().Add(at), 10*time.Second) {
			t.Fatalf("restart %d: no %s backoff armed", i+1, at)
		}
		h.clock.Advance(at)
	}
	select {
	case err := <-done:
		if !errors.Is(err, controller.ErrUnusable) {
			t.Fatalf("RunRestarting returned %v, want ErrUnusable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RunRestarting did not return")
	}
	if diff := cmp.Diff([]time.Duration{time.Second, 2 * time.Second}, waits); diff != "" {
		t.Fatalf("restart waits (-want +got):\n%s", diff)
	}
	if got := h.src.Count("ready"); got != 3 {
		t.Fatalf("%d start-ups, want 3", got)
	}
}
