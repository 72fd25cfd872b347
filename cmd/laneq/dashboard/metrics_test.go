package dashboard_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/laneq/laneq/cmd/laneq/dashboard"
)

// TestMetrics scrapes /metrics: the seeded scope's buckets (4 due, 2 dead)
// by class, its generation and up, in Prometheus's text format; a named
// scope that does not exist reports up 0 and no counts; naming too many
// scopes is refused.
func TestMetrics(t *testing.T) {
	t.Parallel()
	db, _ := seed(t)
	c := newClient(t, db, dashboard.Config{})
	req, _ := http.NewRequest("GET", c.base+"/metrics", nil)
	code, body, hdr := c.do(req)
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("GET /metrics: %d %q\n%s", code, hdr.Get("Content-Type"), body)
	}
	q := `"tenant-a/pack <1>"`
	for _, line := range []string{
		"laneq_scope_up{scope=" + q + "} 1",
		"laneq_scopes_truncated 0",
		"laneq_scope_generation{scope=" + q + "} 1",
		"laneq_items{scope=" + q + `,class="default",bucket="due"} 4`,
		"laneq_items{scope=" + q + `,class="default",bucket="dead"} 2`,
		"laneq_items{scope=" + q + `,class="default",bucket="leased"} 0`,
		"laneq_items_capped{scope=" + q + `,class="default"} 0`,
		"laneq_abandoned_handlers{scope=" + q + "} 0",
		"# TYPE laneq_items gauge",
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("no line %q in\n%s", line, body)
		}
	}
	if !strings.Contains(body, "laneq_oldest_due_seconds{scope="+q+`,class="default"} `) {
		t.Errorf("no oldest due age in\n%s", body)
	}
	for _, l := range strings.Split(strings.TrimSpace(body), "\n") {
		if !strings.HasPrefix(l, "# ") && len(strings.Fields(l)) < 2 {
			t.Errorf("malformed sample line %q", l)
		}
	}

	code, body = c.get("/metrics?s=" + url.QueryEscape("no/such scope"))
	if code != http.StatusOK || !strings.Contains(body, `laneq_scope_up{scope="no/such scope"} 0`) || strings.Contains(body, "laneq_items{") {
		t.Fatalf("an unknown scope: %d\n%s", code, body)
	}
	many := url.Values{}
	for i := range dashboard.MetricsMaxScopes + 1 {
		many.Add("s", fmt.Sprint("s", i))
	}
	if code, body = c.get("/metrics?" + many.Encode()); code != http.StatusBadRequest {
		t.Fatalf("%d scopes named: %d %s", dashboard.MetricsMaxScopes+1, code, body)
	}
}
