package tidbenv

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"
	"github.com/ory/dockertest/v3"

	"github.com/laneq/laneq/runtime/workqueue"
)

// startEmbeddedForTest starts the real embedded server or fails the test: the
// binary is built by `make tidb`, which `make test` runs first.
func startEmbeddedForTest(t *testing.T) *Server {
	t.Helper()
	srv, err := Start(context.Background(), Options{Mode: ModeEmbedded, ServerBinary: os.Getenv(EnvServerBinary)})
	if err != nil {
		t.Fatalf("start embedded TiDB: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

func queryOne(t *testing.T, srv *Server) {
	t.Helper()
	db, err := srv.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n int
	if err := db.QueryRow("SELECT 1 + 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("SELECT 1 + 1 = %d, %v", n, err)
	}
}

func TestEmbeddedBranchStartsServesAndStops(t *testing.T) {
	srv := startEmbeddedForTest(t)
	if srv.Kind != KindEmbedded {
		t.Fatalf("kind = %q, want %q", srv.Kind, KindEmbedded)
	}
	if !strings.Contains(srv.Version, "TiDB-v8.5.6") {
		t.Fatalf("version = %q, want a TiDB v8.5.6 server", srv.Version)
	}
	queryOne(t, srv)

	// The session settings laneq relies on are in force on every connection.
	db, err := srv.Open("")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var tz string
	if err := db.QueryRow("SELECT @@session.time_zone").Scan(&tz); err != nil || tz != "+00:00" {
		t.Fatalf("session time_zone = %q, %v; want +00:00", tz, err)
	}

	addr := srv.Addr()
	if err := srv.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Close", addr)
	}
}

func TestDSNBranchUsesTheGivenServerAndComesFirst(t *testing.T) {
	embedded := startEmbeddedForTest(t)
	dsn := embedded.DSN("ignored_database")

	for _, mode := range []Mode{ModeDSN, ModeAuto} {
		srv, err := Start(context.Background(), Options{Mode: mode, DSN: dsn, Image: "laneq-test/absent:none"})
		if err != nil {
			t.Fatalf("mode %s: %v", mode, err)
		}
		if srv.Kind != KindDSN || srv.Addr() != embedded.Addr() || srv.Version != embedded.Version {
			t.Fatalf("mode %s: got kind %q at %s (%s), want the DSN server at %s", mode, srv.Kind, srv.Addr(), srv.Version, embedded.Addr())
		}
		queryOne(t, srv)
		if err := srv.Close(); err != nil { // a DSN server is not ours to stop
			t.Fatal(err)
		}
		queryOne(t, embedded)
	}
}

func TestDSNBranchErrors(t *testing.T) {
	if _, err := Start(context.Background(), Options{Mode: ModeDSN}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("forced dsn without a DSN: err = %v, want ErrUnavailable", err)
	}
	if _, err := Start(context.Background(), Options{Mode: ModeDSN, DSN: "not a dsn"}); err == nil || !strings.Contains(err.Error(), "parse LANEQ_TIDB_DSN") {
		t.Fatalf("bad DSN: err = %v", err)
	}
	// Nothing listens on a port we just released: a bounded error, not a hang.
	port := mustFreePort(t)
	began := time.Now()
	_, err := Start(context.Background(), Options{Mode: ModeDSN, DSN: "root@tcp(127.0.0.1:" + strconv.Itoa(port) + ")/", StartTimeout: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "not answering SQL") {
		t.Fatalf("unreachable DSN: err = %v", err)
	}
	if waited := time.Since(began); waited > 20*time.Second {
		t.Fatalf("unreachable DSN took %s to fail", waited)
	}
}

func TestMissingBinaryIsAClearError(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-tidb-server")
	_, err := Start(context.Background(), Options{Mode: ModeEmbedded, ServerBinary: missing})
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("err = %v, want it to name %s", err, missing)
	}

	// Auto mode with every branch unavailable lists each reason.
	t.Setenv("PATH", t.TempDir())
	t.Chdir(t.TempDir()) // outside the checkout: no bin/tidb-server to find
	_, err = Start(context.Background(), Options{Image: "laneq-test/absent:none"})
	if err == nil {
		t.Fatal("auto mode with nothing available succeeded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "LANEQ_TIDB_DSN is not set") ||
		!(strings.Contains(msg, "image laneq-test/absent:none is not present") || strings.Contains(msg, "no Docker daemon answers")) ||
		!strings.Contains(msg, "run `make tidb`") {
		t.Errorf("auto-mode error does not give one reason per branch:\n%v", msg)
	}
}

func TestTakenPortIsAClearError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	taken := l.Addr().(*net.TCPAddr).Port
	bin, err := FindServerBinary(os.Getenv(EnvServerBinary))
	if err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]Options{
		"sql port":    {Mode: ModeEmbedded, ServerBinary: bin, Port: taken},
		"status port": {Mode: ModeEmbedded, ServerBinary: bin, StatusPort: taken},
	} {
		began := time.Now()
		_, err := Start(context.Background(), opts)
		if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), strconv.Itoa(taken)) {
			t.Errorf("%s: err = %v, want ErrPortInUse naming port %d", name, err, taken)
		}
		if waited := time.Since(began); waited > 10*time.Second {
			t.Errorf("%s: took %s to fail", name, waited)
		}
	}
}

func fakeServer(t *testing.T, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tidb-server")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestServerThatDiesOrHangsFailsWithinTheTimeout(t *testing.T) {
	t.Run("exits during start-up", func(t *testing.T) {
		bin := fakeServer(t, `echo "[FATAL] [main.go:1] [\"cannot start\"] [error=\"listen tcp: bind: address already in use\"]" >&2; exit 1`)
		_, err := Start(context.Background(), Options{Mode: ModeEmbedded, ServerBinary: bin, StartTimeout: time.Minute})
		if !errors.Is(err, ErrPortInUse) || !strings.Contains(err.Error(), "exited") {
			t.Fatalf("err = %v, want a port-in-use exit carrying the server's log line", err)
		}
	})
	t.Run("never ready", func(t *testing.T) {
		bin := fakeServer(t, `exec sleep 600`)
		began := time.Now()
		_, err := Start(context.Background(), Options{Mode: ModeEmbedded, ServerBinary: bin, StartTimeout: 2 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "not ready after") {
			t.Fatalf("err = %v, want a start-up timeout", err)
		}
		if waited := time.Since(began); waited > 30*time.Second {
			t.Fatalf("took %s to give up", waited)
		}
	})
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(EnvMode, "")
	t.Setenv(EnvDSN, " root@tcp(127.0.0.1:4000)/ ")
	t.Setenv(EnvStartTimeout, "90s")
	opts, err := OptionsFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if opts.Mode != ModeAuto || opts.DSN != "root@tcp(127.0.0.1:4000)/" || opts.StartTimeout != 90*time.Second {
		t.Fatalf("opts = %+v", opts)
	}
	t.Setenv(EnvMode, "kubernetes")
	if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), "LANEQ_TIDB") {
		t.Fatalf("bad mode: err = %v", err)
	}
	t.Setenv(EnvMode, "docker")
	t.Setenv(EnvStartTimeout, "soon")
	if _, err := OptionsFromEnv(); err == nil || !strings.Contains(err.Error(), EnvStartTimeout) {
		t.Fatalf("bad timeout: err = %v", err)
	}
}

// TestDockerBranch runs wherever a Docker daemon answers; `make test` builds
// the pingcap/tidb:v8.5.6 image locally first when no registry is reachable.
func TestDockerBranch(t *testing.T) {
	pool, err := dockertest.NewPool("")
	if err == nil {
		err = pool.Client.Ping()
	}
	if err != nil {
		t.Skipf("no Docker daemon answers (%v): the Docker branch cannot run on this machine", err)
	}
	srv, err := Start(context.Background(), Options{Mode: ModeDocker})
	if err != nil {
		t.Fatalf("forced docker branch: %v", err)
	}
	defer srv.Close()
	if srv.Kind != KindDocker || !strings.Contains(srv.Version, "TiDB") {
		t.Fatalf("got %q %q", srv.Kind, srv.Version)
	}
	queryOne(t, srv)

	// A forced branch fails loudly instead of falling back.
	_, err = Start(context.Background(), Options{Mode: ModeDocker, Image: "laneq-test/absent:none", StartTimeout: 30 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "laneq-test/absent:none") {
		t.Fatalf("forced docker with a missing image: err = %v", err)
	}
}

func mustFreePort(t *testing.T) int {
	t.Helper()
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSessionSettingsMatchWorkqueue: the tests' connections carry the
// session variables workqueue.SessionDSN gives production pools (this
// package cannot call it: workqueue's own tests import this package).
func TestSessionSettingsMatchWorkqueue(t *testing.T) {
	ours := loopbackConfig("4000")
	dsn, err := workqueue.SessionDSN("root@tcp(127.0.0.1:4000)/")
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(theirs.Params, ours.Params); diff != "" {
		t.Errorf("session variables differ from workqueue.SessionDSN's (-workqueue +tidbenv):\n%s", diff)
	}
	if ours.ParseTime != theirs.ParseTime || ours.ClientFoundRows != theirs.ClientFoundRows || ours.Loc != theirs.Loc {
		t.Errorf("parseTime/clientFoundRows/loc: tidbenv %v/%v/%v, workqueue %v/%v/%v",
			ours.ParseTime, ours.ClientFoundRows, ours.Loc, theirs.ParseTime, theirs.ClientFoundRows, theirs.Loc)
	}
}
