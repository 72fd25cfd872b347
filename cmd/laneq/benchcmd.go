package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/laneq/laneq/cmd/laneq/bench"
	"github.com/laneq/laneq/internal/tidbenv"
)

// runBench is `laneq bench`: a load and fault run verified from the
// database (see package bench).
func runBench(c *cli, args []string) error {
	fs := c.flags()
	var s bench.Spec
	f := &s.Faults
	mode := fs.String("tidb", "", "where TiDB comes from: auto, dsn, docker or embedded (default $LANEQ_TIDB, else dsn when --dsn is set, else auto)")
	fs.IntVar(&s.Items, "items", 2000, "events to enqueue")
	fs.IntVar(&s.Scopes, "scopes", 1, "scopes the events are spread over")
	fs.IntVar(&s.SourceLanes, "source-lanes", 0, "source lanes (default items/10)")
	fs.IntVar(&s.TargetLanes, "target-lanes", 4, "target lanes the bursts hit")
	fs.IntVar(&s.BurstSize, "burst", 50, "events per burst (one in five bursts is same-target, one in five multi-target)")
	fs.IntVar(&s.ProjectionEvery, "projection-every", 10, "one source lane in N (by a hash of its number) is a projection lane (-1: none)")
	fs.IntVar(&s.DependencyEvery, "dependency-every", 20, "every Nth event waits for a dependency another event's handler satisfies (-1: none)")
	fs.IntVar(&s.FreeEvery, "free-every", 10, "every Nth event is in no lane (-1: none)")
	classes := fs.String("classes", "default,bulk", "queue classes, comma-separated")
	fs.IntVar(&s.Processes, "processes", 3, "worker processes")
	fs.IntVar(&s.Executors, "executors", 16, "executors per worker process")
	fs.BoolVar(&s.NoClaimOnPromote, "no-claim-on-promote", false, "workers promote lane followers for claim turns instead of claiming them in the completion batch")
	fs.DurationVar(&s.Lease, "lease", 0, "lease of every claim (default 3s)")
	fs.DurationVar(&s.HandlerLatency, "handler-latency", 0, "simulated work per attempt, ±50% (default 5ms)")
	fs.Float64Var(&s.FailureRate, "failure-rate", 0.02, "share of attempts that fail on purpose and retry (-1: none)")
	fs.IntVar(&s.EnqueueBatch, "enqueue-batch", 200, "events per Enqueue")
	fs.IntVar(&s.EnqueueRate, "enqueue-rate", 0, "events enqueued per second at most (0: as fast as possible)")
	fs.DurationVar(&s.Periodic, "periodic", 0, "every worker process runs a schedule of one tick per this in each scope; each tick verified stored once, none lost (0: none; at least 1s)")
	fs.IntVar(&s.RateLimit, "rate-limit", 0, "starts a second of the rate-limited work type across every process; its budget verified (0: none; at least 10)")
	fs.IntVar(&s.LimitedEvery, "limited-every", 0, "with --rate-limit, every Nth laneless event is rate-limited (default 5)")
	fs.IntVar(&s.RateKeys, "rate-keys", 0, "with --rate-limit, limit per rate key: the limited items take this many keys in turn, each with the whole limit")
	fs.IntVar(&s.StubbornEvery, "stubborn-every", 0, "one event in N (by a hash, in lanes and none) has a first attempt whose handler ignores its context for --stubborn-for (0: none)")
	fs.DurationVar(&s.StubbornFor, "stubborn-for", 0, "how long a stubborn handler runs whatever its context says (default handler deadline + abandon-after + 3s)")
	fs.DurationVar(&s.HandlerDeadline, "handler-deadline", 0, "the workers' handler deadline (default 5m, or 2s with --stubborn-every)")
	fs.DurationVar(&s.AbandonAfter, "abandon-after", 0, "how long the workers let a handler ignore its cancelled context before its slot takes new work (default 5s, or 1s with --stubborn-every)")
	fs.IntVar(&s.Cancels, "cancels", 0, "running stubborn items to cancel during the run (workqueue.Queue.Cancel); needs --stubborn-every")
	fs.DurationVar(&s.CancelEvery, "cancel-every", 0, "time between cancellations (default 3s)")
	fs.IntVar(&f.Kills, "kills", 3, "kill -9 of a worker process mid-execution, each restarted")
	fs.IntVar(&f.Freezes, "freezes", 1, "worker processes frozen (SIGSTOP) past their lease")
	fs.IntVar(&f.TiDBPauses, "tidb-pauses", 1, "TiDB paused past the lease (embedded or Docker TiDB only)")
	fs.IntVar(&f.Drops, "drops", 1, "dropped connections under a worker's claims, renewals and finishes")
	fs.DurationVar(&f.Every, "fault-every", 0, "time between faults (default 4s)")
	fs.DurationVar(&f.Freeze, "freeze", 0, "how long a frozen worker stays stopped at least (default 2 × lease); it then stays stopped until its leases were taken over, at most 2m more")
	fs.DurationVar(&f.Pause, "pause", 0, "how long TiDB stays paused (default 2 × lease)")
	fs.DurationVar(&f.Restart, "restart", 0, "delay before a killed worker is restarted (default 1s)")
	fs.BoolVar(&s.Baseline, "baseline", false, "also run the naive claim loop on the same counts and print ratios")
	fs.DurationVar(&s.Deadline, "deadline", 0, "how long to wait for the queue to drain after the last fault and cancellation (default 10m)")
	fs.DurationVar(&s.BaselineDeadline, "baseline-deadline", 0, "how long each baseline phase may run after its last enqueue; the rest is reported unfinished (default 3m)")
	keep := fs.Bool("keep", false, "keep the bench databases for inspection")
	if err := c.parse(args); err != nil {
		return err
	}
	s.Classes = strings.Split(*classes, ",")
	spec, err := s.WithDefaults()
	if err != nil {
		return &usageError{err.Error()}
	}
	opts, err := tidbOptions(c, *mode)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	startCtx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	srv, err := tidbenv.Start(startCtx, opts)
	cancel()
	if err != nil {
		return err
	}
	defer srv.Close()
	rep, err := bench.Run(ctx, bench.Options{Spec: spec, Server: srv, Progress: c.stderr, KeepDatabases: *keep})
	if err != nil {
		return err
	}
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		rep.WriteText(c.stdout)
	}
	if !rep.OK() {
		return errors.New("verification failed: see the problems above")
	}
	return nil
}

// tidbOptions is tidbenv's environment with the command line on top.
func tidbOptions(c *cli, mode string) (tidbenv.Options, error) {
	opts, err := tidbenv.OptionsFromEnv()
	if err != nil {
		return opts, &usageError{err.Error()}
	}
	opts.Progress = c.stderr
	if c.dsn != "" {
		opts.DSN = c.dsn
		if os.Getenv(tidbenv.EnvMode) == "" {
			opts.Mode = tidbenv.ModeDSN
		}
	}
	switch tidbenv.Mode(mode) {
	case "":
	case tidbenv.ModeAuto, tidbenv.ModeDSN, tidbenv.ModeDocker, tidbenv.ModeEmbedded:
		opts.Mode = tidbenv.Mode(mode)
	default:
		return opts, &usageError{fmt.Sprintf("--tidb %q: want auto, dsn, docker or embedded", mode)}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = tidbenv.DefaultStartTimeout
	}
	return opts, nil
}
