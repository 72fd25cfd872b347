package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) != "" {
		os.Exit(runHelperProcess())
	}
	os.Exit(tidbtest.Main(m))
}

const scope = "tenant-w/pack-1"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type fixture struct {
	t   *testing.T
	db  *sql.DB
	dsn string
	qu  *workqueue.Queue
	ctx context.Context
	seq int
}

func newFixture(t *testing.T, cfg workqueue.Config) *fixture {
	t.Helper()
	qu, db, dsn := queuetest.New(t, cfg, scope)
	return &fixture{t: t, db: db, dsn: dsn, qu: qu, ctx: context.Background()}
}

// enqueue adds n events with one work item each, in lanes of laneSize
// (0: no lane), cycling through the given classes.
func (f *fixture) enqueue(n, laneSize int, workType string, classes ...string) {
	f.t.Helper()
	if len(classes) == 0 {
		classes = []string{"default"}
	}
	const batch = 500
	for start := 0; start < n; start += batch {
		var evs []workqueue.Event
		for i := start; i < min(n, start+batch); i++ {
			f.seq++
			lane := ""
			if laneSize > 0 {
				lane = fmt.Sprintf("lane-%d", i%((n+laneSize-1)/laneSize))
			}
			evs = append(evs, workqueue.Event{
				IdempotencyKey: fmt.Sprintf("ev-%d", f.seq), RouteID: "r", RouteVersion: 1, EventKind: "k",
				SourceKind: "s", SourceID: fmt.Sprint(f.seq), Payload: []byte(fmt.Sprintf(`{"n":%d}`, f.seq)),
				Work: []workqueue.Work{{WorkType: workType, QueueClass: classes[i%len(classes)], SourceLane: lane}},
			})
		}
		if _, err := f.qu.Enqueue(f.ctx, scope, evs); err != nil {
			f.t.Fatalf("enqueue: %v", err)
		}
	}
}

// completedIDs is the set of the scope's completed items.
func (f *fixture) completedIDs() map[int64]bool {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, "SELECT work_id FROM work_item WHERE scope_id = ? AND state = ?", scope, workqueue.StateCompleted)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			f.t.Fatal(err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		f.t.Fatal(err)
	}
	return out
}

func (f *fixture) states() map[string]int {
	f.t.Helper()
	rows, err := f.db.QueryContext(f.ctx, "SELECT state, COUNT(*) FROM work_item WHERE scope_id = ? GROUP BY state", scope)
	if err != nil {
		f.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var s string
		var n int
		if err := rows.Scan(&s, &n); err != nil {
			f.t.Fatal(err)
		}
		out[s] = n
	}
	return out
}

// run starts w and returns a stop function that waits for Run.
func run(t *testing.T, w *worker.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() { cancel(); err = <-done })
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// quietCfg disables the periodic reads and cross-process wakes, so that
// every claim a test sees came from an event the worker itself produced.
func quietCfg(executors int) worker.Config {
	cfg := worker.Config{Scope: scope, Owner: "test", Logger: quiet, Wake: worker.WakeConfig{Off: true}}
	cfg.Scheduler.Executors = executors
	cfg.Controller.GenerationProbeEvery = -1
	cfg.Controller.ReconcileEvery = -1
	return cfg
}

// collector is a handler that reports each run and returns what the test
// scripted for that item's attempt.
type collector struct {
	mu       sync.Mutex
	attempts map[int64]int
	ran      chan int64
	script   func(job *worker.Job, attempt int) error
}

func newCollector(script func(job *worker.Job, attempt int) error) *collector {
	return &collector{attempts: map[int64]int{}, ran: make(chan int64, 100_000), script: script}
}

func (c *collector) handle(ctx context.Context, job *worker.Job) error {
	c.mu.Lock()
	c.attempts[job.Item.WorkID]++
	n := c.attempts[job.Item.WorkID]
	c.mu.Unlock()
	defer func() { c.ran <- job.Item.WorkID }() // also when the script panics
	if c.script != nil {
		return c.script(job, n)
	}
	return nil
}

func (c *collector) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for i := range n {
		select {
		case <-c.ran:
		case <-timeout:
			t.Fatalf("%d of %d attempts ran", i, n)
		}
	}
}

// settled waits until the worker is idle: every attempt finished and the
// controller handled what that caused.
func settled(t *testing.T, f *fixture, w *worker.Worker, want map[string]int) {
	t.Helper()
	var got map[string]int
	// Finishes commit after the handler returned: look until they did.
	waitfor.Until(t, time.Minute, func() (bool, error) {
		err := w.Settle(f.ctx)
		got = f.states()
		return fmt.Sprint(got) == fmt.Sprint(want), err
	}, func() string { return fmt.Sprintf("states %v, want %v", got, want) })
}

func TestDrainsLanesThroughWakesWithoutPeriodicReads(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(300, 10, "deliver", "interactive", "default", "bulk")
	c := newCollector(nil)
	w, err := worker.New(f.qu, quietCfg(8), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 300)
	settled(t, f, w, map[string]int{"completed": 300})
	st := w.Stats()
	// Lane followers became claimable only through promotions, which the
	// worker announced to itself with wakes: no probe, backstop or timer.
	if st.Controller.GenerationProbes != 0 || st.Controller.Reconciles != 1 || st.Controller.DueTimerFires != 0 {
		t.Fatalf("periodic reads happened: %+v", st.Controller)
	}
	if st.Scheduler.MaxConcurrentClaims != 1 {
		t.Fatalf("%d concurrent claims", st.Scheduler.MaxConcurrentClaims)
	}
	for id, n := range c.attempts {
		if n != 1 {
			t.Fatalf("work %d ran %d times", id, n)
		}
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: 500 * time.Millisecond, Max: time.Second, MaxSafeRetries: 3}})
	f.enqueue(4, 0, "deliver")
	// Item order by work id: 1 fails once then succeeds (retry through the
	// exact due timer), 2 panics once, 3 skips, 4 fails permanently.
	c := newCollector(func(job *worker.Job, attempt int) error {
		switch job.Event.SourceID {
		case "1":
			if attempt == 1 {
				return errors.New("dependency unavailable")
			}
		case "2":
			if attempt == 1 {
				panic("handler bug")
			}
		case "3":
			return worker.ErrSkip
		case "4":
			return fmt.Errorf("bad mapping: %w", workqueue.ErrPermanent)
		}
		if string(job.Event.Payload) == "" {
			return errors.New("event payload not loaded")
		}
		return nil
	})
	w, err := worker.New(f.qu, quietCfg(4), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 6)
	settled(t, f, w, map[string]int{"completed": 2, "dead": 1, "skipped": 1})
	st := w.Stats()
	if st.Scheduler.Panics != 1 {
		t.Fatalf("panics %d", st.Scheduler.Panics)
	}
	if st.Controller.DueTimerFires < 1 {
		t.Fatalf("the retries came back without the due timer: %+v", st.Controller)
	}
	var classes []string
	rows, err := f.db.Query("SELECT COALESCE(failure_class, '') FROM work_item WHERE scope_id = ? ORDER BY work_id", scope)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		classes = append(classes, s)
	}
	if fmt.Sprint(classes) != "[   permanent]" { // finishing clears a retried item's failure
		t.Fatalf("failure classes %q", classes)
	}
}

func TestShutdownReleasesRunningItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(2, 0, "deliver")
	started := make(chan struct{}, 2)
	h := func(ctx context.Context, job *worker.Job) error {
		started <- struct{}{}
		<-ctx.Done()
		return ctx.Err()
	}
	w, err := worker.New(f.qu, quietCfg(4), map[string]worker.Handler{"deliver": h})
	if err != nil {
		t.Fatal(err)
	}
	stop := run(t, w)
	<-started
	<-started
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := f.states(); got["pending"] != 2 {
		t.Fatalf("after shutdown: %v, want both released to pending", got)
	}
	// Released, not retried: no failure recorded, no backoff, due now.
	var failed, notDue int
	if err := f.db.QueryRow(`SELECT COUNT(failure_class), COALESCE(SUM(safe_retry_count), 0) + SUM(run_after > NOW(6))
		FROM work_item WHERE scope_id = ?`, scope).Scan(&failed, &notDue); err != nil {
		t.Fatal(err)
	}
	if failed != 0 || notDue != 0 {
		t.Fatalf("shutdown failed %d items and delayed %d: it must release them", failed, notDue)
	}
}

// probingWorker is a quiet worker with a 50ms probe, the only periodic read.
func probingWorker(t *testing.T, f *fixture, c *collector) *worker.Worker {
	t.Helper()
	cfg := quietCfg(2)
	cfg.Controller.GenerationProbeEvery = 50 * time.Millisecond
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestGenerationProbeFindsOtherProcessesWork(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	w := probingWorker(t, f, c)
	run(t, w)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	before := w.Stats().Controller
	// Enqueued through another Queue, as another process whose
	// announcements are lost would: nothing wakes the worker.
	other, err := workqueue.New(f.db, workqueue.Config{Announce: workqueue.AnnounceConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	f.qu = other
	f.enqueue(3, 0, "deliver")
	c.wait(t, 3)
	after := w.Stats().Controller
	if after.GenerationChanges < 1 || after.Claims <= before.Claims {
		t.Fatalf("the enqueue was not noticed through the probe: before %+v after %+v", before, after)
	}
}

// TestEnqueueWakesTheWorkerOfItsQueue: with every periodic read off, an
// enqueue through the worker's own Queue, plain or in a committed Tx,
// starts its work without a Wake call.
func TestEnqueueWakesTheWorkerOfItsQueue(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := newCollector(nil)
	w, err := worker.New(f.qu, quietCfg(2), map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	f.enqueue(2, 0, "deliver")
	c.wait(t, 2)
	err = f.qu.InTx(f.ctx, func(ctx context.Context, tx *workqueue.Tx) error {
		_, err := tx.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: "in-tx", Payload: []byte("{}"),
			Work: []workqueue.Work{{WorkType: "deliver"}}}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	c.wait(t, 1)
	settled(t, f, w, map[string]int{"completed": 3})
	if st := w.Stats().Controller; st.GenerationProbes != 0 || st.DueTimerFires != 0 {
		t.Fatalf("found through periodic reads: %+v", st)
	}
}

func TestMetricsAreRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(20, 0, "deliver")
	reader := sdkmetric.NewManualReader()
	cfg := quietCfg(4)
	cfg.MeterProvider = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	c := newCollector(nil)
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 20)
	settled(t, f, w, map[string]int{"completed": 20})
	collect := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(f.ctx, &rm); err != nil {
			t.Fatal(err)
		}
		sums := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if s, ok := m.Data.(metricdata.Sum[int64]); ok {
					for _, dp := range s.DataPoints {
						sums[m.Name] += dp.Value
					}
				}
				if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
					for _, dp := range h.DataPoints {
						sums[m.Name] += int64(dp.Count)
					}
				}
			}
		}
		return sums
	}
	// An executor records its finish after the batched write it joined
	// returned: the rows can read completed a moment before the last
	// executors recorded them (a loaded machine stretches that moment).
	var sums map[string]int64
	waitfor.Until(t, time.Minute, func() (bool, error) { sums = collect(); return sums[worker.MetricFinished] >= 20, nil },
		func() string { return fmt.Sprintf("finished metric never reached 20: %v", sums) })
	if sums[worker.MetricFinished] != 20 || sums[worker.MetricClaimed] != 20 || sums[worker.MetricClaims] < 1 ||
		sums[worker.MetricClaimDuration] != sums[worker.MetricClaims] {
		t.Fatalf("metrics %v", sums)
	}
}

func TestSupervisorRebuildsOnlyOnStopOrConfigChange(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(3, 3, "deliver") // one lane: two followers stay blocked
	block := make(chan struct{})
	h := func(ctx context.Context, job *worker.Job) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sup := worker.NewSupervisor(ctx, f.qu, map[string]worker.Handler{"deliver": h})
	defer sup.Stop()
	cfg := quietCfg(4)
	for i := range 10 {
		rebuilt, err := sup.Apply(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if rebuilt != (i == 0) {
			t.Fatalf("apply %d: rebuilt=%v", i, rebuilt)
		}
	}
	if sup.Builds() != 1 {
		t.Fatalf("%d builds for one configuration with blocked rows", sup.Builds())
	}
	cfg.Scheduler.Executors = 8
	if rebuilt, err := sup.Apply(cfg); err != nil || !rebuilt {
		t.Fatalf("changed configuration: rebuilt=%v err=%v", rebuilt, err)
	}
	if err := sup.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if rebuilt, err := sup.Apply(cfg); err != nil || !rebuilt {
		t.Fatalf("after stop: rebuilt=%v err=%v", rebuilt, err)
	}
	if sup.Builds() != 3 {
		t.Fatalf("builds %d, want 3", sup.Builds())
	}
	close(block)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	if _, err := worker.New(f.qu, quietCfg(4), nil); !errors.Is(err, worker.ErrConfig) {
		t.Fatalf("no handlers: %v", err)
	}
	bad := quietCfg(4)
	bad.Scheduler.Profile = "fastest"
	if _, err := worker.New(f.qu, bad, map[string]worker.Handler{"x": func(context.Context, *worker.Job) error { return nil }}); err == nil {
		t.Fatal("unknown profile accepted")
	}
	bad = quietCfg(4)
	bad.Scope = ""
	if _, err := worker.New(f.qu, bad, map[string]worker.Handler{"x": func(context.Context, *worker.Job) error { return nil }}); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("empty scope: %v", err)
	}
}

func TestRecordProgressRestartsTheRetrySeries(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{Retry: workqueue.RetryPolicy{Initial: 20 * time.Millisecond, Max: time.Second}})
	f.enqueue(1, 0, "deliver")
	// Attempt 1 fails (series 1); attempt 2 makes progress, then fails: the
	// series restarts, so the count is 1 again, not 2; attempt 3 completes.
	c := newCollector(func(job *worker.Job, attempt int) error {
		switch attempt {
		case 1:
			return errors.New("transient")
		case 2:
			if err := job.RecordProgress(context.Background()); err != nil {
				return err
			}
			if job.Item.SafeRetries != 0 {
				return fmt.Errorf("job still shows %d safe retries", job.Item.SafeRetries)
			}
			return errors.New("transient after progress")
		}
		return nil
	})
	var seen []int32
	var mu sync.Mutex
	wrapped := func(ctx context.Context, job *worker.Job) error {
		mu.Lock()
		seen = append(seen, job.Item.SafeRetries)
		mu.Unlock()
		return c.handle(ctx, job)
	}
	w, err := worker.New(f.qu, quietCfg(1), map[string]worker.Handler{"deliver": wrapped})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 3)
	settled(t, f, w, map[string]int{"completed": 1})
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(seen) != "[0 1 1]" {
		t.Fatalf("safe retries seen by attempts: %v, want [0 1 1]", seen)
	}
}
