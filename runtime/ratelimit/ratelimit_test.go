package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

// A taker deletes the scope's ended windows, of every limit and key,
// whoever wrote them: here 1,500 rows of a key whose processes are gone,
// more than one delete's batch (the first Take deletes 1,000, later ones
// the rest), while a window not yet ended, rows with no end (written
// before migration 00026) and another scope's ended rows stay, as does
// the window the taker is spending; the taker's rows have an end.
func TestEndedWindowsArePruned(t *testing.T) {
	t.Parallel()
	const scope, other = "tenant-a/ratelimit", "tenant-b/ratelimit"
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	ended := time.Now().Add(-time.Hour).UnixMicro()
	seed := func(scope, name string, n int, ends any) {
		t.Helper()
		for first := 0; first < n; first += 500 {
			var values []string
			var args []any
			for i := first; i < min(first+500, n); i++ {
				values = append(values, "(?, ?, ?, 1, ?)")
				args = append(args, scope, name, i, ends)
			}
			if _, err := db.Exec("INSERT INTO rate_window (scope_id, limit_name, window_index, granted, ends_micros) VALUES "+strings.Join(values, ","), args...); err != nil {
				t.Fatal(err)
			}
		}
	}
	gone := ratelimit.BudgetName("sync", "gone")
	seed(scope, gone, 1500, ended)
	seed(scope, "legacy", 3, nil)
	seed(scope, "later", 1, time.Now().Add(time.Hour).UnixMicro())
	seed(other, gone, 5, ended)
	count := func(scope, name string) int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM rate_window WHERE scope_id = ? AND limit_name = ?", scope, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	l, err := ratelimit.New(qu, scope, []ratelimit.Limit{{WorkType: "sync", N: 10, Per: time.Second, PerKey: true}}, ratelimit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	take := func() {
		t.Helper()
		l.Claimed("sync", "hot", 1)
		if _, _, err := l.Take(ctx, "sync", "hot"); err != nil {
			t.Fatal(err)
		}
	}
	take() // the first Take sweeps
	if n := count(scope, gone); n != 500 {
		t.Fatalf("%d ended rows left after the first sweep, want 500 (a batch of 1,000 deleted)", n)
	}
	waitfor.Until(t, time.Minute, func() (bool, error) {
		take()
		return count(scope, gone) == 0, nil
	}, func() string { return fmt.Sprintf("%d ended rows left", count(scope, gone)) })
	if legacy, later, others, hot := count(scope, "legacy"), count(scope, "later"), count(other, gone), count(scope, ratelimit.BudgetName("sync", "hot")); legacy != 3 || later != 1 || others != 5 || hot == 0 {
		t.Fatalf("rows left: %d with no end, %d not ended, %d of another scope, %d of the key in use; want 3, 1, 5 and some", legacy, later, others, hot)
	}
	var nullEnds int
	if err := db.QueryRow("SELECT COUNT(*) FROM rate_window WHERE scope_id = ? AND limit_name <> 'legacy' AND ends_micros IS NULL", scope).Scan(&nullEnds); err != nil {
		t.Fatal(err)
	}
	if nullEnds != 0 {
		t.Fatalf("%d windows written by the taker have no end", nullEnds)
	}
}
