package dashboard_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The scope page charts each class's last three hours from the history
// two processes wrote: stacked bars per minute (their counts summed), the
// oldest-due line, and nothing from before the window.
func TestScopeCharts(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	c := newClient(t, db, dashboard.Config{})
	code, body := c.get("/scope?s=" + url.QueryEscape(scope) + "&live=0")
	wantPage(t, code, body, 200, "No history in the last three hours")

	var now time.Time
	if err := db.QueryRow("SELECT NOW(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	minute := now.UTC().Truncate(time.Minute)
	sample := func(ago int, class string, completed, failed, dead int, due time.Duration) workqueue.HistorySample {
		return workqueue.HistorySample{Minute: minute.Add(-time.Duration(ago) * time.Minute), QueueClass: class, WorkType: "deliver",
			Completed: completed, Failed: failed, Dead: dead, MaxDue: due}
	}
	for writer, samples := range map[string][]workqueue.HistorySample{
		"proc-a": {sample(5, "default", 12, 2, 1, 3*time.Second), sample(4, "default", 7, 0, 0, time.Second), sample(300, "default", 1000, 0, 0, time.Hour)},
		"proc-b": {sample(5, "default", 8, 0, 0, 9*time.Second), sample(2, "bulk", 40, 0, 0, 2*time.Minute)},
	} {
		if n, err := qu.RecordHistory(ctx, scope, writer, samples); err != nil || n != len(samples) {
			t.Fatalf("record %s: %d, %v", writer, n, err)
		}
	}
	code, body = c.get("/scope?s=" + url.QueryEscape(scope) + "&live=0")
	wantPage(t, code, body, 200, "Class bulk", "Class default",
		"completed 27", "failed, due again 2", "dead 1", // default's window: 12+8+7 completed; the 5-hour-old minute is outside
		"busiest: 23", // the minute both processes wrote: 12+8 completed, 2 failed, 1 dead
		`<rect class="completed"`, `<rect class="failed"`, `<rect class="dead"`,
		"20 completed", "highest: 9s", "highest: 2m0s", `<polyline class="due"`)
	if strings.Contains(body, "1000 completed") {
		t.Fatal("a minute from before the window was charted")
	}
}
