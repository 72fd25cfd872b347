package worker_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// maxInSpan is the most of starts (sorted) within any span of length span.
func maxInSpan(starts []time.Time, span time.Duration) int {
	most, j := 0, 0
	for i := range starts {
		for starts[i].Sub(starts[j]) >= span {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// TestRateLimitAcrossProcesses: three worker processes share a limit of
// 50 starts a second on "deliver", over a backlog of 1,100 items (22
// seconds of the limit).
//   - The budget's rows: no 10 consecutive windows (one second) granted
//     more than 50 starts, and none more than its 5.
//   - The handlers' own clocks: no span of one second holds more than 60
//     starts. Grants obey Limit.Bound (55: N + ceil(N/k), k = 10 windows a
//     second); a handler starts a moment after its grant, so a span of
//     starts may reach into one more window (N + 2 ceil(N/k)).
//   - The first 1,000 starts come within 10% of 50 a second.
//   - Every item completes with one attempt (an item given back for lack
//     of budget does not spend one).
func TestRateLimitAcrossProcesses(t *testing.T) {
	f := newFixture(t, workqueue.Config{})
	const items = 1100
	f.enqueue(items, 0, "deliver")
	limit := ratelimit.Limit{WorkType: "deliver", N: 50, Per: time.Second}
	var procs []*helperProc
	for _, name := range []string{"rate-a", "rate-b", "rate-c"} {
		h := startHelper(t, name, f.dsn, helperRateEnv+"=50/1s", helperStampEnv+"=1")
		procs = append(procs, h)
	}
	for _, h := range procs {
		h.send(t, "go")
	}
	var starts []time.Time
	seen := map[string]bool{}
	byProcess := map[string]int{}
	deadline := time.After(3 * time.Minute)
	for len(seen) < items {
		var line, who string
		select {
		case line = <-procs[0].lines:
			who = procs[0].name
		case line = <-procs[1].lines:
			who = procs[1].name
		case line = <-procs[2].lines:
			who = procs[2].name
		case <-deadline:
			t.Fatalf("%d of %d items started", len(seen), items)
		}
		fields := strings.Fields(line)
		if len(fields) != 3 || fields[0] != "ran" {
			continue
		}
		if seen[fields[1]] {
			t.Fatalf("item %s started twice", fields[1])
		}
		seen[fields[1]] = true
		ns, err := strconv.ParseInt(fields[2], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		starts = append(starts, time.Unix(0, ns))
		byProcess[who]++
	}
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	most := maxInSpan(starts, time.Second)
	observedBound := limit.Bound() + (limit.N+9)/10
	if most > observedBound {
		t.Errorf("%d starts within one second, bound %d", most, observedBound)
	}
	var busiestWindow, busiestSecond int
	if err := f.db.QueryRow(`SELECT COALESCE(MAX(granted), 0), COALESCE(MAX(per_second), 0) FROM (
		SELECT granted, SUM(granted) OVER (ORDER BY window_index RANGE BETWEEN 9 PRECEDING AND CURRENT ROW) AS per_second
		FROM rate_window WHERE scope_id = ? AND limit_name = 'deliver') w`, scope).Scan(&busiestWindow, &busiestSecond); err != nil {
		t.Fatal(err)
	}
	if busiestWindow > 5 || busiestSecond > limit.N {
		t.Errorf("the budget's rows granted %d in one window and %d in ten consecutive ones, want at most 5 and %d", busiestWindow, busiestSecond, limit.N)
	}
	elapsed := starts[999].Sub(starts[0])
	rate := 999 / elapsed.Seconds()
	if rate < 45 || rate > 55 {
		t.Errorf("the first 1,000 starts took %s: %.1f a second, want within 10%% of 50", elapsed.Round(time.Millisecond), rate)
	}
	var unfinished, maxAttempts int
	waitfor.Until(t, time.Minute, func() (bool, error) {
		err := f.db.QueryRow("SELECT COUNT(*) - SUM(state = 'completed'), MAX(attempt_count) FROM work_item WHERE scope_id = ?", scope).Scan(&unfinished, &maxAttempts)
		return unfinished == 0, err
	}, func() string { return fmt.Sprintf("%d items not completed", unfinished) })
	if maxAttempts != 1 {
		t.Errorf("an item made %d attempts, want 1 each", maxAttempts)
	}
	for _, h := range procs {
		h.send(t, "stop")
	}
	t.Logf("%d items: the busiest second started %d (grant bound %d, observed bound %d); ten consecutive windows granted at most %d; first 1,000 starts at %.1f a second; by process %v",
		items, most, limit.Bound(), observedBound, busiestSecond, rate, byProcess)
}

// A limited work type whose budget is spent leaves other work alone: with
// one "slow" start a minute, one slow item starts, the other nine stay
// pending with no attempt spent, and every "fast" item completes.
func TestRateLimitLeavesOtherWorkAlone(t *testing.T) {
	f := newFixture(t, workqueue.Config{})
	f.enqueue(10, 0, "slow")
	f.enqueue(50, 0, "fast")
	var mu sync.Mutex
	ran := map[string]int{}
	h := func(kind string) worker.Handler {
		return func(context.Context, *worker.Job) error {
			mu.Lock()
			ran[kind]++
			mu.Unlock()
			return nil
		}
	}
	cfg := quietCfg(4)
	cfg.Limits = []ratelimit.Limit{{WorkType: "slow", N: 1, Per: time.Minute}}
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"slow": h("slow"), "fast": h("fast")})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	settled(t, f, w, map[string]int{workqueue.StateCompleted: 51, workqueue.StatePending: 9})
	var attempts int
	if err := f.db.QueryRow("SELECT COALESCE(SUM(attempt_count), -1) FROM work_item WHERE scope_id = ? AND state = 'pending'", scope).Scan(&attempts); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["slow"] != 1 || ran["fast"] != 50 || attempts != 0 {
		t.Fatalf("ran %v, pending items' attempts %d; want 1 slow, 50 fast, 0", ran, attempts)
	}
}

// Limits are checked when the worker is built.
func TestRateLimitValidation(t *testing.T) {
	f := newFixture(t, workqueue.Config{})
	for _, lim := range [][]ratelimit.Limit{
		{{WorkType: "deliver", N: 0, Per: time.Second}},
		{{WorkType: "deliver", N: 5, Per: time.Millisecond}},
		{{WorkType: "", N: 5, Per: time.Second}},
		{{WorkType: "deliver", N: 5, Per: time.Second}, {WorkType: "deliver", N: 6, Per: time.Second}},
	} {
		cfg := quietCfg(1)
		cfg.Limits = lim
		if _, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": func(context.Context, *worker.Job) error { return nil }}); err == nil {
			t.Errorf("limits %+v accepted", lim)
		}
	}
}
