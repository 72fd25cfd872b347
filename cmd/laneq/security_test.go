package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/tidbtest"
)

// laneq ui with writes enabled needs a login even on loopback: CSRF tokens
// stop browsers, not a local process that posts to the dashboard. It
// refuses to start without --login-file (exit 2, one line that names it)
// and starts with one.
func TestUIWritesNeedLogin(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	for _, flag := range []string{"--allow-writes", "--allow-replay"} {
		// Without the refusal it serves: the guard ends it.
		laneqWithin(t, 30*time.Second, dsn, "ui", "--listen", "127.0.0.1:0", flag).oneLine(t, 2, flag+" needs --login-file FILE")
	}
	login := filepath.Join(t.TempDir(), "login")
	if err := os.WriteFile(login, []byte("ops:correct horse battery\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ui := startUI(t, dsn, "--listen", "127.0.0.1:0", "--allow-writes", "--login-file", login)
	if !strings.Contains(ui.banner, "writes enabled") {
		t.Fatalf("laneq ui with a login: %q", ui.banner)
	}
	if code := ui.get(t, "/", false); code != 401 {
		t.Fatalf("GET / without the login: %d, want 401", code)
	}
	if code := ui.get(t, "/", true); code != 200 {
		t.Fatalf("GET / with the login: %d, want 200", code)
	}
}

// A command's -h shows what --dsn defaults to, never the DSN itself: the
// password in $LANEQ_TIDB_DSN stays out of help output (terminals, logs,
// screen shares).
func TestHelpHidesTheDSNPassword(t *testing.T) {
	t.Parallel()
	const password = "pw-that-must-not-show"
	dsn := "laneq:" + password + "@tcp(127.0.0.1:1)/laneq"
	for _, cmd := range []string{"migrate", "stats", "dlq list", "item show", "replay", "dlq replay", "item retry-now", "item skip",
		"item cancel", "item skip-matching", "class pause", "class resume", "receipt show", "processes", "scope set-generation", "ui", "bench"} {
		r := laneq(t, dsn, append(strings.Fields(cmd), "-h")...).want(t, 0)
		if strings.Contains(r.stdout+r.stderr, password) || !strings.Contains(r.stderr, "$LANEQ_TIDB_DSN") {
			t.Fatalf("laneq %s -h shows the DSN's password, or not where --dsn comes from:\n%s%s", cmd, r.stdout, r.stderr)
		}
	}
}
