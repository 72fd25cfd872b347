package dashboard

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/laneq/laneq/runtime/stats"
)

// unserved is a class with claimable work that no live process serves.
type unserved struct {
	Class   string
	Due     string // a capped count, as the scope page shows it
	Expired string
}

// processes lists a scope's registered worker processes
// (inspect.Reader.Processes) and warns about each class that has due work
// or expired leases while no live process claims it (the scope's capped
// statistics, one statement per class).
func (s *Server) processes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	scope := r.URL.Query().Get("s")
	ps, err := s.in.Processes(ctx, scope)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	st, err := s.st.Cheap(ctx, scope, stats.Filter{})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	paused, _ := s.qu.PausedClasses(ctx, scope)
	var warn []unserved
	for _, c := range st.Classes {
		if (c.Due > 0 || c.ExpiredLeases > 0) && !ps.Serves(c.Class) && !slices.Contains(paused, c.Class) {
			warn = append(warn, unserved{Class: c.Class, Due: stats.FormatCount(c.Due, false), Expired: stats.FormatCount(c.ExpiredLeases, false)})
		}
	}
	live := 0
	for _, p := range ps.Processes {
		if p.Live {
			live++
		}
	}
	s.render(w, r, http.StatusOK, "processes.html", page{Title: fmt.Sprintf("Processes of %s", scope), Scope: scope, Data: map[string]any{
		"P": ps, "Live": live, "Unserved": warn, "At": st.At,
	}})
}
