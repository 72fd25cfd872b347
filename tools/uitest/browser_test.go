// Package uitest drives the dashboard in a real headless Chromium against
// real TiDB: pages render seeded data, the replay flow (item page, Replay…,
// confirmation, submit) creates exactly one child, and a request without
// the CSRF token is refused. With LANEQ_SCREENSHOTS=dir it saves the
// README's screenshots there.
package uitest

import (
	"context"
	"database/sql"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-a/pack-1"

// chromium finds the browser: $LANEQ_CHROMIUM, else chromium on PATH. A
// missing browser fails the test (CI installs it: make chromium).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LANEQ_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium: install it (make chromium, or apt-get install chromium) or set LANEQ_CHROMIUM")
	return ""
}

func seed(t *testing.T) (*sql.DB, []int64) {
	t.Helper()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	var events []workqueue.Event
	for i := range 40 {
		key := fmt.Sprintf("order-%03d", i)
		class, wt := "default", "deliver"
		if i%5 == 0 {
			class = "bulk"
		}
		if i%4 == 0 {
			wt = "notify"
		}
		w := workqueue.Work{WorkType: wt, QueueClass: class}
		if i%7 == 0 {
			w.SourceLane = "account-7"
		}
		if i%9 == 0 {
			w.Delay = time.Hour
		}
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "crm", RouteVersion: 3, EventKind: "order.changed",
			SourceKind: "order", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{w}})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	cl, err := qu.NewClaimer(scope, "browser-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver", "notify"}, Max: 8})
	if err != nil || len(got) != 8 {
		t.Fatalf("claimed %d: %v", len(got), err)
	}
	var dead []int64
	for i, c := range got[:5] {
		class, summary := "upstream_4xx", "CRM answered 422: field \"email\" is invalid"
		if i%2 == 1 {
			class, summary = "timeout", "no answer within 30s"
		}
		if _, err := qu.Fail(ctx, c, workqueue.Failure{Class: class, Summary: summary}, workqueue.ErrPermanent); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, c.WorkID)
	}
	return db, dead
}

func TestDashboardInChromium(t *testing.T) {
	browser := chromium(t)
	db, dead := seed(t)
	d, err := dashboard.New(db, dashboard.Config{AllowWrites: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	defer srv.Close()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox,
		chromedp.WindowSize(1400, 800), chromedp.Flag("disable-gpu", true))
	actx, cancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	shots := os.Getenv("LANEQ_SCREENSHOTS")
	shoot := func(name string) chromedp.Action[chromedp.Void] {
		return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			if shots == "" {
				return chromedp.Void{}, nil
			}
			png, err := chromedp.FullScreenshot(100)(ctx, t) // quality 100: PNG
			if err != nil {
				return chromedp.Void{}, err
			}
			return chromedp.Void{}, os.WriteFile(filepath.Join(shots, name), png, 0o644)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatal(err)
		}
	}

	// The scope's statistics, then its dead letters.
	do(chromedp.Navigate(srv.URL+"/"),
		chromedp.Click(chromedp.CSS(`a[href^="/scope"]`)),
		chromedp.WaitVisible(chromedp.CSS(`table.stats`)),
		shoot("dashboard-scope.png"))
	if stats := text(`table.stats`); !strings.Contains(stats, "default") || !strings.Contains(stats, "bulk") {
		t.Fatalf("statistics page:\n%s", stats)
	}
	do(chromedp.Navigate(srv.URL+"/dlq?s="+scope),
		chromedp.WaitVisible(chromedp.CSS(`form.filters`)),
		shoot("dashboard-dead-letters.png"))
	dlq := text(`main`)
	for _, id := range dead {
		if !strings.Contains(dlq, fmt.Sprint(id)) {
			t.Fatalf("dead letter %d missing:\n%s", id, dlq)
		}
	}

	// A request without the CSRF token, from the page itself: refused.
	do(chromedp.Navigate(fmt.Sprintf("%s/item?id=%d", srv.URL, dead[0])), chromedp.WaitVisible(chromedp.CSS(`a.button`)))
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(
		`fetch("/replay", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "id=%d"}).then(r => r.status)`, dead[0]),
		chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatal(err)
	}
	if status != 403 {
		t.Fatalf("a POST without the token got %d", status)
	}

	// The replay flow: Replay… -> confirmation -> submit -> the child's page.
	do(chromedp.Click(chromedp.CSS(`a.button`)),
		chromedp.WaitVisible(chromedp.CSS(`button.danger`)),
		chromedp.Click(chromedp.CSS(`button.danger`)),
		chromedp.WaitVisible(chromedp.CSS(`dd.state`)))
	if childPage := text(`main`); !strings.Contains(childPage, "pending") || !strings.Contains(childPage, fmt.Sprint(dead[0])) {
		t.Fatalf("after the replay:\n%s", childPage)
	}
	r, err := inspect.New(db)
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Item(context.Background(), dead[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(it.History) != 2 {
		t.Fatalf("history %d after one replay in the browser, want the item and one child", len(it.History))
	}
}
