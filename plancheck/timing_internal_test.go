package plancheck

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestJudgeChurn(t *testing.T) {
	hot := Case{Query: "Hot", Hot: true}
	if v := judgeChurn(hot, 2*time.Millisecond, 9*time.Millisecond); len(v) != 1 || !strings.Contains(v[0], "4.5x slower on the churned fixture") || !strings.Contains(v[0], "ratio of 3.0") {
		t.Fatalf("4.5x slower: %v", v)
	}
	if v := judgeChurn(hot, 2*time.Millisecond, 5*time.Millisecond); len(v) != 0 {
		t.Fatalf("2.5x is within the default ratio: %v", v)
	}
	if v := judgeChurn(hot, 100*time.Microsecond, time.Millisecond); len(v) != 0 {
		t.Fatalf("below the noise floor: %v", v)
	}
	if v := judgeChurn(Case{Query: "Hot", ChurnRatio: 10}, 2*time.Millisecond, 9*time.Millisecond); len(v) != 0 {
		t.Fatalf("a stated ratio of 10: %v", v)
	}
	if v := judgeChurn(Case{Query: "Hot", ChurnAllow: "reviewed"}, time.Millisecond, time.Second); len(v) != 0 {
		t.Fatalf("allowed: %v", v)
	}
}

func TestJudgeTime(t *testing.T) {
	hot := Case{Query: "Hot", Hot: true}
	obs := func(fixture string, d time.Duration) Observation { return Observation{Fixture: fixture, Median: d} }
	if v := judgeTime(hot, obs("scale 100", time.Millisecond), obs("scale 10000", 20*time.Millisecond)); len(v) != 1 || !strings.Contains(v[0], "20.0x slower at scale 10000") {
		t.Fatalf("20x slower: %v", v)
	}
	if v := judgeTime(hot, obs("scale 100", 100*time.Microsecond), obs("scale 10000", 1900*time.Microsecond)); len(v) != 0 {
		t.Fatalf("under the noise floor: %v", v)
	}
	if v := judgeTime(Case{Query: "Hot", TimeRatio: 25}, obs("a", time.Millisecond), obs("b", 20*time.Millisecond)); len(v) != 0 {
		t.Fatalf("a stated ratio of 25: %v", v)
	}
	if v := judgeTime(Case{Query: "Hot", TimeAllow: "reviewed"}, obs("a", time.Millisecond), obs("b", time.Second)); len(v) != 0 {
		t.Fatalf("allowed: %v", v)
	}
}

func TestExecTime(t *testing.T) {
	for info, want := range map[string]time.Duration{
		"time:24.3ms, loops:2, RU:11.38":    24300 * time.Microsecond,
		"time:850.2µs, loops:1":             850200 * time.Nanosecond,
		"cop_task: {num: 1}, time:1.5s":     1500 * time.Millisecond,
		"tikv_task:{time:3ms}, time:40.1us": 40100 * time.Nanosecond,
	} {
		got, ok := ExecTime([]Operator{{ExecInfo: info}})
		if !ok || got != want {
			t.Errorf("%q: %v %v, want %v", info, got, ok, want)
		}
	}
}

// A burst of load that slows three consecutive runs falls on both sides,
// so neither median moves and the ratio stays honest; a side that is
// really slower stays slower.
func TestInterleavedMediansShareABurst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		large  time.Duration
		wantHi time.Duration
	}{{"same cost", time.Millisecond, time.Millisecond}, {"growing range", 10 * time.Millisecond, 10 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			var order []int
			call := 0
			var medians [2]time.Duration
			err := interleavedMedians(5, func(side int) (time.Duration, error) {
				call++
				order = append(order, side)
				d := time.Millisecond
				if side == 1 {
					d = tc.large
				}
				if call >= 5 && call <= 7 { // the burst
					d += 50 * time.Millisecond
				}
				return d, nil
			}, &medians)
			if err != nil {
				t.Fatal(err)
			}
			if want := []int{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}; !slices.Equal(order, want) {
				t.Fatalf("order %v, want alternating with a warm-up round", order)
			}
			if medians != [2]time.Duration{time.Millisecond, tc.wantHi} {
				t.Fatalf("medians %v", medians)
			}
		})
	}
}
