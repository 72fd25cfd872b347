package scanfloor

import (
	"testing"
	"time"
)

func TestStart(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	const w = 2 * time.Second
	set := func(at, seen time.Time) Floor { var f Floor; f.Set(at, seen); return f }
	for _, tc := range []struct {
		name string
		f    Floor
		want time.Time
	}{
		{"no floor: the front", Floor{}, Front},
		{"no scan time recorded: the window before the floor", set(t0, time.Time{}), t0.Add(-w)},
		{"consumed up to the scan's time: the window before the scan", set(t0, t0), t0.Add(-w)},
		{"consumed just behind the scan: the window before the scan", set(t0, t0.Add(time.Second)), t0.Add(-time.Second)},
		{"a backlog far behind the scan: the floor itself", set(t0, t0.Add(time.Minute)), t0},
		{"a scan whose clock ran behind the floor: the window before the scan", set(t0, t0.Add(-time.Second)), t0.Add(-3 * time.Second)},
	} {
		if got := tc.f.Start(w); !got.Equal(tc.want) {
			t.Errorf("%s: Start = %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestAdvanceOnlyMovesForward(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var f Floor
	f.Advance(t0)
	f.Advance(t0.Add(-time.Minute)) // an older candidate taken late
	if !f.Known() || !f.At().Equal(t0) {
		t.Fatalf("after advancing to %s and back: known %v at %s", t0, f.Known(), f.At())
	}
	f.Advance(t0.Add(time.Second))
	if !f.At().Equal(t0.Add(time.Second)) {
		t.Fatalf("did not advance: at %s", f.At())
	}
}

func TestLowerAndReset(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	var f Floor
	f.Lower(t0) // no floor: nothing to lower
	if f.Known() {
		t.Fatal("Lower made a floor")
	}
	f.Set(t0, t0.Add(time.Minute))
	f.Lower(t0.Add(time.Second)) // later than the floor: no change
	if !f.At().Equal(t0) {
		t.Fatalf("Lower to a later time moved the floor to %s", f.At())
	}
	f.Lower(t0.Add(-time.Second))
	if !f.At().Equal(t0.Add(-time.Second)) || !f.Start(time.Second).Equal(t0.Add(-time.Second)) {
		t.Fatalf("after Lower: at %s, start %s", f.At(), f.Start(time.Second))
	}
	f.Reset()
	if f.Known() || !f.Start(time.Second).Equal(Front) {
		t.Fatalf("after Reset: known %v, start %s", f.Known(), f.Start(time.Second))
	}
}
