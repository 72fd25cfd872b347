package ratelimit_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

// A key in use for many periods keeps at most a few periods of window
// rows: its budget deletes its passed windows itself every few periods,
// instead of waiting for the process-wide turn of some other key's take
// (with many keys, a key's rows would pile up until it went idle, and
// stay when its processes stopped first).
func TestBudgetInUsePrunesItsOwnRows(t *testing.T) {
	const scope = "tenant-a/ratelimit"
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	limit := ratelimit.Limit{WorkType: "sync", N: 10, Per: 100 * time.Millisecond, PerKey: true} // ten 10ms windows, one start each
	l, err := ratelimit.New(qu, scope, nil, []ratelimit.Limit{limit})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	windows := map[int64]bool{} // the windows (of this host's clock) with a start
	for deadline := time.Now().Add(2 * time.Minute); len(windows) < 100; {
		if time.Now().After(deadline) {
			t.Fatalf("started in %d windows in 2 minutes, want 100", len(windows))
		}
		l.Claimed("sync", "hot", 1)
		ok, _, err := l.Take(ctx, "sync", "hot")
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			windows[time.Now().UnixMicro()/10_000] = true
		}
	}
	var rows, granted int
	if err := db.QueryRow("SELECT COUNT(*), COALESCE(SUM(granted), 0) FROM rate_window WHERE scope_id = ? AND limit_name = ?",
		scope, ratelimit.BudgetName("sync", "hot")).Scan(&rows, &granted); err != nil {
		t.Fatal(err)
	}
	// Pruned every 4 periods down to the last 2: at most 6 periods (60
	// windows), the window the last take was in, and a row or two of
	// windows that a clock resync left behind.
	if rows > 63 || rows == 0 || granted > rows {
		t.Fatalf("%d rows granting %d after starts in %d windows, want at most 63 rows, one start each", rows, granted, len(windows))
	}
	t.Logf("%d rows (granting %d) left of starts in %d windows", rows, granted, len(windows))
}
