package ingress_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The kill test re-runs this test binary as a router process; the
// environment tells TestMain to run it instead of the tests.
const (
	killHelperEnv      = "LANEQ_INGRESS_KILLED_ROUTER"
	killHelperDSNEnv   = "LANEQ_INGRESS_KILLED_ROUTER_DSN"
	killHelperLeaseEnv = "LANEQ_INGRESS_KILLED_ROUTER_LEASE"
)

// runKilledRouter claims the scope's due receipts and kills its own
// process with SIGKILL inside the materializing transaction, after its
// last statement (events, work items and the materialized mark are
// written, uncommitted): the worst moment for a router to die.
func runKilledRouter() int {
	fail := func(err error) int { fmt.Fprintln(os.Stderr, "killed router:", err); return 1 }
	db, err := workqueue.OpenDB(os.Getenv(killHelperDSNEnv))
	if err != nil {
		return fail(err)
	}
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		return fail(err)
	}
	in, err := ingress.New(db, ingress.Config{})
	if err != nil {
		return fail(err)
	}
	lease, err := time.ParseDuration(os.Getenv(killHelperLeaseEnv))
	if err != nil {
		return fail(err)
	}
	r, err := in.NewRouter(qu, ingress.RouterConfig{Scope: scope, Route: routeFacts, Lease: lease, Owner: "doomed"})
	if err != nil {
		return fail(err)
	}
	r.SetBeforeCommit(func([]int64) { _ = syscall.Kill(os.Getpid(), syscall.SIGKILL) })
	_, err = r.Turn(context.Background(), ingress.DefaultClass)
	return fail(fmt.Errorf("turn returned (%v) instead of dying", err))
}

// TestReceiptSurvivesRouterKill: a receipt is accepted, a router process
// claims it and is killed with SIGKILL in the middle of its materializing
// transaction; after the lease ends a router in another process takes it
// over (woken by its exact due timer: its backstop is an hour) and
// materializes it exactly once.
func TestReceiptSurvivesRouterKill(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acc := f.accept(delivery("kill-1", "", "k1", "k2", "k3"))
	const lease = 2 * time.Second

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), killHelperEnv+"=1", killHelperDSNEnv+"="+f.dsn, killHelperLeaseEnv+"="+lease.String())
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("router process ended with %v, want killed by SIGKILL; output:\n%s", err, out)
	}
	dead := f.receipt(acc.Receipt.ID)
	if dead.Status != ingress.StatusRouting || dead.ClaimToken != 1 || dead.ClaimOwner != "doomed/default" {
		t.Fatalf("after the kill: %+v, want routing under the dead router's claim", dead)
	}
	if n := f.count("SELECT COUNT(*) FROM event"); n != 0 {
		t.Fatalf("%d events survived the killed transaction", n)
	}

	r := f.router(ingress.RouterConfig{Backstop: time.Hour, Lease: time.Minute})
	stopRouter := f.run(r)
	got := f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
	if got.ClaimToken != 2 || got.Attempts != 2 {
		t.Fatalf("materialized receipt: token %d, attempts %d, want 2 and 2 (the dead claim counts)", got.ClaimToken, got.Attempts)
	}
	events := f.eventsOf(acc.Receipt.ID)
	if len(events) != 3 {
		t.Fatalf("%d events, want 3 (exactly once)", len(events))
	}
	if diff := cmp.Diff(events, got.EventIDs); diff != "" {
		t.Fatalf("recorded event ids (-written +recorded):\n%s", diff)
	}
	if n := f.count("SELECT COUNT(*) FROM work_item"); n != 3 {
		t.Fatalf("%d work items, want 3", n)
	}
	stopRouter() // its counters move after the commit the row shows
	if st := r.Stats(); st.Reclaimed != 1 || st.Materialized != 1 {
		t.Fatalf("stats %+v, want one reclaim materialized", st)
	}
	t.Logf("killed after %s lease: taken over %s after acceptance", lease, got.MaterializedAt.Sub(got.AcceptedAt).Round(time.Millisecond))
}
