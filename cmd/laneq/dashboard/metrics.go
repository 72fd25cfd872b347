package dashboard

import (
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/laneq/laneq/runtime/stats"
)

// MetricsMaxScopes is how many scopes one scrape of /metrics reports when
// the request names none: the first ones in key order. Each scope costs
// one capped statistics statement per queue class (stats.Cheap), so a
// scrape's cost is bounded by this, not by how many tenants the database
// holds; name the scopes (?s=a&s=b) to watch others.
const MetricsMaxScopes = 100

// metrics serves the statistics of scopes in Prometheus's text format
// (version 0.0.4): per scope and class, the items in each bucket stats
// reports, whether a count stopped at its cap, and the oldest due and
// oldest expired lease ages. The counts are stats.Cheap's (each bucket
// counted to stats.CapCount+1), so a scrape costs the same at any backlog.
// A scope whose read failed reports laneq_scope_up 0 and no counts.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	scopes := r.URL.Query()["s"]
	truncated := false
	if len(scopes) == 0 {
		list, err := s.in.Scopes(ctx, "", MetricsMaxScopes+1)
		if err != nil {
			http.Error(w, "laneq: list scopes: "+err.Error(), http.StatusInternalServerError)
			return
		}
		truncated = len(list) > MetricsMaxScopes
		for _, sc := range list[:min(len(list), MetricsMaxScopes)] {
			scopes = append(scopes, sc.Scope)
		}
	}
	if len(scopes) > MetricsMaxScopes {
		http.Error(w, fmt.Sprintf("laneq: at most %d scopes per scrape, got %d", MetricsMaxScopes, len(scopes)), http.StatusBadRequest)
		return
	}
	var read []stats.Scope
	up, abandoned := map[string]bool{}, map[string]int64{}
	for _, sc := range scopes {
		st, err := s.st.Cheap(ctx, sc, stats.Filter{})
		if err == nil {
			abandoned[sc], err = s.in.AbandonedHandlers(ctx, sc)
		}
		if err != nil {
			s.cfg.Logger.Warn("dashboard: metrics", "scope", sc, "err", err)
			continue
		}
		up[sc] = true
		read = append(read, st)
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	writeMetrics(w, scopes, up, read, abandoned, truncated)
}

// writeMetrics writes the exposition: each family's HELP and TYPE once,
// then its samples.
//
// abandoned is, by scope, the handlers its live processes said they still
// run past their cancelled context (inspect.Reader.AbandonedHandlers).
func writeMetrics(w io.Writer, scopes []string, up map[string]bool, read []stats.Scope, abandoned map[string]int64, truncated bool) {
	family := func(name, help string) { fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name) }
	family("laneq_scope_up", "1 when the scope's statistics were read in this scrape, 0 when the read failed.")
	for _, sc := range scopes {
		fmt.Fprintf(w, "laneq_scope_up{scope=%s} %d\n", label(sc), map[bool]int{true: 1}[up[sc]])
	}
	family("laneq_scopes_truncated", fmt.Sprintf("1 when the scrape named no scope and the database holds more than %d: only the first are reported.", MetricsMaxScopes))
	fmt.Fprintf(w, "laneq_scopes_truncated %d\n", map[bool]int{true: 1}[truncated])
	family("laneq_scope_generation", "The scope's active generation.")
	for _, st := range read {
		fmt.Fprintf(w, "laneq_scope_generation{scope=%s} %d\n", label(st.Scope), st.Generation)
	}
	family("laneq_abandoned_handlers", "Handlers that ignored their cancelled context and still run, as the scope's live processes last said (at their maintenance): each holds its item and the item's lanes until it returns.")
	for _, st := range read {
		fmt.Fprintf(w, "laneq_abandoned_handlers{scope=%s} %d\n", label(st.Scope), abandoned[st.Scope])
	}
	family("laneq_items", fmt.Sprintf("Items of a scope's active generation by queue class and bucket, each counted to %d (see laneq_items_capped).", stats.CapCount+1))
	for _, st := range read {
		for _, c := range st.Classes {
			for _, b := range []struct {
				bucket string
				n      int64
			}{
				{"due", c.Due}, {"not_due", c.NotDue}, {"leased", c.Leased}, {"expired_leases", c.ExpiredLeases},
				{"lane_blocked", c.LaneBlocked}, {"waiting_dependency", c.WaitingDependency},
				{"inactive_successors", c.InactiveSuccessors}, {"dead", c.Dead},
			} {
				fmt.Fprintf(w, "laneq_items{scope=%s,class=%s,bucket=%q} %d\n", label(st.Scope), label(c.Class), b.bucket, b.n)
			}
		}
	}
	family("laneq_items_capped", fmt.Sprintf("1 when some bucket of the class stopped counting at %d.", stats.CapCount+1))
	for _, st := range read {
		for _, c := range st.Classes {
			fmt.Fprintf(w, "laneq_items_capped{scope=%s,class=%s} %d\n", label(st.Scope), label(c.Class), map[bool]int{true: 1}[c.Capped])
		}
	}
	family("laneq_oldest_due_seconds", "How long the longest-due claimable item of the class has been due (0: none due).")
	for _, st := range read {
		for _, c := range st.Classes {
			fmt.Fprintf(w, "laneq_oldest_due_seconds{scope=%s,class=%s} %g\n", label(st.Scope), label(c.Class), c.OldestDue.Seconds())
		}
	}
	family("laneq_oldest_expired_lease_seconds", "How long ago the class's oldest expired lease ended (0: none).")
	for _, st := range read {
		for _, c := range st.Classes {
			fmt.Fprintf(w, "laneq_oldest_expired_lease_seconds{scope=%s,class=%s} %g\n", label(st.Scope), label(c.Class), c.OldestExpiredLease.Seconds())
		}
	}
}

// label is a label value in the text format: quoted, with backslash,
// double quote and line feed escaped.
func label(v string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v) + `"`
}
