package clock_test

import (
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/clock"
)

func TestFakeFiresInDeadlineOrderOnlyWhenAdvanced(t *testing.T) {
	start := time.Unix(1000, 0)
	f := clock.NewFake(start)
	a, b := f.NewTimer(), f.NewTimer()
	a.Reset(2 * time.Second)
	b.Reset(time.Second)
	if f.Armed() != 2 {
		t.Fatalf("armed %d", f.Armed())
	}
	f.Advance(999 * time.Millisecond)
	select {
	case <-a.C():
		t.Fatal("a fired early")
	case <-b.C():
		t.Fatal("b fired early")
	default:
	}
	f.Advance(5 * time.Second)
	if at := <-b.C(); !at.Equal(start.Add(time.Second)) {
		t.Fatalf("b fired at %v", at)
	}
	if at := <-a.C(); !at.Equal(start.Add(2 * time.Second)) {
		t.Fatalf("a fired at %v", at)
	}
	if !f.Now().Equal(start.Add(5999 * time.Millisecond)) {
		t.Fatalf("now %v", f.Now())
	}
}

func TestFakeStopAndResetDiscardPendingFires(t *testing.T) {
	f := clock.NewFake(time.Unix(0, 0))
	tm := f.NewTimer()
	tm.Reset(time.Second)
	f.Advance(time.Second) // fired, not received
	tm.Reset(time.Minute)
	select {
	case <-tm.C():
		t.Fatal("a fire from before Reset was delivered")
	default:
	}
	tm.Stop()
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("a stopped timer fired")
	default:
	}
	if f.WaitArmed(f.Now().Add(time.Second), 10*time.Millisecond) {
		t.Fatal("WaitArmed saw a timer nobody armed")
	}
	tm.Reset(time.Second)
	if !f.WaitArmed(f.Now().Add(time.Second), time.Second) {
		t.Fatal("WaitArmed missed an armed timer")
	}
}

func TestRealTimerFires(t *testing.T) {
	tm := clock.Real().NewTimer()
	tm.Reset(time.Millisecond)
	select {
	case <-tm.C():
	case <-time.After(10 * time.Second):
		t.Fatal("real timer never fired")
	}
}

func TestScaledClockRunsFaster(t *testing.T) {
	c := clock.Scaled(1000)
	start, realStart := c.Now(), time.Now()
	tm := c.NewTimer()
	tm.Reset(10 * time.Second) // 10ms of real time
	<-tm.C()
	if real := time.Since(realStart); real >= 10*time.Second {
		t.Fatalf("a 10s timer at 1000x took %s of real time", real)
	}
	if got := c.Now().Sub(start); got < 10*time.Second {
		t.Fatalf("the clock moved %s while its 10s timer ran", got)
	}
}
