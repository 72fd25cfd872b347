package workqueue_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// failureOf reads an item's failure class and summary.
func (f *fixture) failureOf(workID int64) (class, summary string) {
	f.t.Helper()
	if err := f.db.QueryRow("SELECT COALESCE(failure_class, ''), COALESCE(failure_summary, '') FROM work_item WHERE work_id = ?", workID).Scan(&class, &summary); err != nil {
		f.t.Fatal(err)
	}
	return class, summary
}

// Cancelling an item no process holds ends it at once, as a skip does
// (its lane moves on, in the same transaction, and that is announced); a
// terminal item, another scope's item and bad reasons are refused,
// writing nothing.
func TestCancelUnclaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	announced := f.announcements()
	lane := workqueue.Work{SourceLane: "acct-9 "} // a trailing space is part of the key
	head, follower := f.one(lane), f.one(lane)
	delayed := f.one(workqueue.Work{Delay: 3600e9})

	for _, tc := range []struct {
		name, scope, reason string
		want                error
	}{
		{"reason not UTF-8", scope, "bad \xff", workqueue.ErrInvalid},
		{"reason too long", scope, strings.Repeat("x", 1001), workqueue.ErrInvalid},
		{"another scope", "tenant-b/pack-1", "", workqueue.ErrRefused},
	} {
		if _, err := f.qu.Cancel(f.ctx, tc.scope, head, tc.reason); !errors.Is(err, tc.want) {
			t.Errorf("%s: cancel = %v, want %v", tc.name, err, tc.want)
		}
	}
	if f.state(head) != workqueue.StatePending {
		t.Fatalf("a refused cancel wrote: head is %s", f.state(head))
	}

	before := announced()
	out, err := f.qu.Cancel(f.ctx, scope, head, "customer closed the account ")
	if err != nil {
		t.Fatalf("cancel head: %v", err)
	}
	if out.Running || out.Finished.Promoted != 1 || f.state(head) != workqueue.StateSkipped || f.state(follower) != workqueue.StatePending {
		t.Fatalf("cancel head = %+v: head %s, follower %s; want ended at once, the follower promoted", out, f.state(head), f.state(follower))
	}
	if announced() != before+1 {
		t.Fatal("a cancel that promoted a follower was not announced")
	}
	if class, summary := f.failureOf(head); class != workqueue.FailureCancelled || summary != "cancelled by an operator: customer closed the account " {
		t.Fatalf("cancelled row records %q / %q", class, summary)
	}
	// A delayed item (not due) ends too, and promotes nothing.
	if out, err := f.qu.Cancel(f.ctx, scope, delayed, ""); err != nil || out.Running || out.Finished.Promoted != 0 || f.state(delayed) != workqueue.StateSkipped {
		t.Fatalf("cancel delayed = %+v, %v; state %s", out, err, f.state(delayed))
	}
	if _, err := f.qu.Cancel(f.ctx, scope, head, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("cancel of a cancelled item = %v, want ErrRefused", err)
	}
	c := f.claimer("w1")
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != follower {
		t.Fatalf("claimed %v, want only the follower %d (the cancelled items never run)", ids(got), follower)
	}
	f.complete(got[0])
	if _, err := f.qu.Cancel(f.ctx, scope, follower, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("cancel of a completed item = %v, want ErrRefused", err)
	}
}

// A running item's cancellation is recorded, not applied: the holder's
// renewals (one, and a batch beside an uncancelled lease) report it; its
// retry, release and dependency wait are refused with it and leave the
// item held, so it never runs again; the holder's FinishCancelled ends it
// and hands its lane over. Cancelling it again changes nothing.
func TestCancelRunningLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	lane := workqueue.Work{SourceLane: "acct-1"}
	head, follower := f.one(lane), f.one(lane)
	bystander := f.one(workqueue.Work{})
	got := f.claim(c, workqueue.ClaimRequest{})
	if !sameIDs(ids(got), []int64{head, bystander}) {
		t.Fatalf("claimed %v, want %d and %d", ids(got), head, bystander)
	}
	held, other := got[0], got[1]
	if held.WorkID != head {
		held, other = other, held
	}

	for range 2 { // the second request changes nothing
		out, err := f.qu.Cancel(f.ctx, scope, head, "stop")
		if err != nil || !out.Running {
			t.Fatalf("cancel of a running item = %+v, %v; want Running", out, err)
		}
	}
	if f.state(head) != workqueue.StateProcessing {
		t.Fatalf("a running item's cancel ended it at once: %s", f.state(head))
	}

	var cre *workqueue.CancelRequestedError
	if err := f.qu.Renew(f.ctx, held.Lease); !errors.As(err, &cre) || cre.Reason != "stop" || cre.WorkID != head {
		t.Fatalf("renew of a cancelled lease = %v, want a *CancelRequestedError with the reason", err)
	}
	errs := f.qu.RenewMany(f.ctx, []workqueue.Lease{held.Lease, other.Lease})
	if !errors.Is(errs[0], workqueue.ErrCancelRequested) || errs[1] != nil {
		t.Fatalf("batch renewal = %v, want the cancelled entry refused with ErrCancelRequested and the other renewed", errs)
	}
	if _, err := f.qu.Retry(f.ctx, held, workqueue.Failure{Class: "flaky", Summary: "x"}); !errors.Is(err, workqueue.ErrCancelRequested) {
		t.Fatalf("retry of a cancelled item = %v, want ErrCancelRequested", err)
	}
	if err := f.qu.Release(f.ctx, held.Lease); !errors.Is(err, workqueue.ErrCancelRequested) {
		t.Fatalf("release of a cancelled item = %v, want ErrCancelRequested", err)
	}
	if f.state(head) != workqueue.StateProcessing || f.state(follower) != workqueue.StateBlocked {
		t.Fatalf("refused give-backs wrote: head %s, follower %s", f.state(head), f.state(follower))
	}

	fin, err := f.qu.FinishCancelled(f.ctx, held.Lease, cre.Reason)
	if err != nil || fin.Promoted != 1 {
		t.Fatalf("finish cancelled = %+v, %v; want the follower promoted", fin, err)
	}
	if class, summary := f.failureOf(head); f.state(head) != workqueue.StateSkipped || class != workqueue.FailureCancelled || summary != "cancelled by an operator: stop" {
		t.Fatalf("head is %s with %q / %q, want skipped, cancelled", f.state(head), class, summary)
	}
	got = f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != follower {
		t.Fatalf("claimed %v after the cancel, want the follower %d", ids(got), follower)
	}
	f.complete(other)
}

// A cancelled item whose holder never finishes it (its process died, or
// its handler ignored the cancellation and its lease ran out) is ended
// cancelled by the claimer that finds its lease expired, never taken over;
// an expired lease of an uncancelled item beside it is taken over as
// usual.
func TestCancelExpiredLease(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	lane := workqueue.Work{TargetLane: "dest-1"}
	cancelled, follower := f.one(lane), f.one(lane)
	plain := f.one(workqueue.Work{})
	first := f.claim(c, workqueue.ClaimRequest{})
	if !sameIDs(ids(first), []int64{cancelled, plain}) {
		t.Fatalf("claimed %v", ids(first))
	}
	if out, err := f.qu.Cancel(f.ctx, scope, cancelled, ""); err != nil || !out.Running {
		t.Fatalf("cancel = %+v, %v", out, err)
	}
	f.expireLease(cancelled)
	f.expireLease(plain)

	c2 := f.claimer("w2")
	got, stats, err := c2.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	if stats.ExpiredCancelled != 1 {
		t.Errorf("ExpiredCancelled = %d, want 1", stats.ExpiredCancelled)
	}
	for _, g := range got {
		if g.WorkID == cancelled {
			t.Fatalf("the cancelled item %d was taken over", cancelled)
		}
	}
	if class, _ := f.failureOf(cancelled); f.state(cancelled) != workqueue.StateSkipped || class != workqueue.FailureCancelled {
		t.Fatalf("expired cancelled item is %s (%s), want skipped, cancelled", f.state(cancelled), class)
	}
	for len(got) < 2 { // the follower was promoted by the end; the plain item was taken over
		more := f.claim(c2, workqueue.ClaimRequest{})
		if len(more) == 0 {
			break
		}
		got = append(got, more...)
	}
	if !sameIDs(ids(got), []int64{follower, plain}) {
		t.Fatalf("claimed %v after the expiry, want the follower %d and the taken-over %d", ids(got), follower, plain)
	}
	// The old holder's finishes are fenced off.
	for _, old := range first {
		if _, err := f.qu.FinishCancelled(f.ctx, old.Lease, ""); !errors.Is(err, workqueue.ErrLeaseLost) {
			t.Errorf("the old holder's finish of %d = %v, want ErrLeaseLost", old.WorkID, err)
		}
	}
	for _, g := range got {
		f.complete(g)
	}
}
