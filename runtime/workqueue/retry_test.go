package workqueue_test

import (
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// attemptsWithin counts the attempts an item whose every attempt fails makes
// within d, taking each backoff at the given jitter position (0: shortest).
func attemptsWithin(p workqueue.RetryPolicy, d time.Duration, rnd float64) int {
	attempts := 0
	var elapsed time.Duration
	for retries := int32(0); elapsed < d; retries++ {
		attempts++
		elapsed += p.Delay(retries, rnd)
	}
	return attempts
}

// TestSustainedFailureIsBounded is seed 003's bound: a dependency that stays
// down must cost a bounded number of claims (at most 10 in 6 minutes), not one
// per second, even with every jitter draw at its shortest.
func TestSustainedFailureIsBounded(t *testing.T) {
	t.Parallel()
	p := workqueue.DefaultRetryPolicy
	if n := attemptsWithin(p, 6*time.Minute, 0); n > 10 {
		t.Fatalf("%d attempts in 6 minutes with the shortest jitter, want at most 10", n)
	}
	// And it keeps trying at the cap, never giving up silently: one hour at
	// the 5 minute cap is at most 12 more attempts after the ramp.
	if n := attemptsWithin(p, time.Hour, 0); n > 10+12+1 {
		t.Fatalf("%d attempts in an hour", n)
	}
}

func TestRetryDelays(t *testing.T) {
	t.Parallel()
	p := workqueue.RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.1}
	for retries, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second} {
		if got := p.Delay(int32(retries), 0.5); got != want {
			t.Errorf("Delay(%d) = %s, want %s", retries, got, want)
		}
	}
	if got := p.Delay(1000, 0.5); got != 5*time.Minute {
		t.Errorf("Delay(1000) = %s, want the 5m cap (no overflow)", got)
	}
	if lo, hi := p.Delay(3, 0), p.Delay(3, 0.999999); lo != 7200*time.Millisecond || hi < 8799*time.Millisecond || hi > 8800*time.Millisecond {
		t.Errorf("jitter bounds for 8s: %s..%s, want 7.2s..8.8s", lo, hi)
	}
}

// TestJitterNeverExceedsTheCap: jitter applies before the cap, so no delay
// is longer than Max whatever the draw.
func TestJitterNeverExceedsTheCap(t *testing.T) {
	t.Parallel()
	p := workqueue.RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.5}
	for retries := int32(0); retries < 40; retries++ {
		for _, rnd := range []float64{0, 0.5, 0.999999} {
			if got := p.Delay(retries, rnd); got > p.Max {
				t.Fatalf("Delay(%d, %v) = %s, over the %s cap", retries, rnd, got, p.Max)
			}
		}
	}
	if got := p.Delay(20, 0.999999); got != p.Max {
		t.Fatalf("Delay(20) at the top of the jitter = %s, want the cap %s", got, p.Max)
	}
}

// TestPartialRetryPolicyTakesFieldDefaults: zero fields take their own
// defaults, so a policy that only sets a retry limit is valid and backs off
// like the default.
func TestPartialRetryPolicyTakesFieldDefaults(t *testing.T) {
	t.Parallel()
	p := workqueue.RetryPolicy{MaxSafeRetries: 5}
	for retries := int32(0); retries < 12; retries++ {
		if got, want := p.Delay(retries, 0.5), workqueue.DefaultRetryPolicy.Delay(retries, 0.5); got != want {
			t.Fatalf("Delay(%d) = %s, want the default's %s", retries, got, want)
		}
	}
	if _, err := workqueue.New(nil, workqueue.Config{Retry: workqueue.RetryPolicy{Jitter: 0.7}}); err == nil {
		t.Fatal("Jitter 0.7 was accepted")
	}
	noJitter := workqueue.RetryPolicy{Jitter: -1}
	if lo, hi := noJitter.Delay(2, 0), noJitter.Delay(2, 0.999999); lo != 4*time.Second || hi != 4*time.Second {
		t.Fatalf("negative Jitter: %s..%s, want exactly 4s", lo, hi)
	}
}
