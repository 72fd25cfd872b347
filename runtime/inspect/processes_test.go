package inspect_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestProcesses: a running worker is listed with what it says about
// itself (quiet, once its wakes are known to work and a maintenance wrote
// it) and the lease it holds; a lease taken by a claimer that
// registered nothing is counted apart; a registration that expired is
// listed as not live; an unknown scope is refused.
func TestProcesses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cfg := worker.Config{Scope: scope, Owner: "proc-test", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cfg.Scheduler.Executors = 2
	cfg.Controller.MaintainEvery = 100 * time.Millisecond // so its quiet mode is described soon after it changes
	started, release := make(chan int64, 4), make(chan struct{})
	w, err := worker.New(e.qu, cfg, map[string]worker.Handler{"deliver": func(ctx context.Context, job *worker.Job) error {
		started <- job.Item.WorkID
		<-release
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() {
		close(release)
		cancel()
		<-done
	}()
	held := e.enqueue(t, workqueue.Work{WorkType: "deliver"})[0]
	if got := <-started; got != held {
		t.Fatalf("the worker started %d, want %d", got, held)
	}
	// A lease of a claimer with no endpoint row.
	e.enqueue(t, workqueue.Work{WorkType: "manual"})
	if got, _, err := e.cl.Claim(e.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"manual"}, Max: 1}); err != nil || len(got) != 1 {
		t.Fatalf("manual claim: %d, %v", len(got), err)
	}
	// A process that died an hour ago without removing its row.
	if err := e.qu.RegisterWakeEndpoint(e.ctx, scope, workqueue.WakeEndpoint{ID: "zz-dead", Address: "127.0.0.1:9", Key: make([]byte, 32),
		Process: &workqueue.ProcessInfo{Host: "gone", PID: 7}}, time.Millisecond); err != nil {
		t.Fatal(err)
	}

	var ps inspect.Processes
	waitfor.Until(t, time.Minute, func() (bool, error) {
		var err error
		ps, err = e.r.Processes(e.ctx, scope)
		return err == nil && len(ps.Processes) == 2 && ps.Processes[0].Leases == 1 && ps.Processes[0].Info.Quiet, err
	}, func() string { return fmt.Sprintf("processes: %+v", ps) })
	host, _ := os.Hostname()
	p := ps.Processes[0]
	if !p.Live || p.Info.Host != host || p.Info.PID != os.Getpid() || p.Info.Owner != "proc-test" || p.Info.Executors != 2 ||
		!slices.Contains(p.Info.Classes, "default") || !slices.Equal(p.Info.WorkTypes, []string{"deliver"}) || p.Expired != 0 || p.RenewedAt.IsZero() {
		t.Fatalf("the worker's process: %+v", p)
	}
	if dead := ps.Processes[1]; dead.Live || dead.Info.Host != "gone" || dead.Leases != 0 {
		t.Fatalf("the expired registration: %+v", dead)
	}
	if ps.Unattributed != 1 || ps.Truncated || ps.LeasesCapped {
		t.Fatalf("unattributed %d (want the manual claim's 1), truncated %v, capped %v", ps.Unattributed, ps.Truncated, ps.LeasesCapped)
	}
	if !ps.Serves("default") || ps.Serves("nobody-serves-this") {
		t.Fatalf("Serves: %+v", ps)
	}
	if _, err := e.r.Processes(e.ctx, "tenant-none"); err == nil {
		t.Fatal("processes of an unknown scope: no error")
	}
}
