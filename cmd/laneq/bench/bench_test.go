package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestMain(m *testing.M) {
	if IsWorker() { // this test binary, re-executed as a bench worker process
		os.Exit(WorkerMain())
	}
	os.Exit(tidbtest.Main(m))
}

// testLog is an io.Writer onto t.Log, line by line.
type testLog struct {
	t  *testing.T
	mu sync.Mutex
}

func (l *testLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestBenchFaultsShort is `laneq bench` in small: three real worker
// processes, two kill -9s mid-execution (each restarted), a worker frozen
// with SIGSTOP for four leases, dropped connections under another, and a
// TiDB pause longer than the lease when this TiDB can be paused (the
// embedded server or Docker), with handlers that ignore their context and
// two of them cancelled while they run. It fails on any unexplained
// repeat, loss, lane-order violation or overlap by handler time the
// database shows, and on faults that did not happen as planned.
func TestBenchFaultsShort(t *testing.T) {
	// It pauses TiDB for longer than a lease: a server shared with other
	// tests would stall them too.
	srv := tidbtest.OwnServer(t)
	pauses := 0
	if srv.CanPause() {
		pauses = 1
	}
	// Every second event is laneless, so the workers that are not hit
	// always have work: their claim turns are what finds expired leases.
	spec := Spec{
		Items: 500, SourceLanes: 40, BurstSize: 20, FreeEvery: 2,
		Processes: 3, Executors: 4,
		Lease: time.Second, HandlerLatency: 200 * time.Millisecond,
		EnqueueBatch: 10, EnqueueRate: 20,
		// A tick a second in every process, and one laneless event in five
		// limited to 50 starts a second, through every fault.
		Periodic: time.Second, RateLimit: 50,
		// One event in 50 has a handler that ignores its context for 6s (2s
		// past its 2s deadline and 1s abandonment), in lanes and in none,
		// and two of them are cancelled while they run: their lanes and
		// their retries must wait for the handler, through every fault.
		StubbornEvery: 50, Cancels: 2, CancelEvery: 4 * time.Second,
		Faults: FaultPlan{
			Kills: 2, Freezes: 1, TiDBPauses: pauses, Drops: 1,
			Every: 1500 * time.Millisecond, Freeze: 4 * time.Second, Pause: 2500 * time.Millisecond, Restart: 200 * time.Millisecond,
		},
		// The embedded engine can hold an orphaned lock for minutes after a
		// kill (see README): room for that, the run itself takes ~20s.
		Deadline: 8 * time.Minute,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Spec: spec, Server: srv, Progress: &testLog{t: t}, ProgressEvery: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	rep.WriteText(&out)
	t.Log("\n" + out.String())
	if !rep.OK() {
		t.Fatalf("verification failed:\n%s", out.String())
	}
	l := rep.Laneq
	kinds := map[string][]FaultReport{}
	for _, f := range l.Faults {
		kinds[f.Kind] = append(kinds[f.Kind], f)
	}
	want := map[string]int{faultKill: 2, faultFreeze: 1, faultPause: pauses, faultDrop: 1}
	for kind, n := range want {
		if len(kinds[kind]) != n {
			t.Errorf("%d %s faults recorded, want %d", len(kinds[kind]), kind, n)
		}
	}
	if pauses == 0 && len(l.SkippedFaults) != 0 {
		t.Errorf("skipped faults %v, want none planned", l.SkippedFaults)
	}
	for _, f := range kinds[faultKill] {
		if f.Caught == 0 {
			t.Errorf("kill of %s caught no attempt running: not mid-execution", f.Process)
		}
	}
	for _, f := range kinds[faultFreeze] {
		if f.Caught == 0 || f.Rejected == 0 {
			t.Errorf("freeze of %s caught %d attempts, %d finalizations rejected; want a stale finalization rejected", f.Process, f.Caught, f.Rejected)
		}
	}
	v := l.Verification
	if terminal := l.Completed + l.Dead + l.Skipped; terminal+v.TicksAfterDrain != l.Items || l.Events != int64(spec.Items+v.Ticks) {
		t.Errorf("%d events (%d ticks), %d items, %d terminal, %d ticks left by the stop", l.Events, v.Ticks, l.Items, terminal, v.TicksAfterDrain)
	}
	if v.Ticks < 10 || v.RateBusiestSecond == 0 || v.RateBusiestStarts == 0 {
		t.Errorf("%d ticks, rate limit busiest second %d granted, %d started: the run exercised neither", v.Ticks, v.RateBusiestSecond, v.RateBusiestStarts)
	}
	if u := l.Usage; u.ReadRUPerItem <= 0 || u.WriteRUPerItem <= 0 || u.StatementsPerItem <= 0 {
		t.Errorf("usage per item %+v: the statement summary counted nothing", u)
	}
	if c := l.Cancels; l.Stubborn.Attempts == 0 || c.Requested != spec.Cancels || c.ItemsCancelled == 0 {
		t.Errorf("%d stubborn attempts, %d of %d cancellations made (%v skipped), %d items cancelled: the run exercised neither",
			l.Stubborn.Attempts, c.Requested, spec.Cancels, c.Skipped, c.ItemsCancelled)
	}
	if l.Reclaims == 0 || l.Verification.LanePairsChecked == 0 {
		t.Errorf("reclaims %d, lane pairs checked %d: the run exercised neither", l.Reclaims, l.Verification.LanePairsChecked)
	}
}

// TestVerifierCatchesPlantedViolations runs a small clean bench, checks it
// verifies, then plants a duplicate execution and a lane inversion in its
// database and checks the verifier names both.
func TestVerifierCatchesPlantedViolations(t *testing.T) {
	srv := tidbtest.Server(t)
	spec := Spec{Items: 120, SourceLanes: 6, BurstSize: 10, Processes: 2, Executors: 2,
		HandlerLatency: time.Millisecond, FailureRate: -1, Deadline: 2 * time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Options{Spec: spec, Server: srv, Progress: &testLog{t: t}, KeepDatabases: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.DropDatabase(context.Background(), rep.Laneq.Database) })
	if !rep.OK() {
		var out strings.Builder
		rep.WriteText(&out)
		t.Fatalf("clean run did not verify:\n%s", out.String())
	}
	db, err := srv.Open(rep.Laneq.Database)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	bq := benchdb.New(db)
	spec, _ = spec.WithDefaults()
	wl := buildWorkload(spec, false)
	check := func(t *testing.T, wantIn string) {
		t.Helper()
		d, err := readRun(ctx, bq)
		if err != nil {
			t.Fatal(err)
		}
		v := verify(d, wl, spec.Lease, false, false)
		if v.OK {
			t.Fatalf("verifier passed a run with a planted violation (%s)", wantIn)
		}
		for _, p := range v.Problems {
			if strings.Contains(p, wantIn) {
				t.Logf("caught: %s", p)
				return
			}
		}
		t.Fatalf("no problem mentions %q: %q", wantIn, v.Problems)
	}
	d, err := readRun(ctx, bq)
	if err != nil {
		t.Fatal(err)
	}
	if v := verify(d, wl, spec.Lease, false, false); !v.OK {
		t.Fatalf("re-verifying the clean run: %q", v.Problems)
	}

	t.Run("duplicate", func(t *testing.T) {
		// A second, accepted completion of a completed item by a process no
		// fault touched.
		var victim benchdb.BenchAttempt
		for _, a := range d.attempts {
			if a.Outcome.String == "ok" && a.Finish.String == "accepted" {
				victim = a
				break
			}
		}
		id, err := bq.StartAttempt(ctx, benchdb.StartAttemptParams{Process: "planted", WorkID: victim.WorkID, LeaseToken: victim.LeaseToken + 1, Attempt: victim.Attempt + 1})
		if err != nil {
			t.Fatal(err)
		}
		if err := (&recorder{q: bq}).end(ctx, id, "ok"); err != nil {
			t.Fatal(err)
		}
		if err := bq.SetFinishAccepted(ctx, []int64{id}); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("work %d executed twice", victim.WorkID))
	})

	t.Run("lane inversion", func(t *testing.T) {
		// The second item of a source lane starts before the first
		// finished. (The planted duplicate stays; check looks for this
		// problem by its own words.)
		var first, second *benchdb.ListRunItemsRow
		for i := range d.items {
			it := &d.items[i]
			if !it.SourceLaneKey.Valid {
				continue
			}
			if first == nil {
				first = it
			} else if it.SourceLaneKey.String == first.SourceLaneKey.String && it.ScopeID == first.ScopeID {
				second = it
				break
			}
		}
		if first == nil || second == nil {
			t.Fatal("no lane with two items in the clean run")
		}
		var att benchdb.BenchAttempt
		for _, a := range d.attempts {
			if a.WorkID == second.WorkID {
				att = a
				break
			}
		}
		if err := bq.MoveAttemptStart(ctx, benchdb.MoveAttemptStartParams{AttemptID: att.AttemptID, StartedAt: first.TerminalAt.Time.Add(-time.Millisecond)}); err != nil {
			t.Fatal(err)
		}
		check(t, fmt.Sprintf("work %d (ordinal %d) started", second.WorkID, second.LaneOrdinal))
	})
}
