package uitest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// browser is a headless Chromium on a dashboard.
type browser struct {
	t    *testing.T
	ctx  context.Context
	base string
}

func newBrowser(t *testing.T, d *dashboard.Server) *browser {
	t.Helper()
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); d.Close() })
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromium(t)), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 800), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancel)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	ctx, cancel = context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(cancel)
	return &browser{t: t, ctx: ctx, base: srv.URL}
}

func (b *browser) do(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.t.Fatal(err)
	}
}

func (b *browser) text(sel string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatal(err)
	}
	return s
}

// shoot saves a screenshot to $LANEQ_SCREENSHOTS/name when that is set.
func (b *browser) shoot(name string) chromedp.Action[chromedp.Void] {
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		dir := os.Getenv("LANEQ_SCREENSHOTS")
		if dir == "" {
			return chromedp.Void{}, nil
		}
		png, err := chromedp.FullScreenshot(100)(ctx, t)
		if err != nil {
			return chromedp.Void{}, err
		}
		return chromedp.Void{}, os.WriteFile(filepath.Join(dir, name), png, 0o644)
	}
}

// confirm clicks the link to an action, checks its confirmation page says
// what it will do, and confirms.
func (b *browser) confirm(link, says string) {
	b.t.Helper()
	b.do(chromedp.Click(chromedp.CSS(link)), chromedp.WaitVisible(chromedp.CSS(`button.danger`)))
	if q := b.text(`main`); !strings.Contains(q, says) {
		b.t.Fatalf("confirmation page does not say %q:\n%s", says, q)
	}
	b.do(chromedp.Click(chromedp.CSS(`button.danger`)))
}

// post sends a form from the page's own origin, as a forged form would,
// and returns the status.
func (b *browser) post(path string, form url.Values) int {
	b.t.Helper()
	status, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](fmt.Sprintf(
		`fetch(%q, {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: %q}).then(r => r.status)`,
		path, form.Encode()), chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatal(err)
	}
	return status
}

// TestDashboardActions drives every write action through its
// confirmation page in a real browser: retry-now, skip (the lane moves on),
// pause and resume a class, and a bulk replay of 250 dead letters whose
// repeat creates nothing; a token-less or forged POST to any action writes
// nothing.
func TestDashboardActions(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	res, err := qu.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: "order-1", RouteID: "crm", RouteVersion: 3, EventKind: "order.changed",
		SourceKind: "order", SourceID: "order-1", Payload: []byte("{}"), Work: []workqueue.Work{
			{WorkType: "invoice", Delay: time.Hour},
			{WorkType: "deliver", SourceLane: "account-9"},
			{WorkType: "notify", SourceLane: "account-9"},
			{WorkType: "archive", QueueClass: "bulk"},
		}}})
	if err != nil {
		t.Fatal(err)
	}
	delayed, head, follower := res[0].Work[0].WorkID, res[0].Work[1].WorkID, res[0].Work[2].WorkID
	dead := queuetest.Dead(t, qu, scope, "sync", "upstream_5xx", 250)
	d, err := dashboard.New(db, dashboard.Config{AllowWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	b := newBrowser(t, d)
	item := func(id int64) string { return fmt.Sprintf("%s/item?id=%d", b.base, id) }
	state := func(id int64) string { t.Helper(); return queuetest.Item(t, db, id).State }
	children := func() int {
		t.Helper()
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND replay_of_work_id IS NOT NULL", scope).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// Token-less and forged POSTs to every action write nothing.
	b.do(chromedp.Navigate(item(follower)), chromedp.WaitVisible(chromedp.CSS(`dd.why`)), b.shoot("dashboard-item-in-lane.png"))
	if why := b.text(`dd.why`); !strings.Contains(why, "blocked in source lane account-9") {
		t.Fatalf("the follower's why: %q", why)
	}
	forged := []struct {
		path string
		form url.Values
	}{
		{"/replay", url.Values{"id": {fmt.Sprint(dead[0])}}},
		{"/retry-now", url.Values{"id": {fmt.Sprint(delayed)}}},
		{"/skip", url.Values{"id": {fmt.Sprint(head)}}},
		{"/pause", url.Values{"s": {scope}, "class": {"bulk"}}},
		{"/dlq/replay", url.Values{"s": {scope}}},
	}
	for _, f := range forged {
		if status := b.post(f.path, f.form); status != 403 {
			t.Fatalf("POST %s without a token: %d, want 403", f.path, status)
		}
		f.form.Set("csrf", strings.Repeat("ab", 32))
		if status := b.post(f.path, f.form); status != 403 {
			t.Fatalf("POST %s with a forged token: %d, want 403", f.path, status)
		}
	}
	if state(delayed) != workqueue.StatePending || state(head) != workqueue.StatePending || children() != 0 {
		t.Fatal("a refused POST wrote")
	}
	if paused, err := qu.PausedClasses(ctx, scope); err != nil || len(paused) != 0 {
		t.Fatalf("a refused POST paused %v (%v)", paused, err)
	}

	// Retry now: the delayed item becomes due.
	b.do(chromedp.Navigate(item(delayed)), chromedp.WaitVisible(chromedp.CSS(`dd.why`)))
	if why := b.text(`dd.why`); !strings.Contains(why, "not due until") {
		t.Fatalf("the delayed item's why: %q", why)
	}
	b.confirm(`a[href^="/retry-now"]`, "due now")
	b.do(chromedp.WaitVisible(chromedp.CSS(`dd.why`)))
	if why := b.text(`dd.why`); !strings.Contains(why, "due since") {
		t.Fatalf("after retry-now the why is %q", why)
	}

	// Skip the lane's head, with a reason: the follower is promoted.
	b.do(chromedp.Navigate(item(head)), chromedp.WaitVisible(chromedp.CSS(`dd.why`)))
	b.do(chromedp.Click(chromedp.CSS(`a[href^="/skip"]`)), chromedp.WaitVisible(chromedp.CSS(`input[name="reason"]`)),
		chromedp.SendKeys(chromedp.CSS(`input[name="reason"]`), "duplicate order"), b.shoot("dashboard-confirm-skip.png"),
		chromedp.Click(chromedp.CSS(`button.danger`)), chromedp.WaitVisible(chromedp.CSS(`dd.why`)))
	if page := b.text(`main`); !strings.Contains(page, "skipped") || !strings.Contains(page, "duplicate order") {
		t.Fatalf("after the skip:\n%s", page)
	}
	if state(head) != workqueue.StateSkipped || state(follower) != workqueue.StatePending {
		t.Fatalf("after the skip: head %s, follower %s; want skipped, pending", state(head), state(follower))
	}

	// Pause the bulk class from the scope page, then resume it.
	b.do(chromedp.Navigate(b.base+"/scope?s="+url.QueryEscape(scope)+"&live=0"), chromedp.WaitVisible(chromedp.CSS(`table.stats`)))
	b.confirm(`a[href^="/pause"][href$="class=bulk"]`, "Pause class bulk")
	b.do(chromedp.WaitVisible(chromedp.CSS(`p.paused`)), b.shoot("dashboard-scope-paused.png"))
	if banner := b.text(`p.paused`); !strings.Contains(banner, "class bulk") {
		t.Fatalf("pause banner: %q", banner)
	}
	if paused, err := qu.PausedClasses(ctx, scope); err != nil || len(paused) != 1 || paused[0] != "bulk" {
		t.Fatalf("paused classes %v (%v), want [bulk]", paused, err)
	}
	b.confirm(`a[href^="/resume"]`, "Resume class bulk")
	b.do(chromedp.WaitVisible(chromedp.CSS(`table.stats`)))
	if paused, err := qu.PausedClasses(ctx, scope); err != nil || len(paused) != 0 {
		t.Fatalf("paused classes after resume %v (%v)", paused, err)
	}

	// Bulk replay of the 250 dead letters of work type sync, then again.
	bulk := func() string {
		t.Helper()
		b.do(chromedp.Navigate(b.base+"/dlq?s="+url.QueryEscape(scope)+"&work_type=sync"), chromedp.WaitVisible(chromedp.CSS(`form.filters`)))
		b.confirm(`a[href^="/dlq/replay"]`, "work type sync")
		b.do(chromedp.WaitVisible(chromedp.CSS(`td.replayed`)))
		jobURL, err := chromedp.Run(b.ctx, chromedp.Location())
		if err != nil {
			t.Fatal(err)
		}
		var page string
		waitfor.Until(t, 3*time.Minute, func() (bool, error) {
			if err := chromedp.Do(b.ctx, chromedp.Navigate(jobURL), chromedp.WaitVisible(chromedp.CSS(`td.replayed`))); err != nil {
				return false, err
			}
			page = b.text(`main`)
			return strings.Contains(page, "done"), nil
		}, func() string { return "the bulk replay's page never said done:\n" + page })
		return page
	}
	first := bulk()
	b.do(b.shoot("dashboard-bulk-replay.png"))
	if got := b.text(`td.replayed`); got != "250" || children() != 250 {
		t.Fatalf("first bulk replay: %s replayed on the page, %d children; want 250\n%s", got, children(), first)
	}
	bulk()
	if got := b.text(`td.replayed`); got != "0" || children() != 250 {
		t.Fatalf("second bulk replay: %s replayed on the page, %d children; want 0 and still 250", got, children())
	}

	// A worker that serves only the reports classes: the processes page
	// lists it, and warns that the 250 replayed items of class default have
	// no live process.
	cfg := worker.Config{Scope: scope, Owner: "reports-worker", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Scheduler.Executors = 4
	cfg.Scheduler.Classes = scheduler.Classes{Latency: []string{"reports"}, Bulk: []string{"reports-bulk"}}
	w, err := worker.New(qu, cfg, map[string]worker.Handler{"report": func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stop(); <-done }()
	var page string
	waitfor.Until(t, time.Minute, func() (bool, error) {
		if err := chromedp.Do(b.ctx, chromedp.Navigate(b.base+"/processes?s="+url.QueryEscape(scope)), chromedp.WaitVisible(chromedp.CSS(`table.processes`))); err != nil {
			return false, err
		}
		page = b.text(`main`)
		return strings.Contains(page, "reports-worker"), nil
	}, func() string { return "the processes page never listed the worker:\n" + page })
	b.do(b.shoot("dashboard-processes.png"))
	if !strings.Contains(page, "1 live process") || !strings.Contains(page, "Class default has") || !strings.Contains(page, "reports, reports-bulk") {
		t.Fatalf("processes page:\n%s", page)
	}

	// A worker for class default runs the 250 replayed items; once it
	// stopped (writing its history), the scope page charts them.
	dcfg := worker.Config{Scope: scope, Owner: "sync-worker", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	dcfg.Scheduler.Executors = 8
	dw, err := worker.New(qu, dcfg, map[string]worker.Handler{"sync": func(context.Context, *worker.Job) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	dctx, dstop := context.WithCancel(context.Background())
	ddone := make(chan error, 1)
	go func() { ddone <- dw.Run(dctx) }()
	completed := func() int {
		var n int
		if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND replay_of_work_id IS NOT NULL AND state = 'completed'", scope).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitfor.Until(t, 2*time.Minute, func() (bool, error) { return completed() == 250, nil },
		func() string { return fmt.Sprintf("%d of 250 replayed items completed", completed()) })
	dstop()
	if err := <-ddone; err != nil {
		t.Fatal(err)
	}
	b.do(chromedp.Navigate(b.base+"/scope?s="+url.QueryEscape(scope)+"&live=0"), chromedp.WaitVisible(chromedp.CSS(`svg.bars`)),
		b.shoot("dashboard-scope-charts.png"))
	if charts := b.text(`main`); !strings.Contains(charts, "completed 250") {
		t.Fatalf("the scope page's charts:\n%s", charts)
	}
}
