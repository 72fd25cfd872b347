package dashboard_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The processes page lists a registered process with what it says about
// itself, escaped, and warns about a class with due work that no live
// process serves, but not about one that is served or paused.
func TestProcessesPage(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	var events []workqueue.Event
	for i, class := range []string{"default", "bulk", "reports"} {
		events = append(events, workqueue.Event{IdempotencyKey: class, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s",
			SourceID: class, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", QueueClass: class, Priority: int32(i)}}})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	if err := qu.PauseClass(ctx, scope, "reports"); err != nil {
		t.Fatal(err)
	}
	if err := qu.RegisterWakeEndpoint(ctx, scope, workqueue.WakeEndpoint{ID: "p1", Address: "127.0.0.1:7001", Key: make([]byte, 32),
		Process: &workqueue.ProcessInfo{Host: "web-<1>", PID: 4242, Owner: "worker-a", Executors: 16, Classes: []string{"default"}, WorkTypes: []string{"deliver"}, Quiet: true,
			AbandonedHandlers: 2}},
		time.Hour); err != nil {
		t.Fatal(err)
	}
	c := newClient(t, db, dashboard.Config{})
	code, body := c.get("/processes?s=" + url.QueryEscape(scope))
	wantPage(t, code, body, 200, "1 live process", "web-&lt;1&gt;", "4242", "worker-a", "127.0.0.1:7001", "<td>yes</td>",
		"Class bulk has 1 due and no live process serves it", `<td class="n">2</td>`, "2 handlers ignored their cancelled context and still run")
	// The same count, summed over live processes, on /metrics.
	code, body = c.get("/metrics?s=" + url.QueryEscape(scope))
	if want := "laneq_abandoned_handlers{scope=" + strconv.Quote(scope) + "} 2\n"; code != 200 || !strings.Contains(body, want) {
		t.Fatalf("/metrics: %d, no %q in\n%s", code, want, body)
	}
	if strings.Contains(body, "Class default has") || strings.Contains(body, "Class reports has") {
		t.Fatalf("a warning for a served or paused class:\n%s", body)
	}
	code, body = c.get("/scope?s=" + url.QueryEscape(scope))
	wantPage(t, code, body, 200, "/processes?s=")
	code, body = c.get("/processes?s=tenant-none")
	wantPage(t, code, body, 404)
}

// The scopes index marks the classes paused in each scope, read with the
// page (no read per scope), and only in the scope that paused them.
func TestScopesPageMarksPausedClasses(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	if err := qu.EnsureScope(ctx, "tenant-b", 1); err != nil {
		t.Fatal(err)
	}
	for _, class := range []string{"reports", "bulk"} {
		if err := qu.PauseClass(ctx, scope, class); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, db, dashboard.Config{})
	code, body := c.get("/")
	wantPage(t, code, body, 200, "Paused classes")
	rows := strings.Split(body, "<tr>")
	var paused, other string
	for _, row := range rows {
		switch {
		case strings.Contains(row, `href="/scope?s=tenant-b"`):
			other = row
		case strings.Contains(row, `href="/scope?s=tenant-a`):
			paused = row
		}
	}
	if !strings.Contains(paused, `<span class="paused">reports</span>`) || !strings.Contains(paused, `<span class="paused">bulk</span>`) {
		t.Fatalf("the paused scope's row does not name both paused classes:\n%s", paused)
	}
	if other == "" || strings.Contains(other, `class="paused"`) {
		t.Fatalf("the other scope's row is missing or marked paused:\n%s", other)
	}
}
