package bench

import (
	"database/sql"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
)

// TestKilledDuring: which attempts a process's kill explains. The kill's
// record can precede the last statements the process had already sent, so
// an attempt with neither an end nor a verdict counts as cut short even
// when its recorded start is after the kill; one that ended or got a
// verdict after the kill does not, nor does anything of a process that
// was never killed.
func TestKilledDuring(t *testing.T) {
	kill := time.Date(2026, 12, 4, 6, 0, 0, 0, time.UTC)
	fi := indexFaults([]benchdb.BenchFault{{Kind: faultKill, Process: "p1", StartedAt: kill}})
	at := func(d time.Duration) time.Time { return kill.Add(d) }
	ended := func(d time.Duration) sql.NullTime { return sql.NullTime{Time: at(d), Valid: true} }
	verdict := sql.NullString{String: "accepted", Valid: true}
	for _, tc := range []struct {
		name string
		a    benchdb.BenchAttempt
		want bool
	}{
		{"running at the kill", benchdb.BenchAttempt{Process: "p1", StartedAt: at(-time.Second)}, true},
		{"ended before the kill, verdict lost", benchdb.BenchAttempt{Process: "p1", StartedAt: at(-time.Second), EndedAt: ended(-time.Millisecond)}, true},
		{"start landed after the kill's record, nothing after it", benchdb.BenchAttempt{Process: "p1", StartedAt: at(30 * time.Millisecond)}, true},
		{"started after the kill and ended", benchdb.BenchAttempt{Process: "p1", StartedAt: at(time.Millisecond), EndedAt: ended(time.Second)}, false},
		{"started after the kill with a verdict", benchdb.BenchAttempt{Process: "p1", StartedAt: at(time.Millisecond), Finish: verdict}, false},
		{"a process never killed", benchdb.BenchAttempt{Process: "p2", StartedAt: at(-time.Second)}, false},
	} {
		if got := fi.killedDuring(tc.a); got != tc.want {
			t.Errorf("%s: killedDuring = %v, want %v", tc.name, got, tc.want)
		}
	}
}
