package main_test

import (
	"testing"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
)

// `scope set-generation` only moves forward: a late lower generation is one
// line on stderr and exit 4 (refused) and changes nothing; the active
// generation again is success; --rollback needs --yes and moves it back.
func TestSetGenerationOnlyForward(t *testing.T) {
	t.Parallel()
	const sc = "tenant-g/fence"
	_, _, dsn := queuetest.New(t, workqueue.Config{}, sc)
	generation := func() int64 {
		t.Helper()
		return decode[stats.Scope](t, laneq(t, dsn, "stats", "--scope", sc, "--json").want(t, 0)).Generation
	}
	set := func(args ...string) result {
		t.Helper()
		return laneq(t, dsn, append([]string{"scope", "set-generation", "--scope", sc}, args...)...)
	}

	set("--generation", "7", "--yes").want(t, 0)
	set("--generation", "6", "--yes").oneLine(t, 4, "scope tenant-g/fence is at generation 7: refusing to move it back to 6")
	if g := generation(); g != 7 {
		t.Fatalf("generation %d after the refused 6, want 7", g)
	}
	if out := set("--generation", "7", "--yes").want(t, 0).stdout; out != "scope tenant-g/fence: active generation 7\n" {
		t.Fatalf("set 7 again: %q", out)
	}

	set("--generation", "6", "--rollback").oneLine(t, 4, "pass --yes")
	if g := generation(); g != 7 {
		t.Fatalf("generation %d after a rollback without --yes, want 7", g)
	}
	set("--generation", "6", "--rollback", "--yes").want(t, 0)
	if g := generation(); g != 6 {
		t.Fatalf("generation %d after --rollback --yes, want 6", g)
	}

	laneq(t, dsn, "scope", "set-generation", "--scope", "no-such-scope", "--generation", "6", "--yes").oneLine(t, 3, "unknown scope")
	laneq(t, dsn, "scope", "set-generation", "--scope", "no-such-scope", "--generation", "6", "--rollback", "--yes").oneLine(t, 3, "unknown scope")
}
