// Command laneq is the operator's command line: migrate a database, read a
// scope's statistics, dead letters, items and receipts; replay dead items
// (one, or all a filter matches), make an item due now, skip one, pause and
// resume a queue class, move a scope's generation.
//
//	laneq <command> [flags]
//
// Every command takes --dsn (default $LANEQ_TIDB_DSN), --json (machine
// output instead of tables) and --timeout. Exit codes: 0 done, 1 failed
// (database unreachable, a statement failed), 2 usage (bad flags or
// arguments), 3 not found (scope, item, receipt), 4 refused (a write
// without --yes, an action the item's state does not allow).
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/laneq/laneq/cmd/laneq/bench"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Exit codes.
const (
	exitOK       = 0
	exitFailed   = 1
	exitUsage    = 2
	exitNotFound = 3
	exitRefused  = 4
)

const usage = `laneq: operate a laneq queue on TiDB

usage: laneq <command> [flags]

commands:
  migrate                  apply pending schema migrations
  stats                    a scope's statistics per queue class (--exact for exact counts)
  dlq list                 a scope's dead letters, newest first
  item show                one work item: state, context, replay history
  replay                   give a dead item a new attempt (needs --yes)
  dlq replay               replay every dead letter the filters match, in batches (needs --yes; again: replays nothing twice)
  item retry-now           make a pending item that is not due yet (a retry's backoff, a delay) due now (needs --yes)
  item skip                end an unclaimed item (pending, blocked, waiting) as skipped; its lanes move on (needs --yes)
  item cancel              cancel an item: an unclaimed one ends skipped (cancelled) at once, a running one
                           stops at its next heartbeat and then ends so (needs --yes)
  item skip-matching       skip every unclaimed item a class, work type or failure class filter matches, in batches (needs --yes)
  class pause              stop every worker claiming a queue class of a scope until resumed (needs --yes)
  class resume             let workers claim a paused class again (needs --yes)
  receipt show             one ingress receipt, by delivery id or receipt id
  processes                a scope's worker processes: host, pid, executors, classes, leases held
  scope set-generation     move a scope's active generation (needs --yes)
  ui                       the web dashboard (--listen 127.0.0.1:8080; read-only unless --allow-writes;
                           --allowed-host NAME for a name beyond loopback: other Host headers get 421;
                           --login-file FILE, a user:password every request must log in with, needed beyond loopback
                           and with --allow-writes; GET /metrics for Prometheus)

every command takes:
  --dsn DSN        TiDB DSN (go-sql-driver syntax); default $LANEQ_TIDB_DSN
  --json           JSON instead of tables
  --timeout D      give up after D (default 30s)

exit codes: 0 done, 1 failed (bench: a violation found), 2 usage, 3 not found, 4 refused
run 'laneq <command> -h' for a command's flags
`

func main() {
	if bench.IsWorker() { // re-executed by `laneq bench` as a worker process
		os.Exit(bench.WorkerMain())
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// usageError is a bad command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// refusedError is a write refused: exit 4.
type refusedError struct{ msg string }

func (e *refusedError) Error() string { return e.msg }

type command struct {
	name string
	run  func(c *cli, args []string) error
}

var commands = []command{
	{"migrate", runMigrate},
	{"stats", runStats},
	{"dlq list", runDLQList},
	{"item show", runItemShow},
	{"replay", replayCommand.run},
	{"dlq replay", runDLQReplay},
	{"item retry-now", retryNowCommand.run},
	{"item skip-matching", runSkipMatching},
	{"item skip", skipCommand.run},
	{"item cancel", cancelCommand.run},
	{"class pause", classAction(true)},
	{"class resume", classAction(false)},
	{"receipt show", runReceiptShow},
	{"processes", runProcesses},
	{"scope set-generation", runSetGeneration},
	{"ui", runUI},
	{"bench", runBench},
}

// run is main without the process: testable, and the exit code it returns
// is the process's.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	var cmd *command
	var rest []string
	for i := range commands {
		words := strings.Fields(commands[i].name)
		if len(args) >= len(words) && slicesEqual(args[:len(words)], words) {
			cmd, rest = &commands[i], args[len(words):]
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(stderr, "laneq: unknown command %q (run 'laneq help')\n", strings.Join(args[:min(len(args), 2)], " "))
		return exitUsage
	}
	c := &cli{name: cmd.name, stdout: stdout, stderr: stderr}
	err := cmd.run(c, rest)
	c.close()
	if err == nil {
		return exitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	fmt.Fprintf(stderr, "laneq %s: %s\n", cmd.name, oneLine(err.Error()))
	return exitCode(err)
}

func exitCode(err error) int {
	var ue *usageError
	var re *refusedError
	switch {
	case errors.As(err, &ue),
		errors.Is(err, stats.ErrInvalid), errors.Is(err, inspect.ErrInvalid),
		errors.Is(err, workqueue.ErrInvalid), errors.Is(err, ingress.ErrInvalid):
		return exitUsage
	case errors.Is(err, workqueue.ErrUnknownScope), errors.Is(err, inspect.ErrNotFound), errors.Is(err, ingress.ErrNotFound):
		return exitNotFound
	case errors.As(err, &re), slices.ContainsFunc(exitRefusedErrors, func(target error) bool { return errors.Is(err, target) }):
		return exitRefused
	default:
		return exitFailed
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// cli is one command's run: its flags, output and database.
type cli struct {
	name           string
	stdout, stderr io.Writer
	fs             *flag.FlagSet
	dsn            string
	json           bool
	timeout        time.Duration
	db             *sql.DB
	qu             *workqueue.Queue // the write commands' (see queue)
}

// close closes what the command opened, the Queue before the database: a
// Queue's Close sends the announcements it still holds, which reads the
// scope's wake endpoints. Every command ends through it, whatever it
// returned.
func (c *cli) close() {
	if c.qu != nil {
		_ = c.qu.Close() // it only stops the publisher: nothing to report
	}
	if c.db != nil {
		_ = c.db.Close()
	}
}

// flags starts the command's flag set with the common flags.
func (c *cli) flags() *flag.FlagSet {
	c.fs = flag.NewFlagSet("laneq "+c.name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard) // a bad flag is one line (run prints it); -h prints the flags
	// No default value: -h prints a flag's default, and the DSN in the
	// environment may hold a password. parse falls back to it.
	c.fs.StringVar(&c.dsn, "dsn", "", "TiDB DSN (default $LANEQ_TIDB_DSN)")
	c.fs.BoolVar(&c.json, "json", false, "JSON instead of tables")
	c.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "give up after this long")
	return c.fs
}

// parse parses args; flag errors become usage errors.
func (c *cli) parse(args []string) error {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(c.stderr, "usage: laneq %s [flags]\n", c.name)
			c.fs.SetOutput(c.stderr)
			c.fs.PrintDefaults()
			return err
		}
		return &usageError{err.Error()}
	}
	if c.fs.NArg() > 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", c.fs.Arg(0))}
	}
	if c.timeout <= 0 {
		return &usageError{"--timeout must be positive"}
	}
	if c.dsn == "" {
		c.dsn = os.Getenv("LANEQ_TIDB_DSN")
	}
	return nil
}

// open connects to the database and checks the connection, within the
// command's timeout.
func (c *cli) open(ctx context.Context) error {
	if c.dsn == "" {
		return &usageError{"no database: pass --dsn or set LANEQ_TIDB_DSN"}
	}
	db, err := workqueue.OpenDB(c.dsn)
	if err != nil {
		return &usageError{fmt.Sprintf("bad DSN: %v", err)}
	}
	c.db = db
	if err := db.PingContext(ctx); err != nil {
		return fmt.Errorf("cannot reach the database: %w", err)
	}
	return nil
}

// queue opens the database and a work queue on it (for the commands that
// write through the runtime). Each commit that makes work claimable is
// announced to the scope's quiet workers before the call returns (the
// Queue waits for its datagrams: nothing else in this process listens on
// it), and run closes the Queue as the command ends.
func (c *cli) queue(ctx context.Context) (*workqueue.Queue, error) {
	if err := c.open(ctx); err != nil {
		return nil, err
	}
	qu, err := workqueue.New(c.db, workqueue.Config{})
	if err != nil {
		return nil, fmt.Errorf("open the work queue: %w", err)
	}
	c.qu = qu
	return qu, nil
}

func (c *cli) context() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), c.timeout)
}

// flagSet names a required flag and whether the command line set it.
type flagSet struct {
	name string
	set  bool
}

// need reports the first required flag not set.
func need(flags ...flagSet) error {
	for _, f := range flags {
		if !f.set {
			return &usageError{"missing --" + f.name}
		}
	}
	return nil
}
