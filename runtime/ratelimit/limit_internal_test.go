package ratelimit

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Any k consecutive windows of a limit hold exactly N starts, whatever
// window they begin at (negative indexes too: before the epoch), and the
// bound of a span of Per is N + ceil(N/k).
func TestWindowsHoldNPerPeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n            int
		per          time.Duration
		k            int64
		windowMicros int64
		bound        int
	}{
		{50, time.Second, 10, 100_000, 55},
		{13, time.Second, 10, 100_000, 15},
		{7, time.Second, 7, 142_857, 8},
		{1, time.Minute, 1, 60_000_000, 2},
		{1000, time.Second, 10, 100_000, 1100},
	} {
		l := Limit{WorkType: "w", N: tc.n, Per: tc.per}
		if err := l.validate(); err != nil {
			t.Fatal(err)
		}
		if l.windows() != tc.k || l.windowMicros() != tc.windowMicros || l.Bound() != tc.bound {
			t.Errorf("N=%d per %s: k %d, window %dus, bound %d; want %d, %d, %d", tc.n, tc.per, l.windows(), l.windowMicros(), l.Bound(), tc.k, tc.windowMicros, tc.bound)
		}
		for start := int64(-25); start < 25; start++ {
			sum, most := 0, 0
			for i := start; i < start+l.windows(); i++ {
				sum += l.quota(i)
				most = max(most, l.quota(i))
			}
			if sum != tc.n || most > (tc.n+int(tc.k)-1)/int(tc.k) {
				t.Errorf("N=%d: windows %d..%d hold %d (most %d in one), want %d", tc.n, start, start+l.windows()-1, sum, most, tc.n)
			}
		}
	}
	s := &share{Limit: Limit{WorkType: "w", N: 50, Per: time.Second}}
	for _, tc := range []struct {
		at   time.Time
		want int64
	}{
		{time.UnixMicro(0), 0},
		{time.UnixMicro(99_999), 0},
		{time.UnixMicro(100_000), 1},
		{time.UnixMicro(-1), -1},
		{time.UnixMicro(-100_000), -1},
		{time.UnixMicro(-100_001), -2},
	} {
		if got := windowOf(s, tc.at); got != tc.want {
			t.Errorf("windowOf(%dus) = %d, want %d", tc.at.UnixMicro(), got, tc.want)
		}
	}
}

func TestLimitValidation(t *testing.T) {
	t.Parallel()
	for _, l := range []Limit{
		{WorkType: "", N: 1, Per: time.Second},
		{WorkType: "w", N: 0, Per: time.Second},
		{WorkType: "w", N: 1, Per: 9 * time.Millisecond},
		{WorkType: "w", N: 1, Per: time.Second + time.Nanosecond},
		{WorkType: "w ", N: 1, Per: time.Second},
		{WorkType: "wé", N: 1, Per: time.Second},
		{Key: "crm", N: 1, Per: time.Second},
		{Key: "crm", WorkType: "w", WorkTypes: []string{"a"}, N: 1, Per: time.Second},
		{WorkTypes: []string{"a", "b"}, N: 1, Per: time.Second},
		{Key: "crm", WorkTypes: []string{"a", ""}, N: 1, Per: time.Second},
		{WorkType: "#w", N: 1, Per: time.Second},
		{Key: "#crm", WorkTypes: []string{"a"}, N: 1, Per: time.Second, PerKey: true},
		{WorkType: " w", N: 1, Per: time.Second},
		{Key: "c rm", WorkTypes: []string{"a"}, N: 1, Per: time.Second},
		{Key: "crm\t", WorkTypes: []string{"a"}, N: 1, Per: time.Second},
		{Key: "crm", WorkTypes: []string{"a", "a"}, N: 1, Per: time.Second},
		{Key: "crm", WorkTypes: []string{"a b"}, N: 1, Per: time.Second},
		{Key: "crm", WorkTypes: []string{strings.Repeat("a", 65)}, N: 1, Per: time.Second},
	} {
		if err := l.validate(); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%+v: validate = %v, want ErrInvalid", l, err)
		}
	}
}

func TestLimitsSharingAKey(t *testing.T) {
	t.Parallel()
	crm := Limit{Key: "crm", WorkTypes: []string{"contact", "deal"}, N: 5, Per: time.Second}
	l, err := New(nil, "s", []Limit{crm, {WorkType: "mail", N: 1, Per: time.Second}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.byType["contact"] != l.byType["deal"] || l.byType["contact"] == l.byType["mail"] || l.Limited("other") {
		t.Fatalf("shares by type: %v", l.byType)
	}
	for _, limits := range [][]Limit{
		{crm, {WorkType: "deal", N: 1, Per: time.Second}},
		{crm, {WorkType: "crm", N: 1, Per: time.Second}},
		{crm, {Key: "crm", WorkTypes: []string{"other"}, N: 1, Per: time.Second}},
	} {
		if _, err := New(nil, "s", limits, Options{}); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%+v: New = %v, want ErrInvalid", limits, err)
		}
	}
	if _, err := New(nil, "s", []Limit{crm}, Options{KeepEnded: MinKeepEnded - time.Millisecond}); !errors.Is(err, workqueue.ErrInvalid) {
		t.Errorf("KeepEnded under %s: New = %v, want ErrInvalid", MinKeepEnded, err)
	}
}

// Per-key budgets are counted under names that fit limit_name, differ by
// limit and by key (also where a plain concatenation would not), and
// cannot be a limit's own name.
func TestBudgetNames(t *testing.T) {
	t.Parallel()
	names := map[string]string{}
	for _, c := range [][2]string{{"a", "bc"}, {"ab", "c"}, {"a", ""}, {"b", ""}, {"a", strings.Repeat("k", 128)}, {"a", "b c"}} {
		n := BudgetName(c[0], c[1])
		if !strings.HasPrefix(n, keyedPrefix) || workqueue.ValidWorkType(n) != nil {
			t.Errorf("BudgetName(%q, %q) = %q", c[0], c[1], n)
		}
		if prev, ok := names[n]; ok {
			t.Errorf("BudgetName(%q, %q) = %q, as for %s", c[0], c[1], n, prev)
		}
		names[n] = fmt.Sprint(c)
	}
	l, err := New(nil, "s", []Limit{{WorkType: "sync", N: 1, Per: time.Second, PerKey: true}, {WorkType: "mail", N: 1, Per: time.Second}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if l.GatesClaims("sync") || !l.GatesClaims("mail") || !l.Limited("sync") || l.GatesClaims("other") {
		t.Fatal("a limit per key gates claims, or one per type does not")
	}
	if a, b := l.byType["sync"].budget("k1"), l.byType["sync"].budget("k2"); a == b || a != l.byType["sync"].budget("k1") || a.name != BudgetName("sync", "k1") {
		t.Fatal("keys share a budget, or a key has two")
	}
}

// Refused items are sent to the windows after the current one, a quota
// each, and the windows stay booked from one window's refusals to the
// next's: a backlog refused again in the next window goes behind the
// items already sent on, not into the same windows again. Quotas differ by
// window (15 a second: 2 and 1), and each window is sent its own.
func TestRefusalsFillLaterWindowsOnce(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.UnixMicro(0))
	l := &Limiter{clk: clk}
	s := &share{Limit: Limit{WorkType: "w", N: 15, Per: time.Second}}
	sent := map[int64]int{}
	for window := int64(100); window < 103; window++ {
		s.window = window
		for range 20 {
			at := l.spread(s)
			to := windowOf(s, at)
			if to <= window || at.UnixMicro() != to*s.windowMicros() {
				t.Fatalf("a refusal in window %d sent to %s (window %d)", window, at, to)
			}
			sent[to]++
		}
	}
	for w := int64(101); w <= 101+int64(len(sent))-1; w++ {
		if sent[w] != s.quota(w) {
			t.Fatalf("window %d sent %d refused items, its quota is %d: %v", w, sent[w], s.quota(w), sent)
		}
	}
}

// Idle keys are forgotten: keys with an item waiting to start, items sent
// to a later window, a share of the current window, or a Take under way
// (waiting for or holding the budget's turn) are kept. A sweep
// is due every sweepEvery, and at once after a delete that left more.
func TestSweepForgetsOnlyIdleKeys(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_000_000, 0)
	clk := clock.NewFake(start)
	l, err := New(nil, "s", []Limit{{WorkType: "sync", N: 10, Per: time.Second, PerKey: true}}, Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	m := l.byType["sync"]
	now := windowOf(m.budget(""), start)
	set := func(key string, window int64, waiting int, spreadTo int64) {
		s := m.budget(key)
		s.window, s.waiting, s.spreadTo = window, waiting, spreadTo
	}
	set("idle", now-20, 0, now-19)
	set("never-took", -1, 0, 0)
	set("just-ended", now-1, 0, now)
	set("waiting", now-20, 1, 0)
	set("spread", now-20, 0, now+3)
	set("current", now, 0, 0)
	set("taking", now-20, 0, 0)
	m.budget("taking").takers = 1
	if !l.sweepDue() {
		t.Fatal("the first sweep was not due")
	}
	var kept []string
	for key := range m.keyed {
		kept = append(kept, key)
	}
	slices.Sort(kept)
	if want := []string{"current", "spread", "taking", "waiting"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	if l.sweepDue() {
		t.Fatal("a sweep was due again at once")
	}
	clk.Advance(sweepEvery)
	if !l.sweepDue() {
		t.Fatalf("no sweep due after %s", sweepEvery)
	}
}
