package periodic_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-a/periodic"

func work(time.Time) (workqueue.Event, error) {
	return workqueue.Event{Work: []workqueue.Work{{WorkType: "tick"}}}, nil
}

// runner starts a Runner of cfg on qu until the test ends.
func runner(t *testing.T, qu *workqueue.Queue, cfg periodic.Config) *periodic.Runner {
	t.Helper()
	cfg.Scope = scope
	r, err := periodic.New(qu, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return r
}

// ticksOf reads the stored ticks of schedule (their keys) and their items,
// in key order, with the database time each event was stored, relative to
// its tick.
type storedTick struct {
	key   string
	items int
	lead  time.Duration // stored this long after the tick (negative: before it)
}

func ticksOf(t *testing.T, db *sql.DB, schedule string, every time.Duration) []storedTick {
	t.Helper()
	rows, err := db.Query(`SELECT e.idempotency_key, UNIX_TIMESTAMP(e.created_at) * 1000000,
		(SELECT COUNT(*) FROM work_item w WHERE w.event_id = e.event_id)
		FROM event e WHERE e.scope_id = ? AND e.idempotency_key LIKE ? ORDER BY e.idempotency_key`, scope, "periodic/"+schedule+"/%")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedTick
	for rows.Next() {
		var st storedTick
		var created float64
		if err := rows.Scan(&st.key, &created, &st.items); err != nil {
			t.Fatal(err)
		}
		tick, err := time.Parse("2006-01-02T15:04:05.000000Z", st.key[len("periodic/"+schedule+"/"):])
		if err != nil {
			t.Fatalf("key %q: %v", st.key, err)
		}
		st.lead = time.UnixMicro(int64(created)).Sub(tick)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkContiguous fails unless ticks are one every `every`, each with one
// item, none stored before it was due.
func checkContiguous(t *testing.T, ticks []storedTick, schedule string, every time.Duration) {
	t.Helper()
	for i, st := range ticks {
		if st.items != 1 {
			t.Errorf("tick %s has %d items, want 1", st.key, st.items)
		}
		if st.lead < 0 {
			t.Errorf("tick %s was stored %s before it was due", st.key, -st.lead)
		}
		if i > 0 {
			prev, _ := time.Parse("2006-01-02T15:04:05.000000Z", ticks[i-1].key[len("periodic/"+schedule+"/"):])
			cur, _ := time.Parse("2006-01-02T15:04:05.000000Z", st.key[len("periodic/"+schedule+"/"):])
			if cur.Sub(prev) != every {
				t.Errorf("ticks %s and %s: %s apart, want %s (a tick lost)", ticks[i-1].key, st.key, cur.Sub(prev), every)
			}
		}
	}
}

// Two Runners of one schedule (each on its own Queue, as two processes
// would be) store each tick once, with one item, none before it is due and
// none skipped; a second schedule of the same Runners keeps its own ticks.
func TestTwoRunnersStoreEachTickOnce(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, scope)
	otherDB, err := workqueue.OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = otherDB.Close() })
	other, err := workqueue.New(otherDB, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Close() })
	schedules := []periodic.Schedule{
		{Name: "every-second", Every: time.Second, Event: work},
		{Name: "every-2s", Every: 2 * time.Second, Event: work},
	}
	var mu sync.Mutex
	created := map[string]int{}
	onTick := func(name string, tick time.Time, c bool) {
		if c {
			mu.Lock()
			created[name+"@"+tick.UTC().Format(time.RFC3339Nano)]++
			mu.Unlock()
		}
	}
	a := runner(t, qu, periodic.Config{Schedules: schedules, OnTick: onTick})
	b := runner(t, other, periodic.Config{Schedules: schedules, OnTick: onTick})
	var ticks []storedTick
	waitfor.Until(t, time.Minute, func() (bool, error) {
		ticks = ticksOf(t, db, "every-second", time.Second)
		return len(ticks) >= 6, nil
	}, func() string { return fmt.Sprintf("%d ticks stored", len(ticks)) })
	checkContiguous(t, ticks, "every-second", time.Second)
	checkContiguous(t, ticksOf(t, db, "every-2s", 2*time.Second), "every-2s", 2*time.Second)
	mu.Lock()
	for k, n := range created {
		if n != 1 {
			t.Errorf("%s reported created %d times", k, n)
		}
	}
	mu.Unlock()
	sa, sb := a.Stats(), b.Stats()
	if sa.Created+sb.Created == 0 || sa.Duplicates+sb.Duplicates == 0 {
		t.Errorf("stats %+v and %+v: want both created and duplicate ticks (two runners of one schedule)", sa, sb)
	}
	t.Logf("runner a %+v, runner b %+v; lead of the first ticks %v", sa, sb, ticks[0].lead)
}

// The Missed policy: a yearly schedule's last tick (January 1st) is months
// old. MissedRunOnce stores it at start, once (a second Runner finds it
// stored); MissedSkip does not.
func TestMissedTicks(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	yearly := func(name string, missed periodic.Missed) periodic.Schedule {
		return periodic.Schedule{Name: name, Cron: "0 0 1 1 *", Missed: missed, Event: work}
	}
	first := runner(t, qu, periodic.Config{Schedules: []periodic.Schedule{yearly("run-once", periodic.MissedRunOnce), yearly("skip", periodic.MissedSkip)}})
	waitfor.Until(t, time.Minute, func() (bool, error) { return first.Stats().Passes >= 1, nil },
		func() string { return fmt.Sprintf("%+v", first.Stats()) })
	second := runner(t, qu, periodic.Config{Schedules: []periodic.Schedule{yearly("run-once", periodic.MissedRunOnce)}})
	waitfor.Until(t, time.Minute, func() (bool, error) { return second.Stats().Passes >= 1, nil },
		func() string { return fmt.Sprintf("%+v", second.Stats()) })

	var now time.Time
	if err := db.QueryRow("SELECT UTC_TIMESTAMP(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("periodic/run-once/%d-01-01T00:00:00.000000Z", now.Year())
	ran := ticksOf(t, db, "run-once", 0)
	if len(ran) != 1 || ran[0].key != want || ran[0].items != 1 {
		t.Errorf("run-once stored %+v, want one tick %s", ran, want)
	}
	if skipped := ticksOf(t, db, "skip", 0); len(skipped) != 0 {
		t.Errorf("skip stored %+v, want nothing", skipped)
	}
	if s := first.Stats(); s.Created != 1 || s.Duplicates != 0 {
		t.Errorf("first runner %+v, want 1 created", s)
	}
	if s := second.Stats(); s.Created != 0 || s.Duplicates != 1 {
		t.Errorf("second runner %+v, want 1 duplicate", s)
	}
}

// A Runner rejects a bad configuration before it runs.
func TestNewRejects(t *testing.T) {
	t.Parallel()
	qu, _, _ := queuetest.New(t, workqueue.Config{}, scope)
	good := periodic.Schedule{Name: "a", Every: time.Second, Event: work}
	for _, cfg := range []periodic.Config{
		{Schedules: []periodic.Schedule{good}},
		{Scope: scope, Schedules: []periodic.Schedule{good, good}},
		{Scope: scope, Schedules: []periodic.Schedule{good}, OnTimeWithin: -time.Second},
	} {
		if _, err := periodic.New(qu, cfg); err == nil {
			t.Errorf("New(%+v) accepted it", cfg)
		}
	}
}
