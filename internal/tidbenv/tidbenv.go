// Package tidbenv finds or starts the TiDB that laneq's tests and plancheck
// run against. There is exactly one way to get a TiDB, tried in this order:
//
//  1. an explicit DSN (LANEQ_TIDB_DSN): an existing server or cluster;
//  2. Docker via dockertest, image pingcap/tidb:v8.5.6, when a daemon answers
//     and the image is present (LANEQ_TIDB=docker forces this branch, pulls a
//     missing image, and fails loudly instead of falling back);
//  3. the embedded tidb-server (unistore) built from source by tools/tidb, run
//     as a child process on free loopback ports.
//
// Whatever the branch, connections get the session settings laneq relies on:
// parseTime (DATETIME(6) scans into time.Time), clientFoundRows (RowsAffected
// counts matched rows, which is what a compare-and-swap needs), and a UTC
// session time zone, so NOW(6) — the only clock leases and due times are
// compared with — means the same thing on every connection.
package tidbenv

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Kind names the branch a Server came from.
type Kind string

const (
	KindDSN      Kind = "dsn"
	KindDocker   Kind = "docker"
	KindEmbedded Kind = "embedded"
)

// Mode selects branches. ModeAuto tries them in order; the others force one
// branch and fail instead of falling back.
type Mode string

const (
	ModeAuto     Mode = "auto"
	ModeDSN      Mode = "dsn"
	ModeDocker   Mode = "docker"
	ModeEmbedded Mode = "embedded"
)

// Environment variables read by OptionsFromEnv.
const (
	EnvDSN          = "LANEQ_TIDB_DSN"
	EnvMode         = "LANEQ_TIDB"
	EnvServerBinary = "LANEQ_TIDB_SERVER"
	EnvImage        = "LANEQ_TIDB_IMAGE"
	EnvStartTimeout = "LANEQ_TIDB_START_TIMEOUT"
	// EnvPause and EnvResume are shell commands that pause and resume a
	// server reached by DSN (for example `docker pause tidb` and `docker
	// unpause tidb` for a cluster in containers); fault runs use them.
	EnvPause  = "LANEQ_TIDB_PAUSE"
	EnvResume = "LANEQ_TIDB_RESUME"
	// EnvOwn, set by withtidb beside a shared server's DSN, names the
	// branch that server came from (docker or embedded; dsn when it was
	// reached by DSN). A test that needs a server to itself — it pauses
	// it — starts one of that branch (OwnOptionsFromEnv).
	EnvOwn = "LANEQ_TIDB_OWN"
)

// DefaultImage is the image the Docker branch runs; users' CI pulls the
// published one, machines without a registry build it with `make tidb-image`.
const DefaultImage = "pingcap/tidb:v8.5.6"

// DefaultStartTimeout bounds how long a start may take before it fails.
const DefaultStartTimeout = 2 * time.Minute

// ErrUnavailable reports that a branch cannot be used on this machine (no
// DSN, no Docker daemon or image, no tidb-server binary). In ModeAuto it makes
// Start try the next branch; any other error stops Start at once.
var ErrUnavailable = errors.New("tidbenv: branch unavailable")

// Options configures Start. The zero value means ModeAuto with defaults.
type Options struct {
	Mode Mode
	// DSN of an existing server (go-sql-driver/mysql format). Its database
	// name is ignored: callers create their own databases.
	DSN string
	// ServerBinary is the embedded tidb-server path. Empty: look for
	// bin/tidb-server in the laneq checkout, then tidb-server on PATH.
	ServerBinary string
	// Image is the Docker image reference; empty means DefaultImage.
	Image string
	// Port and StatusPort pin the embedded server's ports; 0 picks free ones.
	Port, StatusPort int
	// StartTimeout bounds the whole start; 0 means DefaultStartTimeout.
	StartTimeout time.Duration
	// Progress receives one line per start step; nil discards them.
	Progress io.Writer
	// PauseCommand and ResumeCommand (sh -c) pause and resume a DSN
	// server; both or neither.
	PauseCommand, ResumeCommand string
}

// OptionsFromEnv reads the LANEQ_TIDB* variables.
func OptionsFromEnv() (Options, error) {
	opts := Options{
		Mode:          Mode(strings.ToLower(strings.TrimSpace(os.Getenv(EnvMode)))),
		DSN:           strings.TrimSpace(os.Getenv(EnvDSN)),
		ServerBinary:  strings.TrimSpace(os.Getenv(EnvServerBinary)),
		Image:         strings.TrimSpace(os.Getenv(EnvImage)),
		PauseCommand:  strings.TrimSpace(os.Getenv(EnvPause)),
		ResumeCommand: strings.TrimSpace(os.Getenv(EnvResume)),
	}
	if (opts.PauseCommand == "") != (opts.ResumeCommand == "") {
		return Options{}, fmt.Errorf("tidbenv: set both %s and %s, or neither", EnvPause, EnvResume)
	}
	if opts.Mode == "" {
		opts.Mode = ModeAuto
	}
	switch opts.Mode {
	case ModeAuto, ModeDSN, ModeDocker, ModeEmbedded:
	default:
		return Options{}, fmt.Errorf("tidbenv: %s=%q: want one of auto, dsn, docker, embedded", EnvMode, opts.Mode)
	}
	if v := strings.TrimSpace(os.Getenv(EnvStartTimeout)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return Options{}, fmt.Errorf("tidbenv: %s=%q: want a positive duration such as 90s", EnvStartTimeout, v)
		}
		opts.StartTimeout = d
	}
	return opts, nil
}

// OwnOptionsFromEnv is OptionsFromEnv for a test that needs a server of
// its own while the others share one started by withtidb: when EnvOwn names
// docker or embedded, it asks for a new server of that branch instead of
// the shared DSN. Otherwise (no withtidb, or a server reached by DSN) it is
// OptionsFromEnv.
func OwnOptionsFromEnv() (Options, error) {
	opts, err := OptionsFromEnv()
	if err != nil {
		return Options{}, err
	}
	switch own := Mode(strings.ToLower(strings.TrimSpace(os.Getenv(EnvOwn)))); own {
	case ModeDocker, ModeEmbedded:
		opts.Mode, opts.DSN = own, ""
	}
	return opts, nil
}

func (o Options) withDefaults() Options {
	if o.Mode == "" {
		o.Mode = ModeAuto
	}
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	return o
}

// Server is a reachable TiDB. Close stops it when this package started it.
type Server struct {
	Kind Kind
	// Version is the server's VERSION() string.
	Version string
	// Detail names what was started or reached (binary, image, address).
	Detail string
	base   *mysql.Config
	stop   func() error
	// pause and resume stop and continue the server without losing its
	// state (nil: this branch cannot, see Pause).
	pause, resume func() error
}

// Start returns a reachable TiDB according to opts, or an error that says
// which branches were tried and why each was unavailable.
func Start(ctx context.Context, opts Options) (*Server, error) {
	opts = opts.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()

	type branch struct {
		mode  Mode
		start func(context.Context, Options) (*Server, error)
	}
	branches := []branch{
		{ModeDSN, startDSN},
		{ModeDocker, startDocker},
		{ModeEmbedded, startEmbedded},
	}
	var reasons []string
	for _, b := range branches {
		if opts.Mode != ModeAuto && opts.Mode != b.mode {
			continue
		}
		srv, err := b.start(ctx, opts)
		if err == nil {
			return srv, nil
		}
		if opts.Mode != ModeAuto || !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		reasons = append(reasons, err.Error())
	}
	return nil, fmt.Errorf("tidbenv: no TiDB could be found or started:\n  - %s", strings.Join(reasons, "\n  - "))
}

func startDSN(ctx context.Context, opts Options) (*Server, error) {
	if opts.DSN == "" {
		return nil, fmt.Errorf("%w: %s is not set", ErrUnavailable, EnvDSN)
	}
	cfg, err := mysql.ParseDSN(opts.DSN)
	if err != nil {
		return nil, fmt.Errorf("tidbenv: parse %s: %w", EnvDSN, err)
	}
	cfg.DBName = ""
	srv := &Server{Kind: KindDSN, Detail: cfg.Addr, base: normalize(cfg), stop: func() error { return nil }}
	if opts.PauseCommand != "" && opts.ResumeCommand != "" {
		srv.pause, srv.resume = shellStep(EnvPause, opts.PauseCommand), shellStep(EnvResume, opts.ResumeCommand)
	}
	if err := srv.waitSQL(ctx); err != nil {
		return nil, fmt.Errorf("tidbenv: server at %s (from %s): %w", cfg.Addr, EnvDSN, err)
	}
	return srv, nil
}

// normalize applies the session settings described in the package comment.
func normalize(cfg *mysql.Config) *mysql.Config {
	cfg = cfg.Clone()
	cfg.ParseTime = true
	cfg.ClientFoundRows = true
	cfg.InterpolateParams = true
	cfg.Loc = time.UTC
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["time_zone"] = "'+00:00'"
	// As workqueue.SessionDSN (this package cannot import it; a test checks
	// they agree): let TiDB cache the plans of prepared point and batch
	// point gets, end lock waits before a write's timeout gives them up,
	// and kill a session idle inside a transaction.
	cfg.Params["tidb_opt_fix_control"] = "'44830:ON'"
	cfg.Params["innodb_lock_wait_timeout"] = "5"
	cfg.Params["tidb_idle_transaction_timeout"] = "5"
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	return cfg
}

func loopbackConfig(port string) *mysql.Config {
	cfg := mysql.NewConfig()
	cfg.User = "root"
	cfg.Net = "tcp"
	cfg.Addr = "127.0.0.1:" + port
	return normalize(cfg)
}

// waitSQL pings until the server answers SQL and checks that it is TiDB.
func (s *Server) waitSQL(ctx context.Context) error {
	db, err := sql.Open("mysql", s.base.FormatDSN())
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer db.Close()
	var lastErr error
	for {
		var version string
		lastErr = db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&version)
		if lastErr == nil {
			if !strings.Contains(version, "TiDB") {
				return fmt.Errorf("server version %q is not TiDB", version)
			}
			s.Version = version
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not answering SQL: %w (last error: %v)", ctx.Err(), lastErr)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// statusReady reports whether TiDB's status endpoint answers 200.
func statusReady(ctx context.Context, statusAddr string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+statusAddr+"/status", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Close stops a server this package started; for a DSN server it does nothing.
func (s *Server) Close() error {
	if s == nil || s.stop == nil {
		return nil
	}
	stop := s.stop
	s.stop = nil
	return stop()
}

// shellStep runs a pause or resume command.
func shellStep(name, command string) func() error {
	return func() error {
		out, err := exec.Command("sh", "-c", command).CombinedOutput()
		if err != nil {
			return fmt.Errorf("tidbenv: %s (%s): %w: %s", name, command, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
}

// ErrCannotPause reports a server Pause cannot stop: one reached by DSN.
var ErrCannotPause = errors.New("tidbenv: this server cannot be paused (reached by DSN, with no " + EnvPause + " and " + EnvResume + " commands)")

// Pause freezes the server as a stop-the-world pause would: the embedded
// process gets SIGSTOP, a Docker container is paused (cgroup freezer).
// Connections stay open and every statement waits; Resume continues it.
// Fault runs use it to stop TiDB for longer than a lease.
func (s *Server) Pause() error {
	if s.pause == nil {
		return ErrCannotPause
	}
	return s.pause()
}

// Resume continues a paused server.
func (s *Server) Resume() error {
	if s.resume == nil {
		return ErrCannotPause
	}
	return s.resume()
}

// CanPause reports whether Pause works on this server.
func (s *Server) CanPause() bool { return s.pause != nil }

// Addr is the server's SQL address.
func (s *Server) Addr() string { return s.base.Addr }

// DSN returns a DSN for database on this server with laneq's session settings.
func (s *Server) DSN(database string) string {
	cfg := s.base.Clone()
	cfg.DBName = database
	return cfg.FormatDSN()
}

// Open opens a connection pool to database (empty: no default database).
func (s *Server) Open(database string) (*sql.DB, error) {
	db, err := sql.Open("mysql", s.DSN(database))
	if err != nil {
		return nil, fmt.Errorf("tidbenv: open %q on %s: %w", database, s.Addr(), err)
	}
	return db, nil
}

// CreateDatabase creates an empty database; it fails if one exists.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	return s.adminExec(ctx, "CREATE DATABASE "+quoteIdent(name))
}

// DropDatabase drops a database if it exists.
func (s *Server) DropDatabase(ctx context.Context, name string) error {
	return s.adminExec(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name))
}

func (s *Server) adminExec(ctx context.Context, stmt string) error {
	db, err := s.Open("")
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("tidbenv: %s: %w", stmt, err)
	}
	return nil
}

func quoteIdent(name string) string {
	return "`" + strings.ReplaceAll(name, "`", "``") + "`"
}
