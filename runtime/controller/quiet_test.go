package controller_test

import (
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/controller"
)

func newQuietHarness(t *testing.T, cfg controller.Config, tweak func(*countingSource)) *harness {
	return newHarness(t, cfg, tweak)
}

// quietProbeFindsAChange runs the controller into quiet mode, changes the
// generation with no wake (another process's lost one) and lets the
// quiet probe see it, which makes the second claim turn.
func (h *harness) quietProbeFindsAChange() {
	h.t.Helper()
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	h.src.SetGeneration(7)
	h.clock.Advance(controller.DefaultQuietProbeEvery)
	h.settle()
}

// Entering quiet mode probes once (nothing it would find is lost; what it
// read is the baseline), and from then on probes (the same probe) every
// QuietProbeEvery and reconciles every QuietBackstopEvery: an idle hour
// costs three probes, nothing else.
func TestQuietModeStretchesThePeriods(t *testing.T) {
	h := newQuietHarness(t, controller.Config{ReconcileEvery: time.Minute}, nil)
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	// ... and looks up the next work again, as far as the quiet backstop.
	want := map[string]int{"ready": 1, "generation": 2, "reconcile": 1, "claim": 1, "next_work_at": 2}
	h.wantCounts(want)
	if st := h.ctrl.Stats(); st.QuietEntries != 1 || !h.ctrl.Quiet() {
		t.Fatalf("not quiet: %+v", st)
	}
	h.advance(time.Hour, 15*time.Second)
	want["generation"] += 3
	h.wantCounts(want)
	// The quiet backstop at four hours reconciles once, with its claim pass.
	h.advance(3*time.Hour, time.Minute)
	want["generation"] += 9
	want["reconcile"]++
	want["claim"]++
	want["next_work_at"]++
	h.wantCounts(want)
}

// A quiet probe that finds work no wake announced, then or within the
// grace, leaves quiet mode: the next probes are normal ones on the normal
// period.
func TestQuietProbeFindingWorkLeavesQuietMode(t *testing.T) {
	h := newQuietHarness(t, controller.Config{}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			if n == 2 {
				return controller.ClaimBatch{Started: 1}, nil // the missed item
			}
			return controller.ClaimBatch{}, nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	h.src.SetGeneration(7) // another process enqueued; its wake was lost
	h.advance(controller.DefaultQuietProbeEvery, 15*time.Second)
	h.advance(controller.DefaultMissedWakeGrace, controller.DefaultMissedWakeGrace) // no wake trails it
	st := h.ctrl.Stats()
	if st.MissedWakes != 1 || h.ctrl.Quiet() {
		t.Fatalf("still quiet after a missed wake: %+v", st)
	}
	before := h.src.Count("generation")
	h.advance(time.Minute, 15*time.Second)
	if got := h.src.Count("generation") - before; got < 4 {
		t.Fatalf("%d normal probes in a minute after leaving quiet mode, want 4 or more", got)
	}
}

// A change that a wake announced is not a missed wake, even when a probe
// sees it first.
func TestWakeExplainsWhatTheQuietProbeSaw(t *testing.T) {
	h := newQuietHarness(t, controller.Config{}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			return controller.ClaimBatch{Started: 1}, nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	h.src.SetGeneration(9)
	h.ctrl.Wake()
	h.advance(controller.DefaultQuietProbeEvery, time.Minute)
	if st := h.ctrl.Stats(); st.MissedWakes != 0 || !h.ctrl.Quiet() {
		t.Fatalf("a woken change counted as missed: %+v", st)
	}
}

// A wake can trail the probe that found its work: the probe read between
// another process's commit and its datagram. A wake within
// MissedWakeGrace of the claim explains it; the same work with no wake
// by then is a missed wake.
func TestWakeTrailingTheQuietProbeIsNotAMissedWake(t *testing.T) {
	for _, tc := range []struct {
		name   string
		wake   bool
		missed uint64
	}{
		{"wake within the grace", true, 0},
		{"no wake", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claims := 0
			h := newQuietHarness(t, controller.Config{}, func(s *countingSource) {
				s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
					claims = n
					if n == 2 {
						return controller.ClaimBatch{Started: 1}, nil // the probe's claim
					}
					return controller.ClaimBatch{}, nil
				}
			})
			h.quietProbeFindsAChange()
			if claims != 2 {
				t.Fatalf("%d claims after the probe, want the probe's own", claims)
			}
			if tc.wake {
				h.clock.Advance(controller.DefaultMissedWakeGrace / 2)
				h.ctrl.Wake() // the commit's datagram, a moment late
				h.settle()
			}
			h.advance(controller.DefaultMissedWakeGrace, controller.DefaultMissedWakeGrace/4)
			if st := h.ctrl.Stats(); st.MissedWakes != tc.missed || h.ctrl.Quiet() != (tc.missed == 0) {
				t.Fatalf("missed wakes %d, quiet %t; want %d missed", st.MissedWakes, h.ctrl.Quiet(), tc.missed)
			}
		})
	}
}

// A probe disabled in normal mode stays disabled in quiet mode.
func TestQuietModeKeepsDisabledPeriodsDisabled(t *testing.T) {
	h := newQuietHarness(t, controller.Config{GenerationProbeEvery: -1, ReconcileEvery: -1}, nil)
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	before := h.src.Counts()
	h.advance(5*time.Hour, 5*time.Minute)
	h.wantCounts(before)
}

func TestQuietBackstopCannotBeDisabled(t *testing.T) {
	if _, err := controller.New(newCountingSource(nil), controller.Config{QuietBackstopEvery: -1}); err == nil {
		t.Fatal("a disabled quiet backstop was accepted")
	}
}

// In quiet mode a lookup looks as far as the quiet backstop only on
// entry, at the quiet backstop and after WakeLookFar; the others look as
// far as the normal backstop.
func TestQuietLookAhead(t *testing.T) {
	var h *harness
	var seen []time.Duration
	h = newQuietHarness(t, controller.Config{ReconcileEvery: time.Minute}, func(s *countingSource) {
		s.nextWorkAt = func(int) (time.Time, bool, error) {
			seen = append(seen, h.ctrl.LookAhead()) // NextWorkAt runs on Run's loop
			return time.Time{}, false, nil
		}
	})
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	h.ctrl.Wake()
	h.settle()
	h.ctrl.WakeLookFar()
	h.settle()
	h.advance(controller.DefaultQuietBackstopEvery, 10*time.Minute)
	want := []time.Duration{time.Minute, controller.DefaultQuietBackstopEvery, time.Minute, controller.DefaultQuietBackstopEvery, controller.DefaultQuietBackstopEvery}
	if len(seen) != len(want) {
		t.Fatalf("lookups looked %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("lookups looked %v, want %v", seen, want)
		}
	}
	if st := h.ctrl.Stats(); st.FarLookups != 3 {
		t.Fatalf("%d far lookups, want 3", st.FarLookups)
	}
}

// A change committed just after the probe that switches modes is found by
// the next quiet probe: the switch's probe is the baseline, no second read
// (which would see the change and swallow it) follows it. Found by
// TestAllWakesLostStillBounded: an enqueue right after the worker turned
// quiet waited for nothing but its claim turn, which never came.
func TestChangeRightAfterTheSwitchIsFound(t *testing.T) {
	h := newQuietHarness(t, controller.Config{}, nil)
	h.run()
	h.settle()
	switchRead := h.src.Count("generation") + 1
	h.src.mu.Lock()
	h.src.afterGeneration = func(n int) {
		if n == switchRead {
			h.src.SetGeneration(42) // committed between the switch's read and any later one
		}
	}
	h.src.mu.Unlock()
	h.ctrl.SetQuiet(true)
	h.settle()
	claims := h.src.Count("claim")
	h.advance(controller.DefaultQuietProbeEvery, time.Minute)
	if got := h.src.Count("claim") - claims; got != 1 {
		t.Fatalf("%d claim turns after the quiet probe, want 1 for the change", got)
	}
}

// A wake that arrives while the quiet probe's claim turn runs may be the
// one for the work that turn found (the turn cannot tell): it explains it,
// even with no grace at all.
func TestWakeDuringTheProbesTurnExplainsIt(t *testing.T) {
	var h *harness
	h = newQuietHarness(t, controller.Config{MissedWakeGrace: -1}, func(s *countingSource) {
		s.claim = func(n int, turn controller.Turn) (controller.ClaimBatch, error) {
			if n == 2 {
				h.ctrl.Wake() // the datagram lands while the turn runs
				return controller.ClaimBatch{Started: 1}, nil
			}
			return controller.ClaimBatch{}, nil
		}
	})
	h.quietProbeFindsAChange()
	if st := h.ctrl.Stats(); st.MissedWakes != 0 || st.ExplainedProbes != 1 || !h.ctrl.Quiet() {
		t.Fatalf("stats %+v, quiet %t: want the probe's find explained by the wake during its turn", st, h.ctrl.Quiet())
	}
}
