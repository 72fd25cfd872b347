package dashboard_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-a/pack <1>" // a scope that needs escaping in HTML and URLs

// seed makes live work and dead letters; it returns the dead items' ids.
func seed(t *testing.T) (*sql.DB, []int64) {
	t.Helper()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	var events []workqueue.Event
	for i := range 6 {
		key := fmt.Sprintf("fact-%d", i)
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "crm", RouteVersion: 1, EventKind: "changed",
			SourceKind: "object", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}})
	}
	if _, err := qu.Enqueue(ctx, scope, events); err != nil {
		t.Fatal(err)
	}
	cl, err := qu.NewClaimer(scope, "ui-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := cl.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 2})
	if err != nil || len(got) != 2 {
		t.Fatalf("claimed %d: %v", len(got), err)
	}
	var dead []int64
	for _, c := range got {
		if _, err := qu.Fail(ctx, c, workqueue.Failure{Class: "rejected", Summary: "<script>alert(1)</script>"}, workqueue.ErrPermanent); err != nil {
			t.Fatal(err)
		}
		dead = append(dead, c.WorkID)
	}
	return db, dead
}

type client struct {
	t    *testing.T
	base string
	http *http.Client
}

func newClient(t *testing.T, db *sql.DB, cfg dashboard.Config) *client {
	t.Helper()
	d, err := dashboard.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(func() { srv.Close(); d.Close() })
	jar, _ := cookiejar.New(nil)
	return &client{t: t, base: srv.URL, http: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

func (c *client) do(req *http.Request) (int, string, http.Header) {
	c.t.Helper()
	res, err := c.http.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	return res.StatusCode, string(b), res.Header
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+path, nil)
	code, body, _ := c.do(req)
	return code, body
}

func (c *client) post(path string, form url.Values, header map[string]string) (int, string, http.Header) {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return c.do(req)
}

func wantPage(t *testing.T, code int, body string, wantCode int, contains ...string) {
	t.Helper()
	if code != wantCode {
		t.Fatalf("status %d, want %d:\n%s", code, wantCode, body)
	}
	for _, s := range contains {
		if !strings.Contains(body, s) {
			t.Fatalf("page without %q:\n%s", s, body)
		}
	}
}

func historyLen(t *testing.T, db *sql.DB, id int64) int {
	t.Helper()
	r, err := inspect.New(db)
	if err != nil {
		t.Fatal(err)
	}
	it, err := r.Item(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return len(it.History)
}

// A read-only dashboard renders every page with escaped data and refuses
// replays.
func TestReadOnlyPages(t *testing.T) {
	t.Parallel()
	db, dead := seed(t)
	c := newClient(t, db, dashboard.Config{})
	q := url.QueryEscape(scope)
	code, body := c.get("/")
	wantPage(t, code, body, 200, "tenant-a/pack &lt;1&gt;", `href="/scope?s=tenant-a%2fpack%20%3c1%3e"`, "read-only")
	// The capped page loads itself again every 10s, without script; the
	// exact one (it reads the backlog) and live=0 do not.
	refresh := `<meta http-equiv="refresh" content="10">`
	code, body = c.get("/scope?s=" + q)
	wantPage(t, code, body, 200, "<th>default</th>", "Oldest due", "exact=1", refresh, "updates every 10s", "live=0")
	code, body = c.get("/scope?s=" + q + "&exact=1")
	wantPage(t, code, body, 200, "exact counts")
	if strings.Contains(body, "http-equiv") {
		t.Fatal("the exact page refreshes itself")
	}
	code, body = c.get("/scope?s=" + q + "&live=0")
	wantPage(t, code, body, 200, "<th>default</th>", "update every 10s")
	if strings.Contains(body, "http-equiv") {
		t.Fatal("live=0 still refreshes")
	}
	code, body = c.get("/dlq?s=" + q + "&failure_class=rejected")
	wantPage(t, code, body, 200, fmt.Sprint(dead[0]), fmt.Sprint(dead[1]), "&lt;script&gt;")
	if strings.Contains(body, "<script>") {
		t.Fatal("a failure summary was not escaped")
	}
	code, body = c.get("/dlq?s=" + q + "&failure_class=other")
	wantPage(t, code, body, 200, "No dead letters on this page")
	code, body = c.get(fmt.Sprintf("/item?id=%d", dead[0]))
	wantPage(t, code, body, 200, "rejected", "History", "Why", "a replay runs it again")
	if strings.Contains(body, "/replay?id=") {
		t.Fatal("a read-only dashboard offers a replay")
	}
	code, body = c.get(fmt.Sprintf("/replay?id=%d", dead[0]))
	wantPage(t, code, body, 403, "read-only")
	code, body, _ = c.post("/replay", url.Values{"id": {fmt.Sprint(dead[0])}, "csrf": {"x"}}, nil)
	wantPage(t, code, body, 403, "read-only")
	for path, status := range map[string]int{
		"/item?id=abc": 400, "/item?id=999999": 404, "/scope?s=nope": 404, "/dlq?s=" + q + "&since=yesterday": 400, "/nope": 404,
	} {
		if code, body := c.get(path); code != status {
			t.Fatalf("%s: status %d, want %d:\n%s", path, code, status, body)
		}
	}
	if n := historyLen(t, db, dead[0]); n != 1 {
		t.Fatalf("a read-only dashboard replayed: history %d", n)
	}
}

// With --allow-writes, a replay goes through the confirmation page and its
// token: without the token, with another session's cookie, or from another
// origin it is refused; the confirmed one creates exactly one child, and
// submitting it again creates none.
func TestReplayNeedsConfirmationAndToken(t *testing.T) {
	t.Parallel()
	db, dead := seed(t)
	c := newClient(t, db, dashboard.Config{AllowWrites: true})
	id := fmt.Sprint(dead[0])
	code, body := c.get("/item?id=" + id)
	wantPage(t, code, body, 200, "/replay?id="+id, "writes enabled")
	code, body = c.get("/replay?id=" + id)
	wantPage(t, code, body, 200, `name="csrf"`, "Replay work item "+id)
	token := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	if token == nil {
		t.Fatalf("no token in the confirmation page:\n%s", body)
	}

	code, body, _ = c.post("/replay", url.Values{"id": {id}}, nil)
	wantPage(t, code, body, 403, "CSRF")
	code, body, _ = c.post("/replay", url.Values{"id": {fmt.Sprint(dead[1])}, "csrf": {token[1]}}, nil)
	wantPage(t, code, body, 403, "CSRF") // a token is for one item
	stranger := newClient(t, db, dashboard.Config{AllowWrites: true})
	stranger.base = c.base
	code, body, _ = stranger.post("/replay", url.Values{"id": {id}, "csrf": {token[1]}}, nil)
	wantPage(t, code, body, 403, "CSRF") // and for one session
	code, _, _ = c.post("/replay", url.Values{"id": {id}, "csrf": {token[1]}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if code != 403 {
		t.Fatalf("a cross-site POST got %d", code)
	}
	if n := historyLen(t, db, dead[0]); n != 1 {
		t.Fatalf("a refused request replayed: history %d", n)
	}

	code, body, hdr := c.post("/replay", url.Values{"id": {id}, "csrf": {token[1]}}, nil)
	if code != http.StatusSeeOther || !strings.HasPrefix(hdr.Get("Location"), "/item?id=") {
		t.Fatalf("confirmed replay: %d %s\n%s", code, hdr.Get("Location"), body)
	}
	code, body = c.get(hdr.Get("Location"))
	wantPage(t, code, body, 200, "pending")
	code, body, _ = c.post("/replay", url.Values{"id": {id}, "csrf": {token[1]}}, nil)
	wantPage(t, code, body, 409, "replayed")
	if n := historyLen(t, db, dead[0]); n != 2 {
		t.Fatalf("history %d after one confirmed replay and a repeat, want 2 (one child)", n)
	}
}
