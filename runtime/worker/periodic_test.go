package worker_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/workqueue"
)

// tickRow is one stored tick of the helpers' schedule "every".
type tickRow struct {
	tick   time.Time
	lead   time.Duration // stored this long after the tick by the database's clock
	items  int
	workID int64
	state  string
}

const tickKeyLayout = "2006-01-02T15:04:05.000000Z"

// storedTicks reads the ticks of the schedule "every", in tick order.
func (f *fixture) storedTicks() []tickRow {
	f.t.Helper()
	rows, err := f.db.Query(`SELECT e.idempotency_key, UNIX_TIMESTAMP(e.created_at) * 1000000,
		COUNT(w.work_id), COALESCE(MIN(w.work_id), 0), COALESCE(MIN(w.state), '')
		FROM event e LEFT JOIN work_item w ON w.event_id = e.event_id
		WHERE e.scope_id = ? AND e.idempotency_key LIKE 'periodic/every/%'
		GROUP BY e.event_id, e.idempotency_key, e.created_at ORDER BY e.idempotency_key`, scope)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	var out []tickRow
	for rows.Next() {
		var key string
		var created float64
		var r tickRow
		if err := rows.Scan(&key, &created, &r.items, &r.workID, &r.state); err != nil {
			f.t.Fatal(err)
		}
		if r.tick, err = time.Parse(tickKeyLayout, strings.TrimPrefix(key, "periodic/every/")); err != nil {
			f.t.Fatalf("key %q: %v", key, err)
		}
		r.lead = time.UnixMicro(int64(created)).Sub(r.tick)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

// checkTicks fails unless ticks are one per second with no gap, each one
// event with one item, none stored before its tick by the database's
// clock; it returns the largest lead after the first tick (the first is
// the one already past when the processes started).
func checkTicks(t *testing.T, ticks []tickRow) time.Duration {
	t.Helper()
	var worst time.Duration
	for i, r := range ticks {
		if r.items != 1 {
			t.Errorf("tick %s has %d items, want 1", r.tick.Format(tickKeyLayout), r.items)
		}
		if r.lead < 0 {
			t.Errorf("tick %s was stored %s before it was due", r.tick.Format(tickKeyLayout), -r.lead)
		}
		if i > 0 {
			if gap := r.tick.Sub(ticks[i-1].tick); gap != time.Second {
				t.Errorf("ticks %s and %s are %s apart: a tick was lost", ticks[i-1].tick.Format(tickKeyLayout), r.tick.Format(tickKeyLayout), gap)
			}
			worst = max(worst, r.lead)
		}
	}
	return worst
}

// ranLines collects the "ran ID" lines a helper printed so far (its
// channel may be closed: a killed process).
func ranLines(h *helperProc, into map[string][]string) {
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				return
			}
			if id, ok := strings.CutPrefix(line, "ran "); ok {
				into[id] = append(into[id], h.name)
			}
		default:
			return
		}
	}
}

// TestPeriodicExactlyOncePerTick: three worker processes run one schedule
// of one tick a second, with no leader. One is killed after a few ticks,
// another frozen (SIGSTOP) for 15 ticks and then resumed, for 60 ticks in
// all. Every tick is stored once, with one item, none lost and none early;
// a fresh process then drains what the stopped ones left, and every item
// completed. Each ran once, except an item whose first run was in the
// frozen or killed process (its lease ran out and another process ran it:
// execution is at least once, storage exactly once).
func TestPeriodicExactlyOncePerTick(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	env := []string{helperPeriodicEnv + "=1s", helperLeaseEnv + "=3s"}
	a := startHelper(t, "periodic-a", f.dsn, env...)
	b := startHelper(t, "periodic-b", f.dsn, env...)
	c := startHelper(t, "periodic-c", f.dsn, env...)
	for _, h := range []*helperProc{a, b, c} {
		h.send(t, "go")
	}
	ran := map[string][]string{}
	waitTicks := func(n int) {
		t.Helper()
		var got int
		waitfor.Until(t, 3*time.Minute, func() (bool, error) {
			for _, h := range []*helperProc{a, b, c} {
				ranLines(h, ran)
			}
			got = len(f.storedTicks())
			return got >= n, nil
		}, func() string { return fmt.Sprintf("%d ticks stored, want %d", got, n) })
	}
	waitTicks(5)
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	waitTicks(15)
	if err := syscall.Kill(b.cmd.Process.Pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitTicks(30)
	if err := syscall.Kill(b.cmd.Process.Pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitTicks(60)
	for _, h := range []*helperProc{b, c} {
		h.send(t, "stop")
		for line := h.next(t); line != "bye"; line = h.next(t) {
			if id, ok := strings.CutPrefix(line, "ran "); ok {
				ran[id] = append(ran[id], h.name)
			}
		}
	}
	ticks := f.storedTicks()
	worst := checkTicks(t, ticks)

	// Drain what the stopped processes left (no schedule here).
	d := startHelper(t, "drain", f.dsn, helperLeaseEnv+"=3s")
	d.send(t, "go")
	waitfor.Until(t, 2*time.Minute, func() (bool, error) {
		ranLines(d, ran)
		for _, r := range f.storedTicks() {
			if r.state != workqueue.StateCompleted {
				return false, nil
			}
		}
		return true, nil
	}, func() string { return "ticks' items not all completed" })
	ranLines(d, ran)
	again := 0
	for _, r := range ticks {
		runs := ran[fmt.Sprint(r.workID)]
		switch {
		case len(runs) == 0:
			t.Errorf("tick %s's item %d completed without a run reported", r.tick.Format(tickKeyLayout), r.workID)
		case len(runs) > 1 && runs[0] != a.name && runs[0] != b.name:
			t.Errorf("tick %s's item %d ran %d times (%v)", r.tick.Format(tickKeyLayout), r.workID, len(runs), runs)
		case len(runs) > 1:
			again++
		}
	}
	byProcess := map[string]int{}
	for _, runs := range ran {
		for _, p := range runs {
			byProcess[p]++
		}
	}
	t.Logf("%d ticks, each stored once; latest store %s after its tick; runs by process %v; %d run again after the frozen or killed process", len(ticks), worst.Round(time.Millisecond), byProcess, again)
}

// TestPeriodicClockSkew: two worker processes of one schedule whose clocks
// are off by +4s and -4s (clock.Skewed). Which ticks are due is read from
// the database's clock, so neither stores a tick early (the fast one would
// by 4s if it trusted its own clock) or loses one, and each is stored once.
func TestPeriodicClockSkew(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	fast := startHelper(t, "fast", f.dsn, helperPeriodicEnv+"=1s", helperClockSkewEnv+"=4s")
	slow := startHelper(t, "slow", f.dsn, helperPeriodicEnv+"=1s", helperClockSkewEnv+"=-4s")
	fast.send(t, "go")
	slow.send(t, "go")
	var n int
	waitfor.Until(t, 2*time.Minute, func() (bool, error) { n = len(f.storedTicks()); return n >= 12, nil },
		func() string { return fmt.Sprintf("%d ticks stored", n) })
	for _, h := range []*helperProc{fast, slow} {
		h.send(t, "stop")
		for line := h.next(t); line != "bye"; line = h.next(t) {
		}
	}
	worst := checkTicks(t, f.storedTicks())
	t.Logf("%d ticks, each stored once, none early; latest store %s after its tick", n, worst.Round(time.Millisecond))
}
