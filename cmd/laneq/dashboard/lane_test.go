package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestLanePageServed: an item's page links its lane; the lane page shows
// the lane's head and what is blocked behind it, pages through a long
// lane, and refuses a page that names no lane or an unknown scope.
func TestLanePageServed(t *testing.T) {
	t.Parallel()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	var evs []workqueue.Event
	for i := range 60 {
		key := fmt.Sprintf("lane-%d", i)
		evs = append(evs, workqueue.Event{IdempotencyKey: key, RouteID: "crm", RouteVersion: 1, EventKind: "changed",
			SourceKind: "object", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "acct <7>"}}})
	}
	got, err := qu.Enqueue(context.Background(), scope, evs)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, db, dashboard.Config{})
	lane := "/lane?s=" + url.QueryEscape(scope) + "&source=" + url.QueryEscape("acct <7>")
	code, body := c.get(fmt.Sprintf("/item?id=%d", got[1].Work[0].WorkID))
	wantPage(t, code, body, 200, `href="/lane?s=tenant-a%2fpack%20%3c1%3e&amp;source=acct%20%3c7%3e"`,
		fmt.Sprintf("blocked in source lane acct &lt;7&gt; behind item %d", got[0].Work[0].WorkID))
	code, body = c.get(lane)
	wantPage(t, code, body, 200, "Source lane acct &lt;7&gt;", "59 blocked", "Head", fmt.Sprintf(`href="/item?id=%d"`, got[0].Work[0].WorkID),
		fmt.Sprintf(`href="/item?id=%d"`, got[50].Work[0].WorkID), "Next →")
	if strings.Contains(body, fmt.Sprintf(`href="/item?id=%d"`, got[51].Work[0].WorkID)) {
		t.Fatal("the first page holds more than 50 blocked items")
	}
	next := regexp.MustCompile(`href="/lane\?([^"]+)">Next`).FindStringSubmatch(body)
	if next == nil {
		t.Fatal("no next link")
	}
	code, body = c.get("/lane?" + html.UnescapeString(next[1])) // as a browser follows it
	wantPage(t, code, body, 200, fmt.Sprintf(`href="/item?id=%d"`, got[59].Work[0].WorkID))
	if strings.Contains(body, fmt.Sprintf(`href="/item?id=%d"`, got[50].Work[0].WorkID)) || strings.Contains(body, "Next →") {
		t.Fatal("the second page repeats the first's items or links further")
	}
	code, body = c.get("/lane?s=" + url.QueryEscape(scope))
	wantPage(t, code, body, 400, "exactly one")
	code, body = c.get("/lane?s=nope&source=a")
	wantPage(t, code, body, 404)
}
