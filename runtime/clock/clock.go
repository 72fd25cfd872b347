// Package clock is the time source of the runtime's timers. Production code
// uses Real; tests use Fake, whose time moves only when the test says so, so
// that call budgets can be asserted exactly instead of hoped for with sleeps.
package clock

import (
	"sync"
	"time"
)

// Clock makes timers and tells the time.
type Clock interface {
	Now() time.Time
	// NewTimer returns a stopped timer; Reset arms it.
	NewTimer() Timer
}

// Timer fires once on C after Reset(d), unless stopped first.
type Timer interface {
	C() <-chan time.Time
	// Reset stops the timer, discards a fire not yet received, and arms it
	// to fire after d.
	Reset(d time.Duration)
	// Stop disarms the timer and discards a fire not yet received.
	Stop()
}

// Real is the wall clock.
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &realTimer{t: t}
}

type realTimer struct{ t *time.Timer }

func (r *realTimer) C() <-chan time.Time { return r.t.C }

// Since Go 1.23 Stop and Reset also discard a pending fire.
func (r *realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r *realTimer) Stop()                 { r.t.Stop() }

// Fake is a Clock whose time moves only by Advance. Timers fire during
// Advance, in deadline order, by a non-blocking send on their channel (one
// buffered fire, like time.Timer).
type Fake struct {
	mu     sync.Mutex
	now    time.Time
	timers map[*fakeTimer]struct{}
	armed  chan struct{} // closed and replaced whenever a timer is armed
}

// NewFake returns a Fake clock reading start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, timers: map[*fakeTimer]struct{}{}, armed: make(chan struct{})}
}

func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *Fake) NewTimer() Timer {
	return &fakeTimer{clock: f, c: make(chan time.Time, 1)}
}

// Armed reports how many timers are armed (for tests that wait for a
// component to arm its timers before advancing).
func (f *Fake) Armed() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// WaitArmed blocks until some timer is armed to fire at exactly at, so a
// test can advance time knowing the component under test is waiting.
func (f *Fake) WaitArmed(at time.Time, timeout time.Duration) bool {
	deadline := time.After(timeout)
	for {
		f.mu.Lock()
		for t := range f.timers {
			if t.at.Equal(at) {
				f.mu.Unlock()
				return true
			}
		}
		changed := f.armed
		f.mu.Unlock()
		select {
		case <-changed:
		case <-deadline:
			return false
		}
	}
}

// Advance moves time forward by d, firing every timer whose deadline is
// reached, earliest first.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	target := f.now.Add(d)
	for {
		var next *fakeTimer
		for t := range f.timers {
			if !t.at.After(target) && (next == nil || t.at.Before(next.at)) {
				next = t
			}
		}
		if next == nil {
			break
		}
		delete(f.timers, next)
		if next.at.After(f.now) {
			f.now = next.at
		}
		select {
		case next.c <- f.now:
		default:
		}
	}
	f.now = target
	f.mu.Unlock()
}

type fakeTimer struct {
	clock *Fake
	c     chan time.Time
	at    time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Reset(d time.Duration) {
	f := t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	t.drain()
	t.at = f.now.Add(d)
	if d <= 0 {
		t.c <- f.now
		delete(f.timers, t)
		return
	}
	f.timers[t] = struct{}{}
	close(f.armed)
	f.armed = make(chan struct{})
}

func (t *fakeTimer) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	delete(t.clock.timers, t)
	t.drain()
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// Scaled is a clock that runs factor times faster than the wall clock from
// the moment it is made: its timers fire after d/factor of real time. It
// lets a test run hours of a component's periodic behaviour with its
// default periods in seconds, across processes and against a real server
// (timers only: a database's clock is not scaled).
func Scaled(factor float64) Clock {
	if factor <= 0 {
		panic("clock: Scaled needs a positive factor")
	}
	return scaledClock{start: time.Now(), factor: factor}
}

type scaledClock struct {
	start  time.Time
	factor float64
}

func (s scaledClock) Now() time.Time {
	return s.start.Add(time.Duration(float64(time.Since(s.start)) * s.factor))
}

func (s scaledClock) NewTimer() Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &scaledTimer{realTimer{t: t}, s.factor}
}

type scaledTimer struct {
	realTimer
	factor float64
}

func (s *scaledTimer) Reset(d time.Duration) { s.t.Reset(time.Duration(float64(d) / s.factor)) }

// Skewed is the wall clock off by offset: Now reads time.Now()+offset and
// timers run in real time. It stands for a host whose clock is wrong by
// seconds, for tests of what must not depend on a host's clock (periodic
// ticks, leases, due times: all measured by the database).
func Skewed(offset time.Duration) Clock { return skewedClock{offset} }

type skewedClock struct{ offset time.Duration }

func (s skewedClock) Now() time.Time { return time.Now().Add(s.offset) }
func (skewedClock) NewTimer() Timer  { return realClock{}.NewTimer() }
