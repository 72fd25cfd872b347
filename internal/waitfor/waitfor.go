// Package waitfor is the one wait-for-a-condition loop of laneq's tests
// and of laneqtest, the public test kit: a test waits for what it expects,
// never for a fixed time, and a generous bound only guards against a
// condition that never comes.
package waitfor

import (
	"testing"
	"time"
)

// Poll calls check until it reports done, or that it never will (stop),
// or guard passed, pausing between calls from 1 ms doubling to 100 ms (a
// condition that holds at once costs nothing; one that takes seconds is
// looked at ten times a second). It reports done.
func Poll(guard time.Duration, check func() (done, stop bool)) bool {
	deadline := time.Now().Add(guard)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		done, stop := check()
		if done {
			return true
		}
		if stop || time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
}

// Until waits for cond to hold, and fails t when cond returns an error
// or still does not hold after guard; the failure message is failure()'s,
// called only then, so it can show the state that never changed.
func Until(t testing.TB, guard time.Duration, cond func() (bool, error), failure func() string) {
	t.Helper()
	var last error
	if Poll(guard, func() (bool, bool) {
		ok, err := cond()
		last = err
		return ok && err == nil, err != nil
	}) {
		return
	}
	if last != nil {
		t.Fatalf("%s: %v", failure(), last)
	}
	t.Fatalf("%s (after %s)", failure(), guard)
}
