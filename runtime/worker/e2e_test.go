package worker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The end-to-end test re-runs this test binary as worker processes; the
// environment tells TestMain to run one instead of the tests.
const (
	helperEnv      = "LANEQ_WORKER_HELPER"
	helperDSNEnv   = "LANEQ_WORKER_HELPER_DSN"
	helperScopeEnv = "LANEQ_WORKER_HELPER_SCOPE"
	// helperLeaseEnv sets the queue's lease and helperMaxAttemptsEnv its
	// attempt budget (workqueue.Config).
	helperLeaseEnv       = "LANEQ_WORKER_HELPER_LEASE"
	helperMaxAttemptsEnv = "LANEQ_WORKER_HELPER_MAX_ATTEMPTS"
	// helperExitOnEnv: the handler kills its process (os.Exit) on an event
	// whose payload is this value, as a handler that crashes its process
	// would (an OOM, a panic in a goroutine it started).
	helperExitOnEnv = "LANEQ_WORKER_HELPER_EXIT_ON"
	// helperBlockOnEnv: the handler of an event whose source id is this
	// value says "blocking ID", waits for its context to end, says
	// "cancelled ID B" (B: whether the cause wraps
	// workqueue.ErrCancelRequested) and returns the context's error.
	helperBlockOnEnv = "LANEQ_WORKER_HELPER_BLOCK_ON"
	// helperPeriodicEnv adds a schedule "every" of this interval (a Go
	// duration) whose ticks are "deliver" items; helperClockSkewEnv runs
	// the worker's clock off by this much (clock.Skewed).
	helperPeriodicEnv  = "LANEQ_WORKER_HELPER_PERIODIC"
	helperClockSkewEnv = "LANEQ_WORKER_HELPER_CLOCK_SKEW"
	// helperRateEnv limits "deliver" to N starts per period: "N/PERIOD",
	// or per rate key of the items: "N/PERIOD/key".
	helperRateEnv = "LANEQ_WORKER_HELPER_RATE"
	// helperClockScaleEnv runs the worker's timers on clock.Scaled(N);
	// helperDefaultsEnv keeps every period at its default (otherwise the
	// dependency safety pass is off); helperStampEnv prints each handler
	// start as "ran ID UNIXNANO".
	helperClockScaleEnv = "LANEQ_WORKER_HELPER_CLOCK_SCALE"
	helperDefaultsEnv   = "LANEQ_WORKER_HELPER_DEFAULTS"
	helperStampEnv      = "LANEQ_WORKER_HELPER_STAMP"
	// helperDebugEnv logs the worker at debug level to stderr (shown when
	// a test fails on the helper).
	helperDebugEnv = "LANEQ_WORKER_HELPER_DEBUG"
	// helperGroupPrefixEnv runs a worker.Group over every scope with this
	// prefix instead of a Worker of helperScopeEnv ("idle" and "enqueue"
	// are for a Worker only).
	helperGroupPrefixEnv = "LANEQ_WORKER_HELPER_GROUP_PREFIX"
)

// helperReport is what a worker process prints after an idle window.
type helperReport struct {
	IdleStatements  int64
	IdleByStatement map[string]int64
	Stats           worker.Stats
	Group           worker.GroupStats // with helperGroupPrefixEnv
}

// runHelperProcess is one worker process. It reads its configuration from
// the LANEQ_* environment, counts every SQL statement its driver sends,
// and follows commands on stdin: "go" starts the worker; "idle MS" settles
// it, counts statements over MS milliseconds and prints a helperReport;
// "stop" stops it. Every executed work id is printed as "ran ID".
func runHelperProcess() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "helper:", err); return 1 }
	db, counter, err := sqlcount.Open(os.Getenv(helperDSNEnv))
	if err != nil {
		return fail(err)
	}
	defer db.Close()
	var qcfg workqueue.Config
	if v := os.Getenv(helperLeaseEnv); v != "" {
		if qcfg.Lease, err = time.ParseDuration(v); err != nil {
			return fail(err)
		}
	}
	if v := os.Getenv(helperMaxAttemptsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fail(err)
		}
		qcfg.MaxAttempts = int32(n)
	}
	exitOn, blockOn := os.Getenv(helperExitOnEnv), os.Getenv(helperBlockOnEnv)
	qu, err := workqueue.New(db, qcfg)
	if err != nil {
		return fail(err)
	}
	logger := quiet
	if os.Getenv(helperDebugEnv) != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	cfg, err := worker.Config{Scope: os.Getenv(helperScopeEnv), Owner: os.Getenv(helperEnv), Logger: logger}.FromEnv()
	if err != nil {
		return fail(err)
	}
	// No item here waits on a dependency, and the safety pass (every 2m by
	// default) would land in the idle window whenever a slow server makes
	// the drain take longer than its period.
	if os.Getenv(helperDefaultsEnv) == "" && os.Getenv(worker.EnvDependencySafetyEvery) == "" {
		cfg.Controller.MaintainEvery = -1
	}
	if v := os.Getenv(helperClockScaleEnv); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fail(err)
		}
		cfg.Controller.Clock = clock.Scaled(f)
		// A wake's datagram travels in real time: a second of grace, not
		// a second of the scaled clock.
		cfg.Controller.MissedWakeGrace = time.Duration(f * float64(controller.DefaultMissedWakeGrace))
	}
	if v := os.Getenv(helperClockSkewEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fail(err)
		}
		cfg.Controller.Clock = clock.Skewed(d)
	}
	if v := os.Getenv(helperRateEnv); v != "" {
		v, perKey := strings.CutSuffix(v, "/key")
		n, per, ok := strings.Cut(v, "/")
		if !ok {
			return fail(fmt.Errorf("%s=%q: want N/PERIOD or N/PERIOD/key", helperRateEnv, v))
		}
		lim := ratelimit.Limit{WorkType: "deliver", PerKey: perKey}
		if lim.N, err = strconv.Atoi(n); err != nil {
			return fail(err)
		}
		if lim.Per, err = time.ParseDuration(per); err != nil {
			return fail(err)
		}
		cfg.Limits = []ratelimit.Limit{lim}
		cfg.RateWindowsKept = time.Hour // the test reads every window's grants back
	}
	if v := os.Getenv(helperPeriodicEnv); v != "" {
		every, err := time.ParseDuration(v)
		if err != nil {
			return fail(err)
		}
		cfg.Schedules = []periodic.Schedule{{Name: "every", Every: every, Event: func(tick time.Time) (workqueue.Event, error) {
			return workqueue.Event{Work: []workqueue.Work{{WorkType: "deliver"}}}, nil
		}}}
	}
	stamp := os.Getenv(helperStampEnv) != ""
	var outMu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	handlers := map[string]worker.Handler{"deliver": func(ctx context.Context, job *worker.Job) error {
		if exitOn != "" && string(job.Event.Payload) == exitOn {
			say("dying on %d", job.Item.WorkID)
			os.Exit(3)
		}
		if blockOn != "" && job.Event.SourceID == blockOn {
			say("blocking %d", job.Item.WorkID)
			<-ctx.Done()
			say("cancelled %d %t", job.Item.WorkID, errors.Is(context.Cause(ctx), workqueue.ErrCancelRequested))
			return ctx.Err()
		}
		if stamp {
			say("ran %d %d", job.Item.WorkID, time.Now().UnixNano())
		} else {
			say("ran %d", job.Item.WorkID)
		}
		return nil
	}}
	var (
		w   *worker.Worker
		g   *worker.Group
		run func(context.Context) error
	)
	if prefix, ok := os.LookupEnv(helperGroupPrefixEnv); ok {
		cfg.Scope = ""
		g, err = worker.NewGroup(qu, worker.GroupConfig{ByPrefix: true, Prefix: prefix, IdleAfter: time.Second, Member: cfg}, handlers)
		run = g.Run
	} else {
		w, err = worker.New(qu, cfg, handlers)
		run = w.Run
	}
	if err != nil {
		return fail(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	enqueued := 0
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		cmd := strings.Fields(in.Text())
		switch {
		case len(cmd) == 1 && cmd[0] == "go":
			go func() {
				err := run(ctx)
				if err != nil && ctx.Err() == nil {
					// Said at once: a test waiting for this process's
					// work shows it with its failure, not at "stop".
					fmt.Fprintln(os.Stderr, "helper: worker stopped:", err)
				}
				done <- err
			}()
		case len(cmd) == 2 && cmd[0] == "idle":
			ms, err := strconv.Atoi(cmd[1])
			if err != nil {
				return fail(err)
			}
			if err := w.Settle(ctx); err != nil {
				return fail(err)
			}
			before, beforeBy := counter.Statements(), counter.ByStatement()
			time.Sleep(time.Duration(ms) * time.Millisecond) // the idle window being measured
			if err := w.Settle(ctx); err != nil {
				return fail(err)
			}
			idleBy := map[string]int64{}
			for k, v := range counter.ByStatement() {
				if d := v - beforeBy[k]; d != 0 {
					idleBy[k] = d
				}
			}
			b, _ := json.Marshal(helperReport{IdleStatements: counter.Statements() - before, IdleByStatement: idleBy, Stats: w.Stats()})
			say("report %s", b)
		case len(cmd) == 2 && cmd[0] == "enqueue":
			// Work enqueued here reaches the other worker process by a wake.
			n, err := strconv.Atoi(cmd[1])
			if err != nil {
				return fail(err)
			}
			enqueued++
			evs := make([]workqueue.Event, n)
			for i := range evs {
				key := fmt.Sprintf("%s-%d-%d", os.Getenv(helperEnv), enqueued, i)
				evs[i] = workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s",
					SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}}
			}
			if _, err := qu.Enqueue(ctx, cfg.Scope, evs); err != nil {
				return fail(err)
			}
			say("enqueued %d", n)
		case len(cmd) == 1 && cmd[0] == "stats":
			var r helperReport
			if g != nil {
				r.Group = g.Stats()
			} else {
				r.Stats = w.Stats()
			}
			b, _ := json.Marshal(r)
			say("report %s", b)
		case len(cmd) == 1 && cmd[0] == "stop":
			cancel()
			if err := <-done; err != nil {
				return fail(err)
			}
			say("bye")
			return 0
		default:
			return fail(fmt.Errorf("unknown command %q", in.Text()))
		}
	}
	return fail(fmt.Errorf("stdin closed: %v", in.Err()))
}

type helperProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr lockedBuffer
}

// lockedBuffer is a helper's stderr: exec's copying goroutine writes it
// while the process runs, and a failing test reads it then (found by -race
// when a drain timed out).
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func startHelper(t testing.TB, name, dsn string, env ...string) *helperProc {
	t.Helper()
	h := &helperProc{name: name, lines: make(chan string, 10_000)}
	h.cmd = exec.Command(os.Args[0], "-test.run=^$")
	h.cmd.Env = append(append(os.Environ(), helperEnv+"="+name, helperDSNEnv+"="+dsn, helperScopeEnv+"="+scope), env...)
	h.cmd.Stderr = &h.stderr
	var err error
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := h.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	t.Cleanup(func() {
		_ = h.cmd.Process.Kill()
		_ = h.cmd.Wait()
	})
	return h
}

func (h *helperProc) send(t testing.TB, cmd string) {
	t.Helper()
	if _, err := fmt.Fprintln(h.stdin, cmd); err != nil {
		t.Fatalf("%s: send %q: %v (stderr: %s)", h.name, cmd, err, h.stderr.String())
	}
}

// TestTwoProcessesDrainThenIdleWithZeroSQL: two worker processes with 16
// executors each drain 5,000 items with no item executed twice, then,
// once both run quiet (their wakes healthy), sit idle without sending a
// single SQL statement.
func TestTwoProcessesDrainThenIdleWithZeroSQL(t *testing.T) {
	t.Parallel()
	const items = 5000
	f := newFixture(t, workqueue.Config{})
	f.enqueue(items, 5, "deliver", "interactive", "default", "bulk")
	env := []string{
		worker.EnvExecutors + "=16", worker.EnvQueueProfile + "=default-heavy",
		// Probe and backstop periods longer than the measured idle window;
		// the controller tests prove a probe reads nothing else.
		worker.EnvGenerationProbeEvery + "=10m", worker.EnvReconcileEvery + "=10m",
	}
	procs := []*helperProc{startHelper(t, "worker-a", f.dsn, env...), startHelper(t, "worker-b", f.dsn, env...)}
	start := time.Now()
	for _, p := range procs {
		p.send(t, "go")
	}
	ranBy := map[int64][]string{}
	perProc := map[string]int{}
	total := 0
	timeout := time.After(10 * time.Minute)
	var reports = map[string]helperReport{}
	read := func(p *helperProc) string {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("%s exited: %s", p.name, p.stderr.String())
			}
			return line
		case <-timeout:
			t.Fatalf("timed out after %d of %d items", total, items)
		}
		return ""
	}
	// Drain: read both processes' "ran" lines until every item ran.
	drainTimeout := time.After(5 * time.Minute)
	for total < items {
		var line string
		var p *helperProc
		var ok bool
		select {
		case line, ok = <-procs[0].lines:
			p = procs[0]
		case line, ok = <-procs[1].lines:
			p = procs[1]
		case <-drainTimeout:
			t.Fatalf("drained %d of %d items (stderr a: %s b: %s)", total, items, procs[0].stderr.String(), procs[1].stderr.String())
		}
		if !ok {
			t.Fatalf("%s exited after %d items: %s", p.name, total, p.stderr.String())
		}
		id, err := strconv.ParseInt(strings.TrimPrefix(line, "ran "), 10, 64)
		if err != nil {
			t.Fatalf("%s: unexpected line %q", p.name, line)
		}
		ranBy[id] = append(ranBy[id], p.name)
		perProc[p.name]++
		total++
	}
	drained := time.Since(start)
	if total != items || len(ranBy) != items {
		t.Fatalf("%d executions of %d distinct items, want %d each (stderr a: %s b: %s)", total, len(ranBy), items,
			procs[0].stderr.String(), procs[1].stderr.String())
	}
	for id, who := range ranBy {
		if len(who) != 1 {
			t.Fatalf("work %d ran %d times: %v", id, len(who), who)
		}
	}
	// Wait for the last finishes to commit.
	waitfor.Until(t, time.Minute, func() (bool, error) { return f.states()["completed"] == items, nil },
		func() string { return fmt.Sprintf("states %v", f.states()) })
	// Idle is measured in the steady state: quiet mode, which a worker
	// enters once its wake endpoint is known to every sender
	// (wake.Config.EndpointCacheTTL, 5s, after it registered). A drain
	// shorter than that would otherwise see the switch (a probe, the claim
	// turn the drain's changes make and a far lookup) inside the window.
	late := map[string]int{} // "ran" lines now would be second executions
	for _, p := range procs {
		waitfor.Until(t, time.Minute, func() (bool, error) { return p.report(t, "stats", late).Stats.Quiet, nil },
			func() string { return p.name + " never entered quiet mode (its wake endpoint is not healthy)" })
	}
	if len(late) != 0 {
		t.Fatalf("items ran after all %d had run once: %v", items, late)
	}
	// Idle: a 3-second window in both processes at once.
	for _, p := range procs {
		p.send(t, "idle 3000")
	}
	for _, p := range procs {
		line := read(p)
		var r helperReport
		if err := json.Unmarshal([]byte(strings.TrimPrefix(line, "report ")), &r); err != nil {
			t.Fatalf("%s: %q: %v", p.name, line, err)
		}
		reports[p.name] = r
		if r.IdleStatements != 0 {
			t.Errorf("%s sent %d SQL statements while idle: %v", p.name, r.IdleStatements, r.IdleByStatement)
		}
		if !r.Stats.Quiet {
			t.Errorf("%s left quiet mode during the idle window", p.name)
		}
		if r.Stats.Scheduler.MaxConcurrentClaims != 1 {
			t.Errorf("%s had %d concurrent claims", p.name, r.Stats.Scheduler.MaxConcurrentClaims)
		}
	}
	for _, p := range procs {
		p.send(t, "stop")
		if line := read(p); line != "bye" {
			t.Fatalf("%s: %q", p.name, line)
		}
	}
	if perProc["worker-a"] == 0 || perProc["worker-b"] == 0 {
		t.Errorf("one process did all the work: %v", perProc)
	}
	for name, r := range reports {
		c, s := r.Stats.Controller, r.Stats.Scheduler
		t.Logf("%s: ran %d; claim turns %d, claims %d (empty %d), next-work lookups %d, wakes queued %d coalesced %d",
			name, perProc[name], c.Claims, s.Claims, c.EmptyClaims, c.NextWorkLookups, c.WakesQueued, c.WakeCoalescings)
	}
	t.Logf("drained %d items in %s (%.0f items/s)", items, drained.Round(time.Millisecond), float64(items)/drained.Seconds())
}
