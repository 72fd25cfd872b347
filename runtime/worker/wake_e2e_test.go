package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// next returns the helper's next output line; the deadline only bounds a
// hung test.
func (h *helperProc) next(t testing.TB) string {
	t.Helper()
	select {
	case line, ok := <-h.lines:
		if !ok {
			t.Fatalf("%s exited: %s", h.name, h.stderr.String())
		}
		return line
	case <-time.After(5 * time.Minute):
		t.Fatalf("%s said nothing for 5 minutes (stderr: %s)", h.name, h.stderr.String())
	}
	return ""
}

// report sends cmd and returns the helperReport it answers with, skipping
// "ran" lines (counted in ran).
func (h *helperProc) report(t testing.TB, cmd string, ran map[string]int) helperReport {
	t.Helper()
	h.send(t, cmd)
	for {
		line := h.next(t)
		if strings.HasPrefix(line, "ran ") {
			ran[h.name]++
			continue
		}
		var r helperReport
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &r); err != nil {
			t.Fatalf("%s: %q: %v", h.name, line, err)
		}
		return r
	}
}

// idleClockScale compresses the idle test's time: at 480x, one real
// minute is eight hours of the workers' timers (probes, backstop,
// maintenance, endpoint renewal), all at their default periods. Only the
// timers are scaled: waits measured by the database (a lease expiry, a
// retry's delay) still take real time, so the scaled clock is for idle
// behaviour, not for drains.
const idleClockScale = 480

// TestTwoProcessesIdleWithWakes: two worker processes with default
// settings (wakes on, default periods; only their timers run on a clock
// 480 times faster than real time) wake each other: work enqueued in one
// is announced to the other, both stay in quiet mode, and then, idle for
// eight hours of their clocks, each sends no more SQL than its maintenance
// (two indexed statements every 2 minutes, kept in quiet mode), its quiet
// probes (every 20 minutes) and one statement per five minutes for the
// rest, prepares and the claim turn the first quiet probe after the drain
// makes included.
func TestTwoProcessesIdleWithWakes(t *testing.T) {
	// Not parallel: it counts what quiet workers in other processes send
	// and miss, and a wake that arrives late on a crowded machine looks
	// like a missed one.
	f := newFixture(t, workqueue.Config{})
	env := []string{helperDefaultsEnv + "=1", fmt.Sprintf("%s=%d", helperClockScaleEnv, idleClockScale)}
	a, b := startHelper(t, "worker-a", f.dsn, env...), startHelper(t, "worker-b", f.dsn, env...)
	ran := map[string]int{}
	for _, p := range []*helperProc{a, b} {
		p.send(t, "go")
	}
	// Both registered and past their self-tests.
	for _, p := range []*helperProc{a, b} {
		waitfor.Until(t, time.Minute, func() (bool, error) { return p.report(t, "stats", ran).Stats.Quiet, nil },
			func() string { return p.name + " not quiet" })
	}
	eps, err := f.qu.WakeEndpoints(f.ctx, scope)
	if err != nil || len(eps) != 2 {
		t.Fatalf("live endpoints %v (%v), want one per process", eps, err)
	}
	// Work enqueued in A: B hears of it by a wake.
	const items = 40
	a.send(t, "enqueue "+strconv.Itoa(items))
	for ran["worker-a"]+ran["worker-b"] < items {
		select {
		case line := <-a.lines:
			if strings.HasPrefix(line, "ran ") {
				ran["worker-a"]++
			}
		case line := <-b.lines:
			if strings.HasPrefix(line, "ran ") {
				ran["worker-b"]++
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("ran %v of %d", ran, items)
		}
	}
	if rb := b.report(t, "stats", ran); rb.Stats.Wake.Delivered < 1 {
		t.Fatalf("B was not woken by A's enqueue: %+v", rb.Stats.Wake)
	}
	// Wait for the completions to commit before the idle window.
	waitfor.Until(t, time.Minute, func() (bool, error) { return f.states()["completed"] == items, nil },
		func() string { return fmt.Sprintf("states %v", f.states()) })
	// Eight hours of the workers' clocks, and 40 minutes more: the checks
	// below expect the ticks due at the eighth hour, which a loaded
	// machine delivers a little late.
	const window = time.Minute + 5*time.Second
	const virtual = window * idleClockScale
	for _, p := range []*helperProc{a, b} {
		p.send(t, fmt.Sprintf("idle %d", window.Milliseconds()))
	}
	// Maintenance (2m, kept in quiet mode: it repairs what nobody
	// announced) costs its two statements, the safety page and the lane
	// recovery page; a quiet probe (20m) one scope read and two one-row
	// scans per served class; the rest (backstops, renewals, lookups,
	// prepares) at most one per five minutes.
	maintenances := int64(virtual / controller.DefaultMaintainEvery)
	probes := int64(virtual / controller.DefaultQuietProbeEvery)
	const classes = 3 // the default profile's
	budget := 2*(maintenances+1) + (1+2*classes)*(probes+1) + int64(virtual/(5*time.Minute))
	for _, p := range []*helperProc{a, b} {
		line := p.next(t)
		var r helperReport
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &r); err != nil {
			t.Fatalf("%s: %q: %v", p.name, line, err)
		}
		c := r.Stats.Controller
		t.Logf("%s: ran %d; idle for %s of its clock: %d statements (one per %s) %v; probes %d, reconciles %d, maintenances %d, missed wakes %d; wake %+v",
			p.name, ran[p.name], virtual, r.IdleStatements, (virtual / time.Duration(max(r.IdleStatements, 1))).Round(time.Second),
			r.IdleByStatement, c.GenerationProbes, c.Reconciles, c.Maintenances, c.MissedWakes, r.Stats.Wake)
		if r.IdleStatements > budget {
			t.Errorf("%s sent %d statements in %s idle, above its budget (%d: maintenance, quiet probes, one more per five minutes)", p.name, r.IdleStatements, virtual, budget)
		}
		if m := r.IdleByStatement["DependencySafetyPage"] + r.IdleByStatement["BlockedPage"]; m > 2*(int64(c.Maintenances)+1) {
			t.Errorf("%s: %d maintenance statements in %d maintenances, want at most two each while idle", p.name, m, c.Maintenances)
		}
		if !r.Stats.Quiet || c.MissedWakes != 0 {
			t.Errorf("%s: quiet %t, missed wakes %d", p.name, r.Stats.Quiet, c.MissedWakes)
		}
		if c.Reconciles < 3 || c.GenerationProbes < 24 || c.Maintenances < 2 {
			t.Errorf("%s: the safety net did not run in eight hours (probes %d, reconciles %d, maintenances %d)", p.name, c.GenerationProbes, c.Reconciles, c.Maintenances)
		}
	}
	for _, p := range []*helperProc{a, b} {
		p.send(t, "stop")
		for line := p.next(t); line != "bye"; line = p.next(t) {
		}
	}
	if eps, err := f.qu.WakeEndpoints(f.ctx, scope); err != nil || len(eps) != 0 {
		t.Fatalf("endpoints left after both stopped: %v (%v)", eps, err)
	}
}

// BenchmarkCrossProcessWakeLatency: this process enqueues one item at a
// time through a Queue with a wake hub (an API process); a worker process
// with default settings runs it. Reported: enqueue commit -> handler start
// latency, p50-ms and p99-ms (targets 50 and 200), and max-ms. Without
// wakes the worker would find each item on its generation probe, every
// 15s.
func BenchmarkCrossProcessWakeLatency(b *testing.B) {
	qu, _, dsn := queuetest.New(b, workqueue.Config{}, scope)
	hub, err := wake.New(qu, wake.Config{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer hub.Close()
	committed := make(chan time.Time, 1)
	stop := qu.OnAnnounce(func(workqueue.Announcement) { committed <- time.Now() }) // only enqueues announce here
	defer stop()
	w := startHelper(b, "worker", dsn, helperStampEnv+"=1")
	w.send(b, "go")
	waitfor.Until(b, time.Minute, func() (bool, error) {
		eps, err := qu.WakeEndpoints(context.Background(), scope)
		return err == nil && len(eps) == 1, nil
	}, func() string { return "the worker process did not register its wake endpoint" })
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("bench-%d", i)
		_, err := qu.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k",
			SourceKind: "s", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}}})
		if err != nil {
			b.Fatal(err)
		}
		lat = append(lat, w.ranAt(b).Sub(<-committed))
	}
	b.StopTimer()
	reportLatencies(b, w, lat)
}

// ranAt reads the stamping helper's next line, "ran ID UNIXNANO", and
// returns when the handler started.
func (h *helperProc) ranAt(b *testing.B) time.Time {
	b.Helper()
	fields := strings.Fields(h.next(b))
	if len(fields) != 3 || fields[0] != "ran" {
		b.Fatalf("unexpected line %q", strings.Join(fields, " "))
	}
	ns, err := strconv.ParseInt(fields[2], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return time.Unix(0, ns)
}

// reportLatencies reports p50-ms, p99-ms and max-ms of lat, and how often
// the worker process's probe found work (not a wake), then stops it.
func reportLatencies(b *testing.B, w *helperProc, lat []time.Duration) {
	b.Helper()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(queuetest.Percentile(lat, 50)), "p50-ms")
	b.ReportMetric(ms(queuetest.Percentile(lat, 99)), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	st := w.report(b, "stats", map[string]int{})
	b.ReportMetric(float64(st.Stats.Controller.GenerationChanges), "probe-finds")
	w.send(b, "stop")
}

// waitQuiet polls the worker until its quiet mode is want; the deadline
// only bounds a hung test.
func waitQuiet(t *testing.T, w *worker.Worker, want bool) {
	t.Helper()
	waitfor.Until(t, 30*time.Second, func() (bool, error) { return w.Stats().Quiet == want, nil },
		func() string { return fmt.Sprintf("quiet never became %t: %+v", want, w.Stats()) })
}

// A worker whose wakes stop arriving (here: work enqueued by a process
// that announces nothing, as an old laneq version would) is found by the quiet
// probe, which counts a missed wake and puts the worker back on the normal
// probe period; the next wake that arrives makes it quiet again.
func TestMissedWakeFallsBackToProbing(t *testing.T) {
	// Not parallel: it counts what quiet workers in other processes send
	// and miss, and a wake that arrives late on a crowded machine looks
	// like a missed one.
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	clk := clock.NewFake(time.Now())
	cfg := worker.Config{Scope: scope, Owner: "test", Logger: quiet}
	cfg.Controller.Clock = clk
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	start := clk.Now()
	run(t, w)
	// Quiet once every sender's endpoint cache can have read the new
	// endpoint (EndpointCacheTTL on the worker's clock).
	if !clk.WaitArmed(start.Add(wake.DefaultEndpointCacheTTL), 30*time.Second) {
		t.Fatal("the endpoint-known timer was not armed")
	}
	clk.Advance(wake.DefaultEndpointCacheTTL)
	waitQuiet(t, w, true)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	// A process that announces nothing (as an old laneq version would).
	other, err := workqueue.New(f.db, workqueue.Config{Announce: workqueue.AnnounceConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	f.qu = other
	f.enqueue(2, 0, "deliver")
	clk.Advance(controller.DefaultQuietProbeEvery)
	c.wait(t, 2)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	// No wake within the grace after the probe's claim.
	if !clk.WaitArmed(clk.Now().Add(controller.DefaultMissedWakeGrace), 30*time.Second) {
		t.Fatal("the missed-wake grace was not armed")
	}
	clk.Advance(controller.DefaultMissedWakeGrace)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Controller.MissedWakes != 1 || st.Quiet {
		t.Fatalf("after a missed wake: quiet %t, %+v", st.Quiet, st.Controller)
	}
	// A process with a hub announces its enqueue: the wake makes the
	// worker quiet again (and runs the item without any probe).
	hub, err := wake.New(other, wake.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	probes := w.Stats().Controller.GenerationProbes
	f.enqueue(1, 0, "deliver")
	c.wait(t, 1)
	waitQuiet(t, w, true)
	if st := w.Stats(); st.Wake.Delivered < 1 || st.Controller.GenerationProbes > probes+2 {
		t.Fatalf("the announced item was not found by a wake: %+v", st)
	}
}

// A worker whose advertised address does not reach it (a wrong port
// mapping) fails its self-test, never enters quiet mode, and finds other
// processes' work on the normal probe period.
func TestUnreachableWorkerKeepsProbing(t *testing.T) {
	// Not parallel: it counts what quiet workers in other processes send
	// and miss, and a wake that arrives late on a crowded machine looks
	// like a missed one.
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	clk := clock.NewFake(time.Now())
	cfg := worker.Config{Scope: scope, Owner: "test", Logger: quiet}
	cfg.Controller.Clock = clk
	cfg.Wake.Hub.Advertise = "127.0.0.1:9" // the discard port: nothing comes back
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(wake.DefaultSelfTestTimeout)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	hubOther, err := wake.New(f.qu, wake.Config{Logger: quiet}) // announces to the wrong address
	if err != nil {
		t.Fatal(err)
	}
	defer hubOther.Close()
	other, err := workqueue.New(f.db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hubOther.Watch(other)
	f.qu = other
	f.enqueue(1, 0, "deliver")
	clk.Advance(controller.DefaultGenerationProbeEvery)
	c.wait(t, 1)
	if st := w.Stats(); st.Quiet || st.Controller.GenerationChanges < 1 || st.Wake.SelfTests != 0 {
		t.Fatalf("an unreachable worker: quiet %t, %+v, wake %+v", st.Quiet, st.Controller, st.Wake)
	}
}

// Work another process enqueues with a delay longer than the normal
// backstop reaches a quiet worker on time: the wake asks it to look far,
// its lookup finds the due time and the due timer runs the item, with no
// backstop (four hours away) involved.
func TestDelayedWorkFromAnotherProcessRunsOnTime(t *testing.T) {
	// Not parallel: it counts what quiet workers in other processes send
	// and miss, and a wake that arrives late on a crowded machine looks
	// like a missed one.
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	cfg := worker.Config{Scope: scope, Owner: "test", Logger: quiet}
	cfg.Controller.ReconcileEvery = time.Second // the normal lookups look 1s ahead
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	waitQuiet(t, w, true)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	other, err := workqueue.New(f.db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	hub, err := wake.New(other, wake.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer hub.Close()
	before := w.Stats().Controller
	_, err = other.Enqueue(f.ctx, scope, []workqueue.Event{{IdempotencyKey: "later", RouteID: "r", RouteVersion: 1, EventKind: "k",
		SourceKind: "s", SourceID: "later", Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", Delay: 8 * time.Second}}}}) // past the wake, its claim turn and the far lookup, however slow the machine
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, 1)
	after := w.Stats().Controller
	if after.FarLookups <= before.FarLookups || after.DueTimerFires <= before.DueTimerFires || after.Reconciles != before.Reconciles {
		t.Fatalf("the delayed item was not run by the due timer after a far lookup: before %+v after %+v", before, after)
	}
}
