package worker_test

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/sqlwrap"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// linkDep is the dependency of work item id in these tests: a link to
// target<id>, satisfied by its current or its previous slot.
func linkDep(id int64) workqueue.Dependency {
	return workqueue.Dependency{WakeKey: fmt.Sprint("target:", id), Keys: []string{fmt.Sprint("link:", id, "@2"), fmt.Sprint("link:", id, "@1")}}
}

func (f *fixture) item(id int64) queuetest.ItemFacts {
	f.t.Helper()
	return queuetest.Item(f.t, f.db, id)
}

// waitForState polls the row (the finish commits after the handler
// returned) until it reaches state.
func (f *fixture) waitForState(id int64, state string) {
	f.t.Helper()
	got := ""
	waitfor.Until(f.t, time.Minute, func() (bool, error) { got = f.item(id).State; return got == state, nil },
		func() string { return fmt.Sprintf("work %d is %s, want %s", id, got, state) })
}

func (f *fixture) onlyItem() int64 {
	f.t.Helper()
	var id int64
	if err := f.db.QueryRow("SELECT work_id FROM work_item WHERE scope_id = ?", scope).Scan(&id); err != nil {
		f.t.Fatal(err)
	}
	return id
}

// A handler that finds its prerequisite missing waits; the producer's
// Satisfy wakes it, the worker rechecks the exact keys, and only then runs
// the handler again. An obsolete slot's wake (same wake key, another key)
// is rechecked and waits again without running the handler. Neither counts
// an attempt or a retry.
func TestWorkerDependencyWaitWakeAndObsoleteWake(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(1, 0, "deliver")
	id := f.onlyItem()
	c := newCollector(func(job *worker.Job, attempt int) error {
		if attempt == 1 {
			return worker.WaitForDependency(linkDep(job.Item.WorkID))
		}
		if job.Item.Attempt != 1 {
			return fmt.Errorf("attempt %d after a wait, want 1", job.Item.Attempt)
		}
		return nil
	})
	rechecks := make(chan struct{}, 10)
	cfg := quietCfg(2)
	cfg.Hooks = &worker.Hooks{BeforeFinish: func(c workqueue.Claimed, outcome error) {
		if c.Dependency != nil && outcome != nil {
			rechecks <- struct{}{} // a wait after a recheck, not after the handler
		}
	}}
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		t.Fatal(err)
	}
	run(t, w)
	c.wait(t, 1)
	f.waitForState(id, "waiting_dependency")
	if got, want := f.item(id), (queuetest.ItemFacts{Counters: queuetest.Counters{State: "waiting_dependency"}, LeaseToken: 3, FailureClassIsNull: true}); got != want {
		t.Fatalf("after the wait: %+v, want %+v", got, want)
	}

	// An obsolete slot: the wake key matches, the key is none of the item's.
	woken, err := w.Satisfy(f.ctx, linkDep(id).WakeKey, fmt.Sprint("link:", id, "@0"))
	if err != nil || woken != 1 {
		t.Fatalf("obsolete satisfy: woke %d (%v)", woken, err)
	}
	select {
	case <-rechecks:
	case <-time.After(time.Minute):
		t.Fatal("the woken item was not rechecked")
	}
	f.waitForState(id, "waiting_dependency")
	if n := len(c.ran); n != 0 {
		t.Fatalf("the handler ran %d more times after an obsolete wake", n)
	}
	if got := f.item(id); got.Attempts != 0 || got.SafeRetries != 0 {
		t.Fatalf("after the recheck: %+v, want no attempt and no retry counted", got)
	}

	// The previous slot satisfies it.
	if woken, err := w.Satisfy(f.ctx, linkDep(id).WakeKey, linkDep(id).Keys[1]); err != nil || woken != 1 {
		t.Fatalf("satisfy: woke %d (%v)", woken, err)
	}
	c.wait(t, 1)
	f.waitForState(id, "completed")
	if got := f.item(id); got.Attempts != 1 || got.SafeRetries != 0 || !got.FailureClassIsNull {
		t.Fatalf("completed: %+v, want one attempt and no retry", got)
	}
	if st := w.Stats(); st.Controller.DueTimerFires != 0 {
		t.Fatalf("a wait armed the due timer: %+v", st.Controller)
	}
}

// TestDependencyMissedWakeRepaired: a producer that writes its key without
// the wake (a writer that bypassed Satisfy) leaves the item waiting; the
// worker's safety pass, one interval later on its clock, wakes it and a
// claim turn runs it.
func TestDependencyMissedWakeRepaired(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(1, 0, "deliver")
	id := f.onlyItem()
	c := newCollector(func(job *worker.Job, attempt int) error {
		if attempt == 1 {
			return worker.WaitForDependency(linkDep(job.Item.WorkID))
		}
		return nil
	})
	w, clk := f.runOnFakeClock(c)
	c.wait(t, 1)
	f.waitForState(id, "waiting_dependency")
	f.exec("INSERT INTO dependency_satisfied (scope_id, dependency_key, satisfied_at) VALUES (?, ?, NOW(6))", scope, linkDep(id).Keys[0])
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	clk.Advance(controller.DefaultMaintainEvery - time.Second)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	if st := w.Stats().Controller; st.Maintenances != 0 || f.item(id).State != "waiting_dependency" {
		t.Fatalf("a pass ran early: %+v", st)
	}
	clk.Advance(time.Second)
	c.wait(t, 1)
	f.waitForState(id, "completed")
	if st := w.Stats().Controller; st.Maintenances != 1 || st.MaintenanceClaims != 1 {
		t.Fatalf("controller: %+v, want one pass that asked for a claim turn", st)
	}
}

// runOnFakeClock runs a two-executor worker whose "deliver" handler is c
// and whose controller runs on the returned fake clock.
func (f *fixture) runOnFakeClock(c *collector) (*worker.Worker, *clock.Fake) {
	f.t.Helper()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := quietCfg(2)
	cfg.Controller.Clock = clk
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{"deliver": c.handle})
	if err != nil {
		f.t.Fatal(err)
	}
	run(f.t, w)
	return w, clk
}

// TestLaneRecoveryRunsAStrandedRow: a lane head finished outside laneq
// leaves its follower blocked with nothing ahead; the worker's maintenance,
// one interval later on its clock, promotes it and a claim turn runs it.
func TestLaneRecoveryRunsAStrandedRow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	f.enqueue(2, 2, "deliver") // one lane: a head and its follower
	var head, follower int64
	if err := f.db.QueryRow("SELECT work_id FROM work_item WHERE state = 'pending'").Scan(&head); err != nil {
		t.Fatal(err)
	}
	if err := f.db.QueryRow("SELECT work_id FROM work_item WHERE state = 'blocked'").Scan(&follower); err != nil {
		t.Fatal(err)
	}
	f.exec("UPDATE work_item SET state = 'completed', terminal_at = NOW(6) WHERE work_id = ?", head)
	c := newCollector(func(*worker.Job, int) error { return nil })
	w, clk := f.runOnFakeClock(c)
	if err := w.Settle(f.ctx); err != nil {
		t.Fatal(err)
	}
	if s := f.item(follower).State; s != "blocked" {
		t.Fatalf("follower is %s before any maintenance, want blocked", s)
	}
	clk.Advance(controller.DefaultMaintainEvery)
	c.wait(t, 1)
	f.waitForState(follower, "completed")
	if st := w.Stats().Controller; st.Maintenances != 1 || st.MaintenanceClaims != 1 {
		t.Fatalf("controller: %+v, want one maintenance that asked for a claim turn", st)
	}
}

func (f *fixture) exec(q string, args ...any) {
	f.t.Helper()
	if _, err := f.db.Exec(q, args...); err != nil {
		f.t.Fatal(err)
	}
}

// TestDependencyQuietBacklog: 1,000 items wait for prerequisites nobody
// satisfies, and nothing else is runnable. An hour on the worker's clock
// makes no claim and no write, counts no retry, and costs one safety pass
// per interval, each a few bounded page reads and key reads: with the
// periodic reads off, those are the only statements; with the defaults, the
// probes and reconciliations add reads, never a claim CAS or a write.
func TestDependencyQuietBacklog(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		defaults bool
	}{{"only the safety pass", false}, {"default periods", true}} {
		t.Run(tc.name, func(t *testing.T) {
			const waiters = 1000
			f := newFixture(t, workqueue.Config{})
			f.enqueue(waiters, 0, "deliver")
			qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
			c := newCollector(func(job *worker.Job, _ int) error {
				return worker.WaitForDependency(linkDep(job.Item.WorkID))
			})
			clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
			cfg := quietCfg(8)
			if tc.defaults {
				cfg.Controller.GenerationProbeEvery, cfg.Controller.ReconcileEvery = 0, 0
			}
			// The pass's time budget is wall time (the clock here is fake):
			// on a loaded machine a page of 1,000 waiters can outlast the
			// default second, fail the pass and add a retry to the count.
			// The pace of the passes is under test, not their budget.
			cfg.DependencySweep.TimeBudget = time.Minute
			cfg.Controller.Clock = clk
			logs := &syncBuffer{}
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			w, err := worker.New(qu, cfg, map[string]worker.Handler{"deliver": c.handle})
			if err != nil {
				t.Fatal(err)
			}
			run(t, w)
			c.wait(t, waiters) // every item ran once and asked to wait
			settled(t, f, w, map[string]int{"waiting_dependency": waiters})
			// A claim turn that ran while the last items were still
			// processing armed the due timer at their lease expiry (how an
			// expired lease is reclaimed on time): let it fire before the
			// quiet hour starts.
			clk.Advance(qu.Lease() + time.Second)
			if err := w.Settle(f.ctx); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, f)
			stats0, count0 := w.Stats(), counter.ByStatement()

			const interval = controller.DefaultMaintainEvery
			for range 60 {
				clk.Advance(time.Minute)
				if err := w.Settle(f.ctx); err != nil {
					t.Fatal(err)
				}
			}
			stats1 := w.Stats()
			sent := counter.Since(count0)
			after := snapshot(t, f)
			if !maps.Equal(before, after) {
				t.Fatalf("waiters changed during the quiet hour")
			}
			if n := len(c.ran); n != 0 {
				t.Fatalf("%d handler runs during the quiet hour", n)
			}
			passes := stats1.Controller.Maintenances - stats0.Controller.Maintenances
			if want := uint64(time.Hour / interval); passes != want {
				t.Fatalf("%d safety passes in an hour (%d failed), want one per %s (%d); warnings:\n%s",
					passes, stats1.Controller.MaintenanceErrors-stats0.Controller.MaintenanceErrors, interval, want, logs.String())
			}
			if d := stats1.Scheduler.Claimed - stats0.Scheduler.Claimed; d != 0 {
				t.Fatalf("%d items claimed", d)
			}
			// The history of the minutes before the hour is written by the
			// hour's first maintenance (RecordHistory, then one prune).
			// So is, once, a process description whose quiet mode changed
			// (RenewWakeEndpoint) when wakes are on.
			reads := []string{"DependencySafetyPage", "DependencyWaitingPage", "SatisfiedDependencies", "BlockedPage", "RecordHistory", "PruneHistory",
				"RenewWakeEndpoint"}
			if tc.defaults {
				// Probes and reconciliation: the scope, first claimable rows,
				// the work kinds, and the next-work lookup after a claim turn.
				reads = append(reads, "GetScope", "ClaimCandidates", "StaleCandidates", "NextWorkAt", "ListWorkKinds")
			} else if d := stats1.Controller.Claims - stats0.Controller.Claims; d != 0 {
				t.Fatalf("%d claim turns with the periodic reads off", d)
			}
			for name, n := range sent {
				// A connection the pool opened again prepares what it runs.
				if !slices.Contains(reads, strings.TrimPrefix(name, sqlwrap.PreparePrefix)) {
					t.Errorf("the quiet hour sent %d × %s (allowed: %v)", n, name, reads)
				}
			}
			// A pass reads at most ProbeBudget/PageSize pages and their keys,
			// plus one page that finds the end.
			perPass := int64(2*workqueue.DefaultSweepProbeBudget/workqueue.DefaultSweepPageSize + 1)
			if n := sent["DependencySafetyPage"] + sent["DependencyWaitingPage"] + sent["SatisfiedDependencies"]; n > int64(passes)*perPass {
				t.Fatalf("%d safety-pass statements in %d passes, over %d per pass", n, passes, perPass)
			}
			t.Logf("quiet hour: %d passes, statements %v, controller claims %d", passes, sent, stats1.Controller.Claims-stats0.Controller.Claims)
		})
	}
}

// snapshot reads every waiter's mutable state.
func snapshot(t *testing.T, f *fixture) map[int64]string {
	t.Helper()
	rows, err := f.db.Query(`SELECT work_id, state, attempt_count, safe_retry_count, lease_token, run_after, updated_at
		FROM work_item WHERE scope_id = ?`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id, token int64
		var state string
		var attempts, retries int32
		var runAfter, updated time.Time
		if err := rows.Scan(&id, &state, &attempts, &retries, &token, &runAfter, &updated); err != nil {
			t.Fatal(err)
		}
		if state != "waiting_dependency" || attempts != 0 || retries != 0 {
			t.Fatalf("work %d: %s, %d attempts, %d retries", id, state, attempts, retries)
		}
		out[id] = fmt.Sprint(state, token, runAfter, updated)
	}
	return out
}
