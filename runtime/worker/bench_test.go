package worker_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/naivedb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/serverusage"
	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// throughputItems is how many items each measurement drains.
const throughputItems = 3000

// BenchmarkThroughputVsFloor measures, in one run on one server, the path
// users run against what the database allows (issue 15):
//
//   - floor: two autocommit primary-key UPDATEs per item (claim, finish)
//     from 16 connections, on a queue of the same size: the least work any
//     row-CAS queue must do per item;
//   - batched floor: the same two UPDATEs per item, each for 16 items in
//     one statement and commit: what batching alone can reach, the bound of
//     any queue that writes these two row versions per item;
//   - naive: the SELECT ... LIMIT 1 FOR UPDATE + UPDATE loop on 16
//     connections;
//   - laneq: the assembled runtime/worker (controller, scheduler, 16
//     executors, handler returning nil at once), one worker and two
//     (separate connection pools and claimers, as two processes have), on
//     no-lane items and on lanes of five.
//
// Each laneq figure reports items/s, floor-ratio against the mean of floors
// measured just before and just after it in the same sub-benchmark
// (floor-items/s), likewise batched-floor-ratio against the batched floor
// measured before it, so all see the server in the same state (the
// embedded engine slows down as earlier runs' dropped databases
// accumulate), naive-ratio against the naive loop measured once at the
// start, statements/item counted by internal/sqlcount, and finish-p50-ms /
// finish-p99-ms: from a handler's return to its outcome's commit (what
// group commit adds). Every drain also reports ru/item (floor-ru/item,
// batched-floor-ru/item for the floors beside it): the request units TiDB
// counted for the drain's statements in its statement summary
// (internal/serverusage), with keys/item where the engine counts keys
// (TiKV); each laneq drain logs the server-time profile of its database
// (top statements by latency). A shape of two workers also reports vs-one-worker:
// its items/s over one worker's on the same items, both drained twice in
// the order two, one, one, two (items/s is then the mean of its two
// drains). Run with -benchtime=1x: one drain of throughputItems is the
// measurement.
func BenchmarkThroughputVsFloor(b *testing.B) {
	// A server that just started runs the floor about half as fast as one
	// that has worked for a minute (its first runs share the machine with
	// its start-up work), which would flatter laneq whenever -bench selects
	// one shape: every run measures after a floor drain that is thrown away.
	enableUsage(b)
	measure(b, "warm-up", floorRate)
	naive := measure(b, "naive", naiveRate)
	shapes := []benchShape{
		{lanes: 0, workers: 1}, {lanes: 0, workers: 2}, {lanes: 5, workers: 1}, {lanes: 5, workers: 2},
		// Lanes with claim on promote off: what taking followers in the
		// completion batch saves.
		{lanes: 5, workers: 1, noTake: true},
		// Each completion written alone: what group commit costs and saves.
		{lanes: 0, workers: 1, completeBatch: 1},
		// The default profile keeps a quarter of the executors for bulk
		// classes, so 12 of the 16 run these default-class items; under
		// default-heavy all 16 may.
		{lanes: 0, workers: 1, profile: scheduler.ProfileDefaultHeavy},
		// Two workers that never compete for a row: each serves its own
		// work type, half of the items. What two claimers with disjoint
		// candidates (claim turns overlapping without CAS losses) reach.
		{lanes: 0, workers: 2, disjoint: true},
	}
	for _, sh := range shapes {
		name := fmt.Sprintf("laneq/lanes=%d/workers=%d", sh.lanes, sh.workers)
		if sh.completeBatch == 1 {
			name += "/unbatched"
		}
		if sh.profile != "" {
			name += "/" + string(sh.profile)
		}
		if sh.disjoint {
			name += "/disjoint"
		}
		if sh.noTake {
			name += "/no-claim-on-promote"
		}
		b.Run(name, func(b *testing.B) {
			floorBefore := floorRate(b)
			batched := floorRateBatched(b, 16)
			run := workerRate(b, sh)
			rate, vsOne := run.rate, 0.0
			if sh.workers > 1 && !sh.disjoint {
				// Several processes against one, drained in the order
				// many, one, one, many on identical queues: drift of the
				// server over the sub-benchmark (it slows down as dropped
				// databases accumulate) weighs on both sides alike.
				single := sh
				single.workers = 1
				one := workerRate(b, single).rate + workerRate(b, single).rate
				again := workerRate(b, sh)
				vsOne = (rate + again.rate) / one
				rate = (rate + again.rate) / 2
				run.finish = append(run.finish, again.finish...)
			}
			// The floor before and after the laneq drains, averaged: one
			// 3,000-item floor drain varies by a third from run to run.
			// Metrics only now: every drain resets the timer, which drops
			// the metrics reported so far.
			floorAfter := floorRate(b)
			floor := (floorBefore.rate + floorAfter.rate) / 2
			if vsOne > 0 {
				b.ReportMetric(vsOne, "vs-one-worker")
			}
			b.ReportMetric(rate, "items/s")
			b.ReportMetric(floor, "floor-items/s")
			b.ReportMetric(batched.rate, "batched-floor-items/s")
			b.ReportMetric(rate/batched.rate, "batched-floor-ratio")
			reportUsage(b, "", run.usage)
			reportUsage(b, "floor-", floorAfter.usage)
			reportUsage(b, "batched-floor-", batched.usage)
			b.ReportMetric(ms(queuetest.Percentile(run.finish, 50)), "finish-p50-ms")
			b.ReportMetric(ms(queuetest.Percentile(run.finish, 99)), "finish-p99-ms")
			b.ReportMetric(rate/floor, "floor-ratio")
			if naive > 0 {
				b.ReportMetric(rate/naive, "naive-ratio")
			}
			b.ReportMetric(run.perItem, "statements/item")
			b.ReportMetric(run.lostPerItem, "lost-cas/item")
		})
	}
}

// benchShape is one laneq measurement: lanes of that size (0: no lanes),
// that many worker processes, worker.Config.CompleteBatch (0: the default)
// and the executor profile ("": the default); with disjoint, worker i
// serves only work type deliver-i, and the items are split evenly among
// those types; with noTake, worker.Config.NoClaimOnPromote.
type benchShape struct {
	lanes, workers, completeBatch int
	profile                       scheduler.Profile
	disjoint, noTake              bool
}

// measure runs one baseline as a sub-benchmark (so its figure is printed)
// and returns its items/s.
func measure(b *testing.B, name string, rate func(*testing.B) drain) float64 {
	var got float64
	b.Run(name, func(b *testing.B) {
		d := rate(b)
		got = d.rate
		b.ReportMetric(got, "items/s")
		reportUsage(b, "", d.usage)
	})
	return got // 0 when -bench filtered it out
}

// enableUsage makes the server keep a statement summary entry for every
// statement measured (serverusage.Enable).
func enableUsage(b *testing.B) {
	b.Helper()
	if err := serverusage.Enable(context.Background(), tidbtest.NewDB(b)); err != nil {
		b.Fatal(err)
	}
}

// benchQueue is a fresh database holding n queued items of work type
// "deliver", or, with types > 1, "deliver-0" ... spread evenly.
func benchQueue(b *testing.B, n, laneSize, types int) (*workqueue.Queue, *sql.DB, string) {
	b.Helper()
	qu, db, dsn := queuetest.New(b, workqueue.Config{}, scope)
	const batch = 1000
	for start := 0; start < n; start += batch {
		var evs []workqueue.Event
		for i := start; i < min(n, start+batch); i++ {
			lane := ""
			if laneSize > 0 {
				lane = fmt.Sprintf("lane-%d", i%(n/laneSize))
			}
			evs = append(evs, workqueue.Event{
				IdempotencyKey: fmt.Sprintf("ev-%d", i), Payload: []byte("{}"),
				Work: []workqueue.Work{{WorkType: benchWorkType(i, types), SourceLane: lane}},
			})
		}
		if _, err := qu.Enqueue(context.Background(), scope, evs); err != nil {
			b.Fatalf("enqueue: %v", err)
		}
	}
	return qu, db, dsn
}

// drain is one measured drain: items/s and what the server counted for its
// statements (serverusage: request units, and keys where the engine
// reports them).
type drain struct {
	rate  float64
	usage serverusage.PerItem // the drain's statements only
}

// floorRate: two autocommit primary-key UPDATEs per item from 16
// connections.
func floorRate(b *testing.B) drain { return floorRateBatched(b, 1) }

// floorRateBatched: the floor's two UPDATEs, each for batch items at once
// (one statement and one commit per batch), from 16 connections. With
// batch 16 it is the least any queue that writes these two row versions
// per item can do: what batching can reach before anything else a queue
// reads (candidates, payloads) is paid for.
func floorRateBatched(b *testing.B, batch int) drain {
	_, db, _ := benchQueue(b, throughputItems, 0, 1)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16) // no reconnects: the floor pays for statements only
	rows, err := db.Query("SELECT work_id FROM work_item WHERE scope_id = ?", scope)
	if err != nil {
		b.Fatal(err)
	}
	var all []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			b.Fatal(err)
		}
		all = append(all, id)
	}
	if err := rows.Close(); err != nil {
		b.Fatal(err)
	}
	chunks := make(chan []int64, len(all))
	for c := range slices.Chunk(all, batch) {
		chunks <- c
	}
	close(chunks)
	q := naivedb.New(db)
	return timedDrain(b, db, 16, func(ctx context.Context) (int, error) {
		ids, ok := <-chunks
		if !ok {
			return 0, nil
		}
		if batch == 1 {
			if err := q.NaiveMarkProcessing(ctx, ids[0]); err != nil {
				return 0, err
			}
			return 1, q.NaiveComplete(ctx, ids[0])
		}
		if _, err := q.FloorMarkProcessingBatch(ctx, ids); err != nil {
			return 0, err
		}
		n, err := q.FloorCompleteBatch(ctx, ids)
		return int(n), err
	})
}

// naiveRate: SELECT ... LIMIT 1 FOR UPDATE, mark processing, commit, then
// complete, on 16 connections.
func naiveRate(b *testing.B) drain {
	_, db, _ := benchQueue(b, throughputItems, 0, 1)
	db.SetMaxOpenConns(16)
	db.SetMaxIdleConns(16)
	return timedDrain(b, db, 16, func(ctx context.Context) (int, error) {
		ok, err := queuetest.NaiveClaimComplete(ctx, db, scope)
		if ok {
			return 1, err
		}
		return 0, err
	})
}

// timedDrain runs step on n goroutines until each reports nothing left (0
// items done) and returns items/s and the usage of db's database meanwhile.
func timedDrain(b *testing.B, db *sql.DB, n int, step func(context.Context) (int, error)) drain {
	b.Helper()
	before := readUsage(b, db)
	var done atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	b.ResetTimer()
	began := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				did, err := step(context.Background())
				if err != nil {
					errs <- err
					return
				}
				if did == 0 {
					return
				}
				done.Add(int64(did))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	if got := done.Load(); got != throughputItems {
		b.Fatalf("drained %d of %d items", got, throughputItems)
	}
	return drain{rate: throughputItems / elapsed.Seconds(), usage: readUsage(b, db).Sub(before).PerItem(throughputItems)}
}

// readUsage reads what the server counted for db's database so far.
func readUsage(b *testing.B, db *sql.DB) serverusage.Usage {
	b.Helper()
	u, err := serverusage.Read(context.Background(), db)
	if err != nil {
		b.Fatal(err)
	}
	return u
}

// reportUsage reports ru/item (and keys/item where the engine reports keys)
// of a drain under prefix ("": laneq's own).
func reportUsage(b *testing.B, prefix string, u serverusage.PerItem) {
	b.ReportMetric(u.RU(), prefix+"ru/item")
	if u.TotalKeys > 0 {
		b.ReportMetric(u.TotalKeys, prefix+"keys/item")
	}
}

// workerRun is one drain by assembled workers: items/s, statements per item
// (all workers' statements, start-up included), fresh claim candidates lost
// to another worker per item, and each item's handler-return-to-commit
// time.
type workerRun struct {
	rate, perItem, lostPerItem float64
	finish                     []time.Duration
	usage                      serverusage.PerItem
}

// workerRate drains a fresh queue with sh.workers assembled runtime/workers
// of 16 executors each.
func workerRate(b *testing.B, sh benchShape) workerRun {
	var finish []time.Duration
	types := 1
	if sh.disjoint {
		types = sh.workers
	}
	_, setup, dsn := benchQueue(b, throughputItems, sh.lanes, types)
	usageBefore := readUsage(b, setup)
	var ran atomic.Int64
	handler := func(context.Context, *worker.Job) error { ran.Add(1); return nil }
	var finishMu sync.Mutex
	returned := map[int64]time.Time{}
	hooks := &worker.Hooks{
		BeforeFinish: func(c workqueue.Claimed, _ error) {
			finishMu.Lock()
			returned[c.WorkID] = time.Now()
			finishMu.Unlock()
		},
		AfterFinish: func(c workqueue.Claimed, _, err error) {
			if err != nil {
				return
			}
			finishMu.Lock()
			finish = append(finish, time.Since(returned[c.WorkID]))
			finishMu.Unlock()
		},
	}
	var ws []*worker.Worker
	var counters []*sqlcount.Counter
	for i := range sh.workers {
		db, counter, err := sqlcount.Open(dsn)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { db.Close() })
		db.SetMaxIdleConns(workqueue.DefaultIdleConns) // as workqueue.OpenDB
		qu, err := workqueue.New(db, workqueue.Config{})
		if err != nil {
			b.Fatal(err)
		}
		cfg := worker.Config{Scope: scope, Owner: fmt.Sprintf("bench-%d", i), Logger: quiet}
		cfg.Scheduler.Executors = 16
		cfg.Hooks = hooks
		cfg.CompleteBatch = sh.completeBatch
		cfg.Scheduler.Profile = sh.profile
		cfg.NoClaimOnPromote = sh.noTake
		workType := "deliver"
		if sh.disjoint {
			workType = benchWorkType(i, types)
		}
		w, err := worker.New(qu, cfg, map[string]worker.Handler{workType: handler})
		if err != nil {
			b.Fatal(err)
		}
		ws, counters = append(ws, w), append(counters, counter)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	runErrs := make(chan error, sh.workers)
	b.ResetTimer()
	began := time.Now()
	for _, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				runErrs <- err
			}
		}()
	}
	finished := func() (n uint64) {
		for _, w := range ws {
			n += w.Stats().Scheduler.Finished
		}
		return n
	}
	deadline := time.Now().Add(10 * time.Minute)
	for finished() < throughputItems && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	elapsed := time.Since(began)
	b.StopTimer()
	cancel()
	wg.Wait()
	close(runErrs)
	for err := range runErrs {
		b.Fatal(err)
	}
	if got := finished(); got != throughputItems {
		b.Fatalf("finished %d of %d items in 10 minutes", got, throughputItems)
	}
	usage := readUsage(b, setup).Sub(usageBefore).PerItem(throughputItems)
	top, err := serverusage.Top(context.Background(), setup, 8)
	if err != nil {
		b.Fatal(err)
	}
	// Where the server's own time went, by statement (the database's
	// migration and the items' enqueue included): the profile that says
	// what bounds a shape.
	for _, st := range top {
		b.Logf("server time %8.1f ms  %6d executions  %8.1f RU  %s", ms(st.Latency), st.Executions, st.RU, st.Text)
	}
	var statements int64
	for _, c := range counters {
		statements += c.Statements()
	}
	var lost uint64
	for i, w := range ws {
		st := w.Stats()
		lost += st.Contention.LostCAS
		b.Logf("worker %d: claimed %d (taken on promote %d), claim turns %d, claims %d, lost CAS %d, spread %d; statements %v", i, st.Scheduler.Claimed,
			st.Scheduler.Adopted, st.Scheduler.ClaimTurns, st.Scheduler.Claims, st.Contention.LostCAS, st.Contention.Spread, counters[i].ByStatement())
	}
	finishMu.Lock()
	defer finishMu.Unlock()
	return workerRun{
		rate: throughputItems / elapsed.Seconds(), perItem: float64(statements) / throughputItems,
		lostPerItem: float64(lost) / throughputItems, finish: slices.Clone(finish), usage: usage,
	}
}

// benchWorkType is item i's work type when items are spread over types.
func benchWorkType(i, types int) string {
	if types <= 1 {
		return "deliver"
	}
	return fmt.Sprintf("deliver-%d", i%types)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
