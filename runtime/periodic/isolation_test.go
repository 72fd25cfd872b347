package periodic_test

import (
	"bytes"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/workqueue"
)

// logBuffer collects a Runner's log; safe for concurrent writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitForTicks waits until schedule has stored at least n ticks, and
// checks them: one every `every`, one item each, none early.
func waitForTicks(t *testing.T, db *sql.DB, schedule string, every time.Duration, n int) {
	t.Helper()
	var ticks []storedTick
	waitfor.Until(t, time.Minute, func() (bool, error) {
		ticks = ticksOf(t, db, schedule, every)
		return len(ticks) >= n, nil
	}, func() string { return fmt.Sprintf("schedule %s stored %d ticks, want %d", schedule, len(ticks), n) })
	checkContiguous(t, ticks, schedule, every)
}

// TestPeriodicScheduleFailureIsIsolated: a schedule whose ticks cannot be
// enqueued (its event is invalid, its Event panics or fails) does not stop
// another schedule of the same Runner; it is logged and counted, its ticks
// stay due, and it stores nothing. A panicking OnTick is logged and the
// Runner goes on. More due ticks than the Queue's MaxEnqueueBatch are
// enqueued in batches of it, not refused forever.
func TestPeriodicScheduleFailureIsIsolated(t *testing.T) {
	t.Parallel()
	good := periodic.Schedule{Name: "good", Every: time.Second, Event: work}
	// beside runs bad next to good, waits for good's ticks, and returns
	// the Runner's log once bad has failed more than once (retried).
	beside := func(t *testing.T, bad periodic.Schedule) string {
		t.Helper()
		qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
		var log logBuffer
		r := runner(t, qu, periodic.Config{Schedules: []periodic.Schedule{bad, good}, Logger: slog.New(slog.NewTextHandler(&log, nil))})
		waitForTicks(t, db, "good", time.Second, 3)
		waitfor.Until(t, time.Minute, func() (bool, error) { return r.Stats().Failures >= 2, nil },
			func() string { return fmt.Sprintf("stats %+v, want the bad schedule's failures retried", r.Stats()) })
		if s := r.Stats(); s.Failures > 12 {
			t.Errorf("stats %+v: the bad schedule was retried on every pass, not after a backoff (1s doubling to 30s)", s)
		}
		if stored := ticksOf(t, db, bad.Name, time.Second); len(stored) != 0 {
			t.Errorf("the bad schedule stored %+v, want nothing", stored)
		}
		if !strings.Contains(log.String(), "schedule="+bad.Name) {
			t.Errorf("the log does not name the failing schedule %s:\n%s", bad.Name, log.String())
		}
		return log.String()
	}
	t.Run("invalid event", func(t *testing.T) {
		t.Parallel()
		log := beside(t, periodic.Schedule{Name: "invalid", Every: time.Second, Event: func(time.Time) (workqueue.Event, error) {
			return workqueue.Event{Work: []workqueue.Work{{WorkType: "not a work type"}}}, nil
		}})
		if !strings.Contains(log, "printable ASCII") {
			t.Errorf("the log does not say why the event is invalid:\n%s", log)
		}
	})
	t.Run("failing Event", func(t *testing.T) {
		t.Parallel()
		log := beside(t, periodic.Schedule{Name: "fails", Every: time.Second, Event: func(time.Time) (workqueue.Event, error) {
			return workqueue.Event{}, errors.New("the report's source is down")
		}})
		if !strings.Contains(log, "the report's source is down") {
			t.Errorf("the log does not hold Event's error:\n%s", log)
		}
	})
	t.Run("no work", func(t *testing.T) {
		t.Parallel()
		log := beside(t, periodic.Schedule{Name: "no-work", Every: time.Second, Event: func(time.Time) (workqueue.Event, error) {
			return workqueue.Event{}, nil
		}})
		if !strings.Contains(log, "names no work") {
			t.Errorf("the log does not say the event names no work:\n%s", log)
		}
	})
	t.Run("panicking Event", func(t *testing.T) {
		t.Parallel()
		log := beside(t, periodic.Schedule{Name: "panics", Every: time.Second, Event: func(time.Time) (workqueue.Event, error) {
			panic("the tick's config is missing")
		}})
		if !strings.Contains(log, "the tick's config is missing") || !strings.Contains(log, "stack=") {
			t.Errorf("the log does not hold the panic and its stack:\n%s", log)
		}
	})
	t.Run("panicking OnTick", func(t *testing.T) {
		t.Parallel()
		qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
		var log logBuffer
		runner(t, qu, periodic.Config{Schedules: []periodic.Schedule{good}, Logger: slog.New(slog.NewTextHandler(&log, nil)),
			OnTick: func(string, time.Time, bool) { panic("OnTick broke") }})
		waitForTicks(t, db, "good", time.Second, 3)
		if !strings.Contains(log.String(), "OnTick broke") {
			t.Errorf("the OnTick panic was not logged:\n%s", log.String())
		}
	})
	t.Run("more due ticks than MaxEnqueueBatch", func(t *testing.T) {
		t.Parallel()
		const batch = 2
		qu, db, _ := queuetest.New(t, workqueue.Config{MaxEnqueueBatch: batch}, scope)
		fake := clock.NewFake(time.Now())
		r := runner(t, qu, periodic.Config{Schedules: []periodic.Schedule{good}, Clock: fake})
		// The first pass stores the latest tick and arms the timer, on the
		// fake clock: the Runner looks again only when the test advances it.
		waitfor.Until(t, time.Minute, func() (bool, error) { return r.Stats().Passes >= 1 && fake.Armed() == 1, nil },
			func() string { return fmt.Sprintf("stats %+v, %d timers armed", r.Stats(), fake.Armed()) })
		start := dbNow(t, db)
		waitfor.Until(t, time.Minute, func() (bool, error) { return dbNow(t, db).Sub(start) > (2*batch+1)*time.Second, nil },
			func() string { return "the database's clock did not move on" })
		fake.Advance(time.Hour) // the next pass finds more than 2*batch ticks due at once
		waitForTicks(t, db, "good", time.Second, 2*batch+2)
		if s := r.Stats(); s.Failures != 0 {
			t.Errorf("stats %+v, want no failure", s)
		}
	})
}

func dbNow(t *testing.T, db *sql.DB) time.Time {
	t.Helper()
	var now time.Time
	if err := db.QueryRow("SELECT NOW(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}
