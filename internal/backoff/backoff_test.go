package backoff

import (
	"testing"
	"time"
)

func TestDelayDoublesToTheCap(t *testing.T) {
	p := Policy{Initial: time.Second, Max: 10 * time.Second}
	for failures, want := range map[int]time.Duration{
		-1: time.Second, 0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		4: 8 * time.Second, 5: 10 * time.Second, 1000: 10 * time.Second,
	} {
		if got := p.Delay(failures, 0); got != want {
			t.Errorf("Delay(%d) = %s, want %s", failures, got, want)
		}
	}
}

func TestJitterIsBoundedAndNeverPassesTheCap(t *testing.T) {
	p := Policy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.2}
	if got := p.Delay(1, 0); got != 80*time.Millisecond {
		t.Errorf("lowest jitter: %s, want 80ms", got)
	}
	if got := p.Delay(1, 0.5); got != 100*time.Millisecond {
		t.Errorf("middle jitter: %s, want 100ms", got)
	}
	if got := p.Delay(5, 0.999); got != time.Second {
		t.Errorf("jitter above the cap: %s, want the cap 1s", got)
	}
	full := Policy{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: 1}
	for range 1000 {
		if d := full.Next(3); d <= 0 || d >= 160*time.Millisecond {
			t.Fatalf("full jitter of 80ms gave %s, want within (0, 160ms)", d)
		}
	}
	if got := full.Delay(1, 0); got != time.Nanosecond {
		t.Errorf("full jitter at its low end: %s, want 1ns (never zero)", got)
	}
}
