package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// enqueueTo adds n events of one "deliver" item each to scope, keyed by
// prefix (no lane).
func enqueueTo(t testing.TB, qu *workqueue.Queue, scope, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += 500 {
		var evs []workqueue.Event
		for i := start; i < min(n, start+500); i++ {
			key := fmt.Sprintf("%s-%d", prefix, i)
			evs = append(evs, workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k",
				SourceKind: "s", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}})
		}
		if _, err := qu.Enqueue(context.Background(), scope, evs); err != nil {
			t.Fatalf("enqueue into %s: %v", scope, err)
		}
	}
}

// openPool opens a second pool on the test's database: another process's
// Queue.
func openPool(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// ensureScopes creates the scopes.
func ensureScopes(t testing.TB, qu *workqueue.Queue, scopes ...string) {
	t.Helper()
	for _, s := range scopes {
		if err := qu.EnsureScope(context.Background(), s, 1); err != nil {
			t.Fatal(err)
		}
	}
}

// runGroup starts g and returns a stop function that waits for Run.
func runGroup(t testing.TB, g *worker.Group) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("group run: %v", err)
				}
			case <-time.After(time.Minute):
				t.Error("group did not stop within a minute")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// counting is a handler counting runs per scope.
type counting struct {
	mu  sync.Mutex
	ran map[string]int
}

func (c *counting) handler(_ context.Context, job *worker.Job) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ran == nil {
		c.ran = map[string]int{}
	}
	c.ran[job.Item.Scope]++
	return nil
}

func (c *counting) of(scope string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ran[scope]
}

// TestGroupServesListedScopesAndIdlesThem: one group serves three listed
// scopes; the members of the scopes that had work run it and stop once
// their scopes are drained; work enqueued later by another process's
// Queue (its announcement the only signal) starts an idle scope again,
// and so does work no announcement names, found by the idle probe's mark.
func TestGroupServesListedScopesAndIdlesThem(t *testing.T) {
	t.Parallel()
	qu, _, dsn := queuetest.New(t, workqueue.Config{}, "grp/a")
	ensureScopes(t, qu, "grp/b", "grp/c")
	var c counting
	g, err := worker.NewGroup(qu, worker.GroupConfig{
		Scopes: []string{"grp/a", "grp/b", "grp/c"}, IdleAfter: 100 * time.Millisecond,
		Member: worker.Config{Logger: quiet},
	}, map[string]worker.Handler{"deliver": c.handler})
	if err != nil {
		t.Fatal(err)
	}
	enqueueTo(t, qu, "grp/a", "a", 30)
	enqueueTo(t, qu, "grp/b", "b", 20)
	runGroup(t, g)
	waitfor.Until(t, time.Minute, func() (bool, error) {
		st := g.Stats()
		return c.of("grp/a") == 30 && c.of("grp/b") == 20 && st.Active == 0 && st.Quiet, nil
	}, func() string { return fmt.Sprintf("ran %v, stats %+v", c.ran, g.Stats()) })
	if st := g.Stats(); st.Activations != 2 || st.Deactivations != 2 || st.Scopes != 3 {
		t.Fatalf("stats %+v: want the two scopes with work started and stopped once each, the idle one never", st)
	}

	// Another process's Queue enqueues: its announcement reaches the
	// group's one endpoint, which starts the idle scope.
	other, err := workqueue.New(openPool(t, dsn), workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	enqueueTo(t, other, "grp/c", "c", 5)
	waitfor.Until(t, time.Minute, func() (bool, error) { return c.of("grp/c") == 5, nil },
		func() string { return fmt.Sprintf("ran %v, stats %+v", c.ran, g.Stats()) })

	// No announcement at all: the idle probe sees the mark move.
	silent, err := workqueue.New(openPool(t, dsn), workqueue.Config{Announce: workqueue.AnnounceConfig{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	waitfor.Until(t, time.Minute, func() (bool, error) { return g.Stats().Active == 0, nil },
		func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
	enqueueTo(t, silent, "grp/a", "a-silent", 3)
	probes := g.Stats().IdleProbes
	g.ProbeNow()
	waitfor.Until(t, time.Minute, func() (bool, error) { return c.of("grp/a") == 33, nil },
		func() string { return fmt.Sprintf("ran %v, stats %+v", c.ran, g.Stats()) })
	if g.Stats().IdleProbes <= probes {
		t.Fatalf("the silent enqueue ran without an idle probe: %+v", g.Stats())
	}
}

// TestGroupFindsNewScopesOfItsPrefix: a group serving a prefix finds a
// scope created while it runs at its next idle probe, subscribes it on
// its endpoint (a later enqueue there is announced to it), and leaves
// scopes outside the prefix alone, also one whose id only differs by a
// trailing space or continues past the prefix's last byte.
func TestGroupFindsNewScopesOfItsPrefix(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, "pfx/a")
	ensureScopes(t, qu, "pfy/outside", "pfx", "pfx ")
	var c counting
	g, err := worker.NewGroup(qu, worker.GroupConfig{ByPrefix: true, Prefix: "pfx/", IdleAfter: 100 * time.Millisecond,
		Member: worker.Config{Logger: quiet}}, map[string]worker.Handler{"deliver": c.handler})
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, g)
	waitfor.Until(t, time.Minute, func() (bool, error) { return g.Stats().Quiet, nil },
		func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
	ensureScopes(t, qu, "pfx/b")
	enqueueTo(t, qu, "pfy/outside", "o", 2)
	enqueueTo(t, qu, "pfx ", "s", 2)
	g.ProbeNow()
	waitfor.Until(t, time.Minute, func() (bool, error) { return slices.Contains(g.Scopes(), "pfx/b"), nil },
		func() string { return fmt.Sprintf("scopes %v", g.Scopes()) })
	// Registered for pfx/b: another Queue's enqueue wakes it there.
	var eps int
	waitfor.Until(t, time.Minute, func() (bool, error) {
		err := db.QueryRow("SELECT COUNT(*) FROM wake_endpoint WHERE scope_id = 'pfx/b'").Scan(&eps)
		return eps == 1, err
	}, func() string { return fmt.Sprintf("%d endpoints of pfx/b", eps) })
	other, err := workqueue.New(openPool(t, dsn), workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	enqueueTo(t, other, "pfx/b", "b", 4)
	waitfor.Until(t, time.Minute, func() (bool, error) { return c.of("pfx/b") == 4, nil },
		func() string { return fmt.Sprintf("ran %v", c.ran) })
	if got := g.Scopes(); !slices.Equal(got, []string{"pfx/a", "pfx/b"}) {
		t.Fatalf("served %q, want only the prefix's scopes", got)
	}
	if c.of("pfy/outside") != 0 || c.of("pfx ") != 0 {
		t.Fatalf("ran work outside the prefix: %v", c.ran)
	}
}

// TestGroupConfigErrors: bad configurations are typed errors.
func TestGroupConfigErrors(t *testing.T) {
	t.Parallel()
	qu, _, _ := queuetest.New(t, workqueue.Config{}, "cfg/a")
	h := map[string]worker.Handler{"deliver": func(context.Context, *worker.Job) error { return nil }}
	for name, cfg := range map[string]worker.GroupConfig{
		"nothing served":      {},
		"both":                {Scopes: []string{"cfg/a"}, ByPrefix: true},
		"prefix without flag": {Scopes: []string{"cfg/a"}, Prefix: "cfg/"},
		"listed twice":        {Scopes: []string{"cfg/a", "cfg/a"}},
		"member scope":        {Scopes: []string{"cfg/a"}, Member: worker.Config{Scope: "cfg/a"}},
		"per scope above all": {Scopes: []string{"cfg/a"}, MaxProcessing: 4, MaxPerScope: 5},
		"bad prefix":          {ByPrefix: true, Prefix: "cfg/\x01"},
		"negative idle after": {Scopes: []string{"cfg/a"}, IdleAfter: -time.Second},
	} {
		if _, err := worker.NewGroup(qu, cfg, h); !errors.Is(err, worker.ErrConfig) {
			t.Errorf("%s: err %v, want ErrConfig", name, err)
		}
	}
	g, err := worker.NewGroup(qu, worker.GroupConfig{Scopes: []string{"cfg/a", "cfg/missing"}}, h)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Run(context.Background()); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("run with a missing scope: %v, want ErrUnknownScope", err)
	}
}

// TestManyScopesFairness: one scope with a 100,000-item backlog runs on
// the group's pool beside ten scopes that get ten items each once the big
// one fills the pool. Once a small scope's member is refused a row, the
// pool offers it the next row released and holds the big scope to its
// share; before that its member starts (a few statements). The bound
// checked, counted in the big scope's item starts after the small scope's
// enqueue committed, so that a slow machine cannot fail it: its first item
// before 10 × MaxProcessing more, all ten before 20 × MaxProcessing. A
// small scope starved by the backlog would wait for its member's probe
// (15 s: thousands of the big scope's starts). The waits in milliseconds
// are logged.
func TestManyScopesFairness(t *testing.T) {
	t.Parallel()
	const (
		bigItems   = 100_000
		small      = 10
		smallItems = 10
		pool       = 16
	)
	qu, _, _ := queuetest.New(t, workqueue.Config{}, "fair/big")
	var smalls []string
	for i := range small {
		smalls = append(smalls, fmt.Sprintf("fair/small-%02d", i))
	}
	ensureScopes(t, qu, smalls...)
	enqueueTo(t, qu, "fair/big", "big", bigItems)

	var (
		bigStarts atomic.Int64
		mu        sync.Mutex
		started   = map[string][]int64{}     // small scope -> big starts counted at each of its item starts
		startedAt = map[string][]time.Time{} // and when
	)
	g, err := worker.NewGroup(qu, worker.GroupConfig{
		Scopes: append([]string{"fair/big"}, smalls...), MaxProcessing: pool, IdleAfter: time.Second,
		Member: worker.Config{Logger: quiet, Scheduler: scheduler.Config{Executors: 8}},
	}, map[string]worker.Handler{"deliver": func(ctx context.Context, job *worker.Job) error {
		if job.Item.Scope == "fair/big" {
			bigStarts.Add(1)
			select { // a handler that takes a while, so the pool stays full
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			return nil
		}
		mu.Lock()
		started[job.Item.Scope] = append(started[job.Item.Scope], bigStarts.Load())
		startedAt[job.Item.Scope] = append(startedAt[job.Item.Scope], time.Now())
		mu.Unlock()
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	runGroup(t, g)
	waitfor.Until(t, time.Minute, func() (bool, error) { return bigStarts.Load() >= 2*pool, nil },
		func() string { return fmt.Sprintf("big scope started %d, stats %+v", bigStarts.Load(), g.Stats()) })
	t.Logf("the big scope holds %d of the pool's %d rows", g.Stats().Processing, pool)
	enqueuedAt := map[string]int64{}
	enqueuedTime := map[string]time.Time{}
	for _, s := range smalls {
		enqueueTo(t, qu, s, s, smallItems)
		enqueuedAt[s], enqueuedTime[s] = bigStarts.Load(), time.Now()
	}
	waitfor.Until(t, 2*time.Minute, func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range smalls {
			if len(started[s]) < smallItems {
				return false, nil
			}
		}
		return true, nil
	}, func() string { return fmt.Sprintf("small scopes started %v", started) })
	mu.Lock()
	defer mu.Unlock()
	var waits []time.Duration
	for _, s := range smalls {
		first := started[s][0] - enqueuedAt[s]
		all := slices.Max(started[s]) - enqueuedAt[s]
		if first > 10*pool || all > 20*pool {
			t.Errorf("%s: first item after %d big-scope starts, all ten after %d (bounds %d and %d)", s, first, all, 10*pool, 20*pool)
		}
		t.Logf("%s: first item after %d big-scope starts, all ten after %d", s, first, all)
		for _, at := range startedAt[s] {
			waits = append(waits, at.Sub(enqueuedTime[s]))
		}
	}
	sort.Slice(waits, func(i, j int) bool { return waits[i] < waits[j] })
	t.Logf("small scopes' items started %s after their enqueue at the median, %s at p99, %s at most; the big scope started %d items meanwhile",
		waits[len(waits)/2], waits[len(waits)*99/100], waits[len(waits)-1], bigStarts.Load()-enqueuedAt[smalls[0]])
}

// TestManyScopesIdleCost: a quiet group serving 1,000 idle scopes sends at
// most one statement per five minutes of its clock (run 480 times faster
// than real time): its idle probes and its endpoint's renewals, nothing
// per scope. Measured over six quiet idle probes (two hours of its clock).
func TestManyScopesIdleCost(t *testing.T) {
	t.Parallel()
	qu, _, dsn := queuetest.New(t, workqueue.Config{}, "idle/0000")
	ids := manyScopes(t, qu, "idle/", 1000)
	idle := measureIdle(t, dsn, ids)
	if idle.statements > idle.budget() {
		t.Fatalf("%d statements in %s idle with %d scopes, above one per five minutes (%d)", idle.statements, idle.virtual, len(ids), idle.budget())
	}
	if idle.stats.Active != 0 || idle.stats.Activations != 0 || idle.stats.IdleProbes < 7 {
		t.Fatalf("stats %+v: want no member started and the idle probe running", idle.stats)
	}
}

// manyScopes creates n scopes named prefix + a four-digit number (the
// first may exist) and returns their ids.
func manyScopes(t testing.TB, qu *workqueue.Queue, prefix string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	ensureScopes(t, qu, ids...)
	return ids
}

// idleCost is what a quiet group over idle scopes sent.
type idleCost struct {
	statements int64
	virtual    time.Duration // of the group's clock
	by         map[string]int64
	stats      worker.GroupStats
}

// budget is one statement per five minutes of the group's clock.
func (c idleCost) budget() int64 { return max(1, int64(c.virtual/(5*time.Minute))) }

// perFiveMinutes is the statements sent per five minutes of its clock.
func (c idleCost) perFiveMinutes() float64 {
	return float64(c.statements) / (float64(c.virtual) / float64(5*time.Minute))
}

// measureIdle runs a group with default settings over the idle scopes on a
// counted Queue, its timers on a clock 480 times faster than real time,
// and counts its statements over six quiet idle probes (two hours of its
// clock) once its start-up checks are done and its endpoint is healthy.
func measureIdle(t testing.TB, dsn string, ids []string) idleCost {
	t.Helper()
	counted, counter := queuetest.Counted(t, dsn, workqueue.Config{})
	clk := clock.Scaled(idleClockScale)
	g, err := worker.NewGroup(counted, worker.GroupConfig{Scopes: ids,
		Member: worker.Config{Logger: quiet, Controller: controller.Config{Clock: clk}}},
		map[string]worker.Handler{"deliver": func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := runGroup(t, g)
	defer stop()
	waitfor.Until(t, 2*time.Minute, func() (bool, error) {
		st := g.Stats()
		return st.Quiet && st.LiveChecks >= uint64(len(ids)), nil
	}, func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
	before, beforeBy, began, probes := counter.Statements(), counter.ByStatement(), clk.Now(), g.Stats().IdleProbes
	waitfor.Until(t, 2*time.Minute, func() (bool, error) { return g.Stats().IdleProbes >= probes+6, nil },
		func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
	c := idleCost{statements: counter.Statements() - before, virtual: clk.Now().Sub(began), by: counter.Since(beforeBy), stats: g.Stats()}
	t.Logf("%d idle scopes, %s of the group's clock: %d statements (%.2f per five minutes) %v; stats %+v",
		len(ids), c.virtual.Round(time.Second), c.statements, c.perFiveMinutes(), c.by, c.stats)
	return c
}

// BenchmarkManyScopes: one group process serving 1,000 scopes, 10 of them
// busy (300 items each), against the same 3,000 items in one scope served
// by the same group configuration (items/s and vs-one-scope), each
// measured from the enqueue once the group's start-up checks are done
// (startup-s: the 1,000 scopes' checks). While the busy scopes drain, 20
// idle scopes get one item each: fair-wait-p50-ms and fair-wait-p99-ms are
// from their enqueue's commit to their handler's start (the member's
// start-up included). Then idle-statements-per-5min: the same 1,000
// scopes, all idle, under a quiet group (measureIdle). Run with
// -benchtime=1x. Two pool sizes: 64 rows (about six per busy scope, so
// each member claims about six items a turn) and 160.
func BenchmarkManyScopes(b *testing.B) {
	qu, _, dsn := queuetest.New(b, workqueue.Config{}, "many/0000")
	ids := manyScopes(b, qu, "many/", 1000)
	single := "one/0"
	ensureScopes(b, qu, single)
	for _, pool := range []int{64, 160} {
		b.Run(fmt.Sprintf("pool=%d", pool), func(b *testing.B) {
			benchManyScopes(b, qu, ids, single, worker.GroupConfig{MaxProcessing: pool, IdleAfter: time.Second,
				Member: worker.Config{Logger: quiet, Scheduler: scheduler.Config{Executors: 16}}})
		})
	}
	b.Run("idle", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(measureIdle(b, dsn, ids).perFiveMinutes(), "idle-statements-per-5min")
		}
	})
}

// benchManyScopes is one pool size of BenchmarkManyScopes.
func benchManyScopes(b *testing.B, qu *workqueue.Queue, ids []string, single string, cfg worker.GroupConfig) {
	const busy, perBusy, small = 10, 300, 20
	scopes := len(ids)

	// drain starts the group over served, waits for its start-up checks,
	// enqueues the backlog and measures until want items ran; during runs
	// once the drain began.
	drain := func(served []string, enqueue func(), want int64, during func(*worker.Group)) (startup, took time.Duration, startedAt map[string]time.Time) {
		var ran atomic.Int64
		c := cfg
		c.Scopes = served
		startedAt = map[string]time.Time{}
		var mu sync.Mutex
		g, err := worker.NewGroup(qu, c, map[string]worker.Handler{"deliver": func(_ context.Context, job *worker.Job) error {
			if strings.HasPrefix(job.Item.Scope, "many/09") { // the small scopes
				mu.Lock()
				startedAt[job.Item.Scope] = time.Now()
				mu.Unlock()
			}
			ran.Add(1)
			return nil
		}})
		if err != nil {
			b.Fatal(err)
		}
		began := time.Now()
		stop := runGroup(b, g)
		waitfor.Until(b, 5*time.Minute, func() (bool, error) { return g.Stats().LiveChecks >= uint64(len(served)), nil },
			func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
		startup = time.Since(began)
		began = time.Now()
		enqueue()
		if during != nil {
			during(g)
		}
		waitfor.Until(b, 10*time.Minute, func() (bool, error) { return ran.Load() >= want, nil },
			func() string { return fmt.Sprintf("ran %d of %d, stats %+v", ran.Load(), want, g.Stats()) })
		took = time.Since(began)
		stop()
		mu.Lock()
		defer mu.Unlock()
		return startup, took, maps.Clone(startedAt)
	}
	var one, many, startup time.Duration
	for n := range b.N {
		key := fmt.Sprintf("%d-%d-", cfg.MaxProcessing, n)
		_, one, _ = drain([]string{single}, func() { enqueueTo(b, qu, single, "one-"+key, busy*perBusy) }, busy*perBusy, nil)
		enqueuedAt := map[string]time.Time{}
		var fairStarts map[string]time.Time
		startup, many, fairStarts = drain(ids, func() {
			for i := range busy {
				enqueueTo(b, qu, ids[i], "busy-"+key, perBusy)
			}
		}, busy*perBusy+small, func(g *worker.Group) {
			// Once the busy scopes run: one item into each of 20 idle scopes.
			waitfor.Until(b, time.Minute, func() (bool, error) { return g.Stats().Processing > 0, nil },
				func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
			for i := range small {
				s := ids[scopes-small+i]
				enqueueTo(b, qu, s, "small-"+key, 1)
				enqueuedAt[s] = time.Now()
			}
		})
		var waits []time.Duration
		for s, at := range enqueuedAt {
			waits = append(waits, fairStarts[s].Sub(at))
		}
		slices.Sort(waits)
		b.ReportMetric(float64(waits[len(waits)/2].Microseconds())/1000, "fair-wait-p50-ms")
		b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "fair-wait-p99-ms")
	}
	b.ReportMetric(startup.Seconds(), "startup-s")
	items := float64(busy*perBusy + small)
	b.ReportMetric(items/many.Seconds(), "items/s")
	b.ReportMetric(float64(busy*perBusy)/one.Seconds(), "one-scope-items/s")
	b.ReportMetric((items/many.Seconds())/(float64(busy*perBusy)/one.Seconds()), "vs-one-scope")
}

// TestGroupsInTwoProcesses: group processes over the prefix "gp/", each a
// separate OS process. A handler kills the first while it holds an item;
// a second, started after, finds that scope live (the dead process's
// lease), keeps its member running and runs the item once the lease
// expired. With a third process beside it, items enqueued into every
// scope by this process's Queue (its announcements and the idle probe
// the only signals) all run, none twice.
func TestGroupsInTwoProcesses(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, "gp/0000")
	ids := manyScopes(t, qu, "gp/", 10)
	env := []string{helperGroupPrefixEnv + "=gp/", helperLeaseEnv + "=2s"}
	evs, err := qu.Enqueue(context.Background(), ids[5], []workqueue.Event{{IdempotencyKey: "die", RouteID: "r", RouteVersion: 1,
		EventKind: "k", SourceKind: "s", SourceID: "die", Payload: []byte("die"), Work: []workqueue.Work{{WorkType: "deliver"}}}})
	if err != nil {
		t.Fatal(err)
	}
	doomed := evs[0].Work[0].WorkID
	a := startHelper(t, "group-a", dsn, append(env, helperExitOnEnv+"=die")...)
	a.send(t, "go")
	for line := a.next(t); line != fmt.Sprintf("dying on %d", doomed); line = a.next(t) {
	}
	if err := a.cmd.Wait(); err == nil || a.cmd.ProcessState.ExitCode() != 3 {
		t.Fatalf("group-a did not die in its handler: %v (%s)", err, a.stderr.String())
	}
	b := startHelper(t, "group-b", dsn, env...)
	b.send(t, "go")
	if line := b.next(t); line != fmt.Sprintf("ran %d", doomed) {
		t.Fatalf("group-b said %q first, want the dead process's item", line)
	}
	c := startHelper(t, "group-c", dsn, env...)
	c.send(t, "go")
	const per = 10
	for _, s := range ids {
		enqueueTo(t, qu, s, "two-"+s, per)
	}
	ran := map[string]string{} // work id -> process
	for len(ran) < per*len(ids) {
		var line, who string
		select {
		case line = <-b.lines:
			who = "group-b"
		case line = <-c.lines:
			who = "group-c"
		case <-time.After(2 * time.Minute):
			t.Fatalf("ran %d of %d items (b: %s; c: %s)", len(ran), per*len(ids), b.stderr.String(), c.stderr.String())
		}
		id, ok := strings.CutPrefix(line, "ran ")
		if !ok {
			continue
		}
		if prev, twice := ran[id]; twice {
			t.Fatalf("item %s ran twice (%s, then %s)", id, prev, who)
		}
		ran[id] = who
	}
	byProcess := map[string]int{}
	for _, who := range ran {
		byProcess[who]++
	}
	var completed int
	waitfor.Until(t, time.Minute, func() (bool, error) {
		err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id LIKE 'gp/%' AND state = 'completed'").Scan(&completed)
		return completed == per*len(ids)+1, err
	}, func() string { return fmt.Sprintf("%d completed", completed) })
	t.Logf("items by process %v", byProcess)
}

// TestGroupOnASharedHubClosesItsLaterSubscription: a group serving a
// prefix that matches no scope at start subscribes on its hub only once
// its probe finds a scope. On a shared hub, which outlives the group, the
// group's Run closes that subscription before it returns (it used to close
// only one made at start), so the hub holds no subscription of it and its
// endpoint rows are gone: other processes stop sending it wakes.
func TestGroupOnASharedHubClosesItsLaterSubscription(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, "unserved")
	hub, err := wake.New(qu, wake.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Close() })
	g, err := worker.NewGroup(qu, worker.GroupConfig{ByPrefix: true, Prefix: "late/",
		Member: worker.Config{Logger: quiet, Wake: worker.WakeConfig{Shared: hub}}},
		map[string]worker.Handler{"deliver": func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	stop := runGroup(t, g)
	// A probe counted after the one at start is the probe loop's: the
	// group started with no scope, so the scope below is found by a probe.
	g.ProbeNow()
	waitfor.Until(t, time.Minute, func() (bool, error) { return g.Stats().IdleProbes >= 2, nil },
		func() string { return fmt.Sprintf("stats %+v", g.Stats()) })
	if got := g.Scopes(); len(got) != 0 {
		t.Fatalf("the group started serving %q, want no scope", got)
	}
	ensureScopes(t, qu, "late/a")
	g.ProbeNow()
	endpointRows := func() (n int, err error) {
		err = db.QueryRow("SELECT COUNT(*) FROM wake_endpoint WHERE scope_id = 'late/a'").Scan(&n)
		return n, err
	}
	var rows int
	waitfor.Until(t, time.Minute, func() (bool, error) {
		n, err := endpointRows()
		rows = n
		return n == 1 && hub.Stats().Subscriptions == 1, err
	}, func() string {
		return fmt.Sprintf("scopes %v, %d endpoint rows of late/a, hub stats %+v", g.Scopes(), rows, hub.Stats())
	})

	stop() // Run returned
	if n := hub.Stats().Subscriptions; n != 0 {
		t.Errorf("the shared hub holds %d subscriptions after the group's Run returned, want 0", n)
	}
	if n, err := endpointRows(); err != nil || n != 0 {
		t.Errorf("%d endpoint rows of late/a after the group's Run returned (%v), want 0", n, err)
	}
}
