package waitfor

import (
	"errors"
	"testing"
	"time"
)

func TestPoll(t *testing.T) {
	calls := 0
	if !Poll(time.Minute, func() (bool, bool) { calls++; return calls == 3, false }) || calls != 3 {
		t.Fatalf("a condition that held on the third look: %d calls", calls)
	}
	calls = 0
	if Poll(time.Minute, func() (bool, bool) { calls++; return false, true }) || calls != 1 {
		t.Fatalf("a check that said stop: %d calls, want 1 and false", calls)
	}
	start := time.Now()
	if Poll(50*time.Millisecond, func() (bool, bool) { return false, false }) {
		t.Fatal("a condition that never held was reported done")
	}
	if waited := time.Since(start); waited < 50*time.Millisecond {
		t.Fatalf("gave up after %s, before the guard", waited)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as the real one does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}
func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = format
	panic(f)
}

func until(cond func() (bool, error)) (msg string) {
	r := &fatalRecorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		msg = r.msg
	}()
	Until(r, 30*time.Millisecond, cond, func() string { return "described" })
	return ""
}

func TestUntil(t *testing.T) {
	if msg := until(func() (bool, error) { return true, nil }); msg != "" {
		t.Fatalf("a condition that held failed the test: %q", msg)
	}
	if msg := until(func() (bool, error) { return false, nil }); msg != "%s (after %s)" {
		t.Fatalf("a condition that never held: %q", msg)
	}
	if msg := until(func() (bool, error) { return true, errors.New("broken") }); msg != "%s: %v" {
		t.Fatalf("a condition that returned an error: %q", msg)
	}
}
