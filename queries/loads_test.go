package queries_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/laneq/laneq/queries"
)

// Every statement of queries/load names one reader, one table and its
// columns; the runtime swaps the reader name per run, so it must occur
// exactly once, and sqlc must never see the files (they are outside its
// queries/*.sql glob).
func TestLoadsParse(t *testing.T) {
	t.Parallel()
	loads, err := queries.Loads()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range loads {
		names = append(names, l.Name)
		if strings.Count(l.SQL, "'Reader::"+l.Reader+"'") != 1 {
			t.Errorf("%s: reader %q named %d times", l.Name, l.Reader, strings.Count(l.SQL, l.Reader))
		}
		if len(l.Columns) < 2 || strings.Contains(l.SQL, "--") || strings.HasSuffix(l.SQL, ";") {
			t.Errorf("%s: parsed as %+v", l.Name, l)
		}
	}
	if want := []string{"events", "work_items"}; !slices.Equal(names, want) {
		t.Fatalf("loads %q, want %q", names, want)
	}
	l, err := queries.LoadNamed("events")
	if err != nil || l.Table != "event" || l.Reader != "laneq_events" || l.Columns[0] != "receipt_id" {
		t.Fatalf("LoadNamed(events) = %+v, %v", l, err)
	}
	if _, err := queries.LoadNamed("absent"); err == nil {
		t.Fatal("LoadNamed(absent) found a statement")
	}
}
