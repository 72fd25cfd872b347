// Command withtidb finds or starts one TiDB (see package tidbenv), runs a
// command with that server's DSN in its environment, stops the server and
// exits with the command's status.
//
//	go run ./internal/tidbenv/cmd/withtidb -- go test ./...
//
// `make test` runs the suite under it, so every test binary shares one
// server instead of starting its own (an embedded tidb-server or a Docker
// container per package). The command sees:
//
//	LANEQ_TIDB_DSN  the server's DSN (no database)
//	LANEQ_TIDB      dsn
//	LANEQ_TIDB_OWN  the branch the server came from (dsn, docker, embedded):
//	                tests that must have a server to themselves — they pause
//	                it — start one of that kind (tidbtest.OwnServer)
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/laneq/laneq/internal/tidbenv"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: withtidb -- command [args...]")
		return 2
	}
	opts, err := tidbenv.OptionsFromEnv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "withtidb: %v\n", err)
		return 2
	}
	opts.Progress = os.Stderr
	srv, err := tidbenv.Start(context.Background(), opts)
	if err != nil {
		fmt.Fprintf(os.Stderr, "withtidb: %v\n", err)
		return 1
	}
	defer func() {
		if err := srv.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "withtidb: stop TiDB: %v\n", err)
		}
	}()
	fmt.Fprintf(os.Stderr, "withtidb: %s TiDB %s (%s) for: %v\n", srv.Kind, srv.Version, srv.Detail, args)

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(),
		tidbenv.EnvDSN+"="+srv.DSN(""),
		tidbenv.EnvMode+"="+string(tidbenv.ModeDSN),
		tidbenv.EnvOwn+"="+string(srv.Kind),
	)
	// An interrupt reaches the command (same process group); wait for it
	// to end so the server is stopped after it, not under it.
	signal.Ignore(os.Interrupt, syscall.SIGTERM)
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			if code := exit.ExitCode(); code > 0 {
				return code
			}
			return 1
		}
		fmt.Fprintf(os.Stderr, "withtidb: %v\n", err)
		return 1
	}
	return 0
}
