package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/workqueue"
)

// confirmToken opens an action's confirmation page and returns its token.
func (c *client) confirmToken(path string) string {
	c.t.Helper()
	code, body := c.get(path)
	wantPage(c.t, code, body, 200, `name="csrf"`)
	m := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if m == nil {
		c.t.Fatalf("no token on %s:\n%s", path, body)
	}
	return m[1]
}

// Every action refuses, with a 409 page saying why, what the item's state
// no longer allows; a token is bound to its action and subject; a
// read-only dashboard offers and does none of them; a bulk replay's page
// reloads itself while it runs and says what it did.
func TestActionsRefuseWhatTheStateNoLongerAllows(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	res, err := qu.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: "e1", RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: "1",
		Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "later", Delay: time.Hour}, {WorkType: "now"}}}})
	if err != nil {
		t.Fatal(err)
	}
	later, due := fmt.Sprint(res[0].Work[0].WorkID), fmt.Sprint(res[0].Work[1].WorkID)
	dead := queuetest.Dead(t, qu, scope, "sync", "rejected", 3)

	ro := newClient(t, db, dashboard.Config{})
	code, body := ro.get("/item?id=" + later)
	wantPage(t, code, body, 200, "read-only")
	if strings.Contains(body, "/retry-now?") || strings.Contains(body, "/skip?") {
		t.Fatal("a read-only dashboard offers actions")
	}
	for _, path := range []string{"/retry-now?id=" + later, "/skip?id=" + later, "/cancel?id=" + later, "/pause?s=x&class=bulk", "/dlq/replay?s=x"} {
		code, body := ro.get(path)
		wantPage(t, code, body, 403, "--allow-writes")
	}

	c := newClient(t, db, dashboard.Config{AllowWrites: true})
	code, body = c.get("/item?id=" + later)
	wantPage(t, code, body, 200, "/retry-now?id="+later, "/skip?id="+later)
	retry := c.confirmToken("/retry-now?id=" + later)
	skip := c.confirmToken("/skip?id=" + later)
	// A token is for one action on one subject.
	code, body, _ = c.post("/skip", url.Values{"id": {later}, "csrf": {retry}}, nil)
	wantPage(t, code, body, 403, "CSRF")
	code, body, _ = c.post("/retry-now", url.Values{"id": {due}, "csrf": {retry}}, nil)
	wantPage(t, code, body, 403, "CSRF")

	code, _, hdr := c.post("/retry-now", url.Values{"id": {later}, "csrf": {retry}}, nil)
	if code != http.StatusSeeOther || hdr.Get("Location") != "/item?id="+later {
		t.Fatalf("retry-now: %d %s", code, hdr.Get("Location"))
	}
	code, body, _ = c.post("/retry-now", url.Values{"id": {later}, "csrf": {retry}}, nil)
	wantPage(t, code, body, 409, "pending and already due")
	code, _, _ = c.post("/skip", url.Values{"id": {later}, "csrf": {skip}, "reason": {"<b>dup</b>"}}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("skip: %d", code)
	}
	code, body = c.get("/item?id=" + later)
	wantPage(t, code, body, 200, "skipped", "&lt;b&gt;dup&lt;/b&gt;")
	code, body, _ = c.post("/skip", url.Values{"id": {later}, "csrf": {skip}}, nil)
	wantPage(t, code, body, 409, "is skipped")

	// Pause: bad class, then pause and resume; every page of the scope says so.
	code, body = c.get("/pause?s=" + url.QueryEscape(scope) + "&class=bad+class")
	wantPage(t, code, body, 400, "queue class")
	pause := c.confirmToken("/pause?s=" + url.QueryEscape(scope) + "&class=bulk")
	code, _, _ = c.post("/pause", url.Values{"s": {scope}, "class": {"bulk"}, "csrf": {pause}}, nil)
	if code != http.StatusSeeOther {
		t.Fatalf("pause: %d", code)
	}
	for _, path := range []string{"/scope?s=" + url.QueryEscape(scope), "/dlq?s=" + url.QueryEscape(scope), "/item?id=" + due} {
		code, body := c.get(path)
		wantPage(t, code, body, 200, "Paused in this scope: class bulk")
	}
	resume := c.confirmToken("/resume?s=" + url.QueryEscape(scope) + "&class=bulk")
	if code, _, _ := c.post("/resume", url.Values{"s": {scope}, "class": {"bulk"}, "csrf": {resume}}, nil); code != http.StatusSeeOther {
		t.Fatalf("resume: %d", code)
	}
	if code, body := c.get("/scope?s=" + url.QueryEscape(scope)); code != 200 || strings.Contains(body, "Paused in this scope") {
		t.Fatalf("after resume: %d\n%s", code, body)
	}

	// Cancel: the due item ends cancelled, with the reason; again, refused.
	code, body = c.get("/item?id=" + due)
	wantPage(t, code, body, 200, "/cancel?id="+due)
	cancelTok := c.confirmToken("/cancel?id=" + due)
	if code, _, _ := c.post("/cancel", url.Values{"id": {due}, "csrf": {cancelTok}, "reason": {"not needed"}}, nil); code != http.StatusSeeOther {
		t.Fatalf("cancel: %d", code)
	}
	code, body = c.get("/item?id=" + due)
	wantPage(t, code, body, 200, "skipped", "cancelled by an operator: not needed")
	code, body, _ = c.post("/cancel", url.Values{"id": {due}, "csrf": {cancelTok}}, nil)
	wantPage(t, code, body, 409, "is skipped")

	// A bulk replay: its page reloads itself until done.
	bulk := c.confirmToken("/dlq/replay?s=" + url.QueryEscape(scope) + "&work_type=sync")
	code, _, hdr = c.post("/dlq/replay", url.Values{"s": {scope}, "work_type": {"sync"}, "csrf": {bulk}}, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/job?id=") {
		t.Fatalf("bulk replay: %d %s", code, hdr.Get("Location"))
	}
	waitfor.Until(t, time.Minute, func() (bool, error) {
		code, body = c.get(hdr.Get("Location"))
		if code == 200 && strings.Contains(body, "running") && !strings.Contains(body, `http-equiv="refresh"`) {
			t.Fatalf("a running job's page does not reload itself:\n%s", body)
		}
		return code == 200 && strings.Contains(body, ">done<"), nil
	}, func() string { return body })
	if strings.Contains(body, `http-equiv="refresh"`) || !strings.Contains(body, `<td class="n replayed">3</td>`) {
		t.Fatalf("a finished job's page:\n%s", body)
	}
	for _, id := range dead {
		if n := historyLen(t, db, id); n != 2 {
			t.Fatalf("history of %d: %d, want 2", id, n)
		}
	}
	code, body = c.get("/job?id=nope")
	wantPage(t, code, body, 404, "no bulk action")

	// A bulk skip of the replayed children (pending, work type sync), from
	// the scope page's form: a reason is recorded on each.
	code, body = c.get("/scope?s=" + url.QueryEscape(scope) + "&live=0")
	wantPage(t, code, body, 200, `action="/skip-matching"`)
	code, body = c.get("/skip-matching?s=" + url.QueryEscape(scope))
	wantPage(t, code, body, 400, "needs a queue class, a work type or a failure class")
	skipAll := c.confirmToken("/skip-matching?s=" + url.QueryEscape(scope) + "&work_type=sync")
	code, body, _ = c.post("/skip-matching", url.Values{"s": {scope}, "work_type": {"mail"}, "csrf": {skipAll}}, nil)
	wantPage(t, code, body, 403, "CSRF") // the token is for work type sync
	code, _, hdr = c.post("/skip-matching", url.Values{"s": {scope}, "work_type": {"sync"}, "csrf": {skipAll}, "reason": {"bad deploy"}}, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/job?id=") {
		t.Fatalf("bulk skip: %d %s", code, hdr.Get("Location"))
	}
	waitfor.Until(t, time.Minute, func() (bool, error) {
		code, body = c.get(hdr.Get("Location"))
		return code == 200 && strings.Contains(body, ">done<"), nil
	}, func() string { return body })
	if !strings.Contains(body, "Skipped") || !strings.Contains(body, `<td class="n replayed">3</td>`) {
		t.Fatalf("the bulk skip's page:\n%s", body)
	}
	var skipped int
	if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE scope_id = ? AND state = 'skipped' AND failure_summary = 'skipped by an operator: bad deploy'", scope).Scan(&skipped); err != nil || skipped != 3 {
		t.Fatalf("%d items skipped with the reason (%v), want the 3 replayed children", skipped, err)
	}
}
