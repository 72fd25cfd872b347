// Package tidbtest gives each test a migrated database of its own on one
// TiDB shared by the whole test binary.
//
// NewDB and NewDBWithDSN hand out databases from a pool: migrated once,
// emptied when a test ends and reused by the next (see pool.go). A database
// serves one test at a time, so parallel tests never share one. Tests that
// need a database nobody used before — migrations, statistics-sensitive
// plan checks, a schema they alter — say why and use NewFreshDB or
// NewEmptyDB.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }
//
// The server is found or started (see package tidbenv) on the first test that
// asks for it and stopped when the binary ends. A test that needs TiDB fails
// when none can be started; it never skips, because a skip is not a pass.
package tidbtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/tidbenv"
	"github.com/laneq/laneq/schema"
)

var (
	startOnce sync.Once
	server    *tidbenv.Server
	startErr  error
)

// Main runs the tests and then stops the shared server, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	stop()
	return code
}

func stop() {
	if server != nil {
		dropPooled(server)
		if err := server.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "tidbtest: stop TiDB: %v\n", err)
		}
	}
}

// MainWithDB is Main for a binary whose examples need a database: before
// the tests it creates one with every migration applied and passes its DSN
// to use, and drops it afterwards. An Example has no *testing.T to fail, so
// when no TiDB can start MainWithDB reports it and fails the binary.
func MainWithDB(m *testing.M, use func(dsn string)) int {
	srv, err := start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tidbtest: these tests need TiDB: %v\n", err)
		return 1
	}
	name := "laneq_x_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := createMigrated(ctx, srv, name); err != nil {
		fmt.Fprintf(os.Stderr, "tidbtest: %v\n", err)
		stop()
		return 1
	}
	use(srv.DSN(name))
	code := m.Run()
	ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.DropDatabase(ctx, name); err != nil {
		fmt.Fprintf(os.Stderr, "tidbtest: %v\n", err)
		code = 1
	}
	stop()
	return code
}

func createMigrated(ctx context.Context, srv *tidbenv.Server, name string) error {
	if err := srv.CreateDatabase(ctx, name); err != nil {
		return err
	}
	db, err := srv.Open(name)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := schema.Up(ctx, db); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	return nil
}

// Server returns the binary's shared TiDB, starting it on first use.
func Server(t testing.TB) *tidbenv.Server {
	t.Helper()
	srv, err := start()
	if err != nil {
		t.Fatalf("tidbtest: this test needs TiDB: %v", err)
	}
	return srv
}

// ownServer makes start ask for a server of this binary's own (see
// MainOwnServer).
var ownServer bool

// MainOwnServer is Main for a binary whose tests need a TiDB no other test
// binary uses: under withtidb (`make test`) it starts its own server of the
// shared one's kind instead of taking the shared DSN. plancheck's tests
// use it: on a server shared with binaries that create, migrate and
// truncate databases all the time, hot statements stopped taking cached
// plans (schema changes invalidate them), so the plan-cache rule failed
// for a reason outside plancheck; its timing rules want a quieter server too.
func MainOwnServer(m *testing.M) int {
	ownServer = true
	return Main(m)
}

func start() (*tidbenv.Server, error) {
	startOnce.Do(func() {
		read := tidbenv.OptionsFromEnv
		if ownServer {
			read = tidbenv.OwnOptionsFromEnv
		}
		opts, err := read()
		if err != nil {
			startErr = err
			return
		}
		opts.Progress = os.Stderr
		server, startErr = tidbenv.Start(context.Background(), opts)
	})
	return server, startErr
}

// NewEmptyDB creates an empty database for this test, dropped when it ends,
// and returns a pool connected to it together with its name.
func NewEmptyDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	srv := Server(t)
	name := "laneq_t_" + randomHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := srv.CreateDatabase(ctx, name); err != nil {
		t.Fatalf("tidbtest: %v", err)
	}
	db, err := srv.Open(name)
	if err != nil {
		t.Fatalf("tidbtest: %v", err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := srv.DropDatabase(ctx, name); err != nil {
			t.Errorf("tidbtest: %v", err)
		}
	})
	return db, name
}

// NewDB returns a database with every migration applied and no rows, used
// by this test alone until it ends.
func NewDB(t testing.TB) *sql.DB {
	t.Helper()
	db, _ := NewDBWithDSN(t)
	return db
}

// NewDBWithDSN is NewDB that also returns the database's DSN, for handing to
// another process.
func NewDBWithDSN(t testing.TB) (*sql.DB, string) {
	t.Helper()
	return newPooledDB(t)
}

// NewFreshDB creates a newly migrated database for this test and drops it
// when the test ends: for tests whose result depends on the database's
// history (table statistics, AUTO_INCREMENT values), not only its rows.
func NewFreshDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	db, name := NewEmptyDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := schema.Up(ctx, db); err != nil {
		t.Fatalf("tidbtest: migrate %s: %v", name, err)
	}
	return db, Server(t).DSN(name)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("tidbtest: crypto/rand: %v", err))
	}
	return hex.EncodeToString(b)
}

// OwnServer returns a TiDB for this test alone, stopped when it ends: for a
// test that pauses the server, which would stall every other test sharing
// it. Under withtidb (`make test`) it starts a server of the shared one's
// kind; otherwise it is the binary's server, already this binary's own
// unless it was reached by DSN.
func OwnServer(t testing.TB) *tidbenv.Server {
	t.Helper()
	opts, err := tidbenv.OwnOptionsFromEnv()
	if err != nil {
		t.Fatalf("tidbtest: %v", err)
	}
	if opts.Mode != tidbenv.ModeDocker && opts.Mode != tidbenv.ModeEmbedded {
		return Server(t)
	}
	opts.Progress = os.Stderr
	srv, err := tidbenv.Start(context.Background(), opts)
	if err != nil {
		t.Fatalf("tidbtest: this test needs a TiDB of its own: %v", err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("tidbtest: stop own TiDB: %v", err)
		}
	})
	return srv
}
