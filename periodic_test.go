package laneq_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/worker"
)

// syncLog is a Client's log; safe for concurrent writes.
type syncLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestPeriodicScheduleFailureIsIsolated, the Client's side (runtime/periodic
// has the Runner's): a job whose Args fail (nil) or panic for its ticks,
// after passing Start's sample tick, does not stop another job, whose
// ticks are enqueued and handled once each; the bad job stores nothing
// (no event without work) and its failure is logged. A panicking
// Worker.OnFinished is recovered and logged: the worker goes on handling
// ticks, and the Client still publishes each completion. A job whose Args
// panic for Start's sample tick fails Start with the panic.
func TestPeriodicScheduleFailureIsIsolated(t *testing.T) {
	t.Parallel()
	sampleTick := func(tick time.Time) bool { return tick.Unix() == 0 } // Start checks each job's Args with it
	good := laneq.PeriodicJob{Name: "good", Every: time.Second, Args: func(tick time.Time) laneq.Args {
		return greet{Name: tick.UTC().Format(time.RFC3339)}
	}}
	// run starts a Client with jobs beside good, and onFinished; it waits
	// for three of good's ticks to be handled and their completions
	// published, and checks that jobs stored nothing and were retried
	// (log is the Client's).
	run := func(t *testing.T, log *syncLog, jobs []laneq.PeriodicJob, onFinished func(worker.Finished)) {
		t.Helper()
		db, dsn := tidbtest.NewDBWithDSN(t)
		cfg := laneq.Config{Periodic: append(jobs, good), Logger: slog.New(slog.NewTextHandler(log, nil))}
		cfg.Worker.OnFinished = onFinished
		c := openClientOn(t, dsn, cfg)
		var mu sync.Mutex
		handled := map[string]int{}
		events := startWorker(t, c, func(_ context.Context, job *laneq.Job[greet]) error {
			mu.Lock()
			handled[job.Args.Name]++
			mu.Unlock()
			return nil
		}, laneq.EventCompleted)
		for range 3 {
			nextEvent(t, events)
		}
		mu.Lock()
		for tick, n := range handled {
			if n != 1 {
				t.Errorf("tick %s handled %d times", tick, n)
			}
		}
		mu.Unlock()
		for _, j := range jobs {
			var stored int
			waitfor.Until(t, guard, func() (bool, error) {
				err := db.QueryRow("SELECT COUNT(*) FROM event WHERE idempotency_key LIKE ?", "periodic/"+j.Name+"/%").Scan(&stored)
				return stored > 0 || strings.Count(log.String(), "schedule="+j.Name) >= 2, err
			}, func() string {
				return fmt.Sprintf("job %s's failures were not logged twice (retried):\n%s", j.Name, log.String())
			})
			if stored != 0 {
				t.Errorf("job %s stored %d ticks, want none (its Args fail)", j.Name, stored)
			}
		}
	}
	t.Run("nil Args", func(t *testing.T) {
		t.Parallel()
		var log syncLog
		run(t, &log, []laneq.PeriodicJob{{Name: "nil-args", Every: time.Second, Args: func(tick time.Time) laneq.Args {
			if sampleTick(tick) {
				return greet{}
			}
			return nil
		}}}, nil)
		if !strings.Contains(log.String(), "nil args") {
			t.Errorf("the log does not say the Args were nil:\n%s", log.String())
		}
	})
	t.Run("panicking Args", func(t *testing.T) {
		t.Parallel()
		var log syncLog
		run(t, &log, []laneq.PeriodicJob{{Name: "panics", Every: time.Second, Args: func(tick time.Time) laneq.Args {
			if sampleTick(tick) {
				return greet{}
			}
			panic("no arguments for this tick")
		}}}, nil)
		if !strings.Contains(log.String(), "no arguments for this tick") || !strings.Contains(log.String(), "stack=") {
			t.Errorf("the log does not hold the panic and its stack:\n%s", log.String())
		}
	})
	t.Run("Args panicking at Start", func(t *testing.T) {
		t.Parallel()
		c, _ := openClient(t, laneq.Config{Periodic: []laneq.PeriodicJob{{Name: "always-panics", Every: time.Second,
			Args: func(time.Time) laneq.Args { panic("no arguments at all") }}}})
		if err := laneq.AddWorker(c, func(context.Context, *laneq.Job[greet]) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := c.Start(context.Background()); err == nil || !strings.Contains(err.Error(), "no arguments at all") {
			t.Fatalf("Start with a job whose Args panic = %v, want an error holding the panic", err)
		}
	})
	t.Run("panicking OnFinished", func(t *testing.T) {
		t.Parallel()
		var log syncLog
		run(t, &log, nil, func(worker.Finished) { panic("OnFinished broke") })
		// The Client publishes a completion before the worker logs the
		// panic that followed it: wait for the third log line.
		waitfor.Until(t, guard, func() (bool, error) { return strings.Count(log.String(), "OnFinished panicked") >= 3, nil },
			func() string { return fmt.Sprintf("the log does not hold each OnFinished panic:\n%s", log.String()) })
	})
}
