package tidbenv

import (
	"errors"
	"testing"
	"time"
)

// A pause the freezer refuses is tried again, up to freezeAttempts times,
// with the backoff between tries; the last error is kept.
func TestRetriedTriesUntilSuccessOrTheBound(t *testing.T) {
	refused := errors.New("OCI runtime pause failed: unable to freeze")
	var slept []time.Duration
	sleep := func(d time.Duration) { slept = append(slept, d) }
	calls := 0
	if err := retried(freezeAttempts, freezeBackoff, sleep, func() error {
		calls++
		if calls < 3 {
			return refused
		}
		return nil
	}); err != nil || calls != 3 || len(slept) != 2 {
		t.Fatalf("err %v after %d calls and %d sleeps, want success on the third call", err, calls, len(slept))
	}
	calls, slept = 0, nil
	err := retried(freezeAttempts, freezeBackoff, sleep, func() error { calls++; return refused })
	if !errors.Is(err, refused) || calls != freezeAttempts || len(slept) != freezeAttempts-1 {
		t.Fatalf("err %v after %d calls and %d sleeps, want the refusal after %d calls", err, calls, len(slept), freezeAttempts)
	}
	for _, d := range slept {
		if d <= 0 || d > freezeBackoff.Max {
			t.Fatalf("slept %s between tries, want within (0, %s]", d, freezeBackoff.Max)
		}
	}
}
