package controller_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/controller"
)

const maintainEvery = 2 * time.Minute

// maintainingSource is a countingSource that is also a Maintainer; script
// returns run n's result (nil: nothing woken, no error).
type maintainingSource struct {
	*countingSource
	script func(n int) (bool, error)

	mu  sync.Mutex
	ran []time.Time // the fake clock at each run
}

func (s *maintainingSource) Maintain(context.Context) (bool, error) {
	n := s.record("maintain")
	s.mu.Lock()
	s.ran = append(s.ran, s.clock.Now())
	s.mu.Unlock()
	if s.script != nil {
		return s.script(n)
	}
	return false, nil
}

func (s *maintainingSource) runs() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]time.Duration, len(s.ran))
	for i, at := range s.ran {
		out[i] = at.Sub(epoch)
	}
	return out
}

func newMaintainHarness(t *testing.T, cfg controller.Config, script func(n int) (bool, error)) (*harness, *maintainingSource) {
	t.Helper()
	var m *maintainingSource
	h := newHarnessOf(t, cfg, nil, func(s *countingSource) controller.Source {
		m = &maintainingSource{countingSource: s, script: script}
		return m
	})
	return h, m
}

func TestMaintenanceRunsOncePerPeriodAndReadsNothingElse(t *testing.T) {
	h, m := newMaintainHarness(t, controller.Config{GenerationProbeEvery: -1, MaintainEvery: maintainEvery}, nil)
	h.run()
	h.settle()
	h.advance(30*time.Minute, 10*time.Second)
	want := map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1, "maintain": 15}
	h.wantCounts(want)
	if got := m.runs(); got[0] != maintainEvery || got[14] != 15*maintainEvery {
		t.Fatalf("maintenance ran at %v, want every %s from start", got, maintainEvery)
	}
	if st := h.ctrl.Stats(); st.Maintenances != 15 || st.MaintenanceErrors != 0 || st.MaintenanceClaims != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaintenanceThatWokeWorkRunsOneClaimTurn(t *testing.T) {
	h, _ := newMaintainHarness(t, controller.Config{GenerationProbeEvery: -1, MaintainEvery: maintainEvery},
		func(n int) (bool, error) {
			switch n {
			case 2:
				return true, nil
			case 3: // failed after committing wakes: still claim
				return true, errors.New("deadline exceeded after 40 wakes")
			}
			return false, nil
		})
	h.run()
	h.settle()
	h.advance(maintainEvery, 10*time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1, "maintain": 1})
	h.advance(maintainEvery, 10*time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 2, "next_work_at": 2, "maintain": 2})
	// Run 3 fails; its retry after MaintainRetryMin is run 4.
	h.advance(maintainEvery+controller.MaintainRetryMin, time.Second)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 3, "next_work_at": 3, "maintain": 4})
	if st := h.ctrl.Stats(); st.Maintenances != 4 || st.MaintenanceErrors != 1 || st.MaintenanceClaims != 2 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaintenanceErrorsBackOffAndNeverStopTheController(t *testing.T) {
	h, m := newMaintainHarness(t, controller.Config{GenerationProbeEvery: -1, MaintainEvery: maintainEvery},
		func(n int) (bool, error) {
			if n <= 4 {
				return false, errors.New("tidb: server is busy")
			}
			return false, nil
		})
	h.run()
	h.settle()
	h.advance(2*maintainEvery, time.Second)
	// Failures at 2m, then backoffs of 1s, 2s, 4s; run 5 succeeds at 2m15s
	// (8s later) and the next comes one full period after it.
	s := time.Second
	want := []time.Duration{maintainEvery, maintainEvery + s, maintainEvery + 3*s, maintainEvery + 7*s, maintainEvery + 15*s}
	if diff := cmp.Diff(want, m.runs()); diff != "" {
		t.Fatalf("maintenance times (-want +got):\n%s", diff)
	}
	h.advance(maintainEvery, time.Second)
	if got := m.runs(); len(got) != 6 || got[5] != 2*maintainEvery+15*s {
		t.Fatalf("after recovery maintenance ran at %v, want the period restored", got)
	}
	if !h.ctrl.Usable() {
		t.Fatal("maintenance errors made the controller unusable")
	}
	// The loop still serves signals.
	claims := h.src.Count("claim")
	h.ctrl.Wake()
	h.settle()
	if h.src.Count("claim") != claims+1 {
		t.Fatal("a wake after failed maintenance did not claim")
	}
	if st := h.ctrl.Stats(); st.MaintenanceErrors != 4 {
		t.Fatalf("stats %+v", st)
	}
}

func TestMaintenanceBackoffIsCappedAtThePeriod(t *testing.T) {
	h, m := newMaintainHarness(t, controller.Config{GenerationProbeEvery: -1, MaintainEvery: 3 * time.Second},
		func(int) (bool, error) { return false, errors.New("down") })
	h.run()
	h.settle()
	h.advance(20*time.Second, time.Second)
	// 3s (fail), +1s, +2s, then capped at +3s.
	want := []time.Duration{3, 4, 6, 9, 12, 15, 18}
	for i := range want {
		want[i] *= time.Second
	}
	if diff := cmp.Diff(want, m.runs()); diff != "" {
		t.Fatalf("maintenance times (-want +got):\n%s", diff)
	}
}

func TestNegativeMaintainEveryDisablesMaintenance(t *testing.T) {
	h, _ := newMaintainHarness(t, controller.Config{GenerationProbeEvery: -1, MaintainEvery: -1}, nil)
	h.run()
	h.settle()
	h.advance(30*time.Minute, time.Minute)
	h.wantCounts(map[string]int{"ready": 1, "reconcile": 1, "claim": 1, "next_work_at": 1})
}

// Maintenance repairs what no wake announces (a key recorded without its
// wake, a stranded lane row), so quiet mode does not stretch it: an hour in
// quiet mode runs it every MaintainEvery, while the probe and the backstop
// follow the quiet periods.
func TestMaintenanceKeepsItsPeriodInQuietMode(t *testing.T) {
	h, m := newMaintainHarness(t, controller.Config{MaintainEvery: maintainEvery}, nil)
	h.run()
	h.settle()
	h.ctrl.SetQuiet(true)
	h.settle()
	before := h.src.Count("generation")
	h.advance(time.Hour, 10*time.Second)
	if got := len(m.runs()); got != 30 {
		t.Fatalf("maintenance ran %d times in a quiet hour, want 30 (every %s)", got, maintainEvery)
	}
	if got := h.src.Count("generation") - before; got != 3 {
		t.Fatalf("%d probes in a quiet hour, want 3 (every %s)", got, controller.DefaultQuietProbeEvery)
	}
}
