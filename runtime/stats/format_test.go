package stats_test

import (
	"testing"

	"github.com/laneq/laneq/runtime/stats"
)

// A capped count says "more than"; an exact one above the cap is shown
// as it is; Cheap's uncounted Retrying is a dash.
func TestFormatCount(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n     int64
		exact bool
		want  string
	}{
		{stats.CapCount + 1, false, ">1000"},
		{stats.CapCount + 1, true, "1001"},
		{123456, true, "123456"},
		{stats.CapCount, false, "1000"},
		{-1, false, "-"},
	} {
		if got := stats.FormatCount(c.n, c.exact); got != c.want {
			t.Errorf("FormatCount(%d, %t) = %q, want %q", c.n, c.exact, got, c.want)
		}
	}
}
