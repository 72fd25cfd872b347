package ingress_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestStaleRouterCannotMark: router A claims a receipt with a short lease
// and stalls inside its RouteFunc (a GC pause, a slow provider call);
// router B takes the receipt over when the lease ends and materializes it;
// when A resumes, its materializing transaction finds the receipt no
// longer its own and writes nothing. A second receipt shows the same for a
// stale router's retry: its fenced write changes nothing.
func TestStaleRouterCannotMark(t *testing.T) {
	t.Parallel()
	for _, stale := range []string{"materialize", "retry"} {
		t.Run(stale, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			acc := f.accept(delivery("stale-"+stale, "", "s1", "s2"))
			entered, resume := make(chan struct{}), make(chan struct{})
			a := f.router(ingress.RouterConfig{Owner: "a", Lease: 200 * time.Millisecond, Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
				close(entered)
				<-resume
				if stale == "retry" {
					return nil, ingress.Transient("upstream", errors.New("timed out"))
				}
				return routeFacts(ctx, c)
			}})
			turnErr := make(chan error, 1)
			go func() { _, err := a.Turn(f.ctx, ingress.DefaultClass); turnErr <- err }()
			<-entered

			b := f.router(ingress.RouterConfig{Owner: "b", Backstop: time.Hour})
			f.run(b) // its exact timer fires when A's lease ends
			got := f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
			close(resume)
			if err := <-turnErr; err != nil {
				t.Fatalf("stale router's turn: %v", err)
			}
			if st := a.Stats(); st.LeaseLost != 1 || st.Materialized != 0 || st.Retried != 0 {
				t.Fatalf("stale router stats %+v, want one lost lease and nothing written", st)
			}
			after := f.receipt(acc.Receipt.ID)
			if after.Status != ingress.StatusMaterialized || after.ClaimToken != 2 || after.ClaimOwner != "b/default" || after.LastErrorClass != "" {
				t.Fatalf("receipt after the stale router resumed: %+v", after)
			}
			if n := len(f.eventsOf(acc.Receipt.ID)); n != 2 || len(got.EventIDs) != 2 {
				t.Fatalf("%d events (%d recorded), want 2", n, len(got.EventIDs))
			}
		})
	}
}

// TestLeaseExpiringBeforeTheLookupRunsIsReclaimed: router A holds a
// receipt and stalls; router B's first turn reads A's lease live. B's
// next-work lookup measures its look-back on its own clock, but the
// database subtracts it from the NOW(6) it reads when the statement
// arrives: here the lease runs out just after B measured, and the
// statement reaches the database 300ms later (a busy machine's delay,
// made certain by the hook). The lookup's slack still sees the expiry, so
// B's exact timer takes the receipt over; with the backstop at an hour
// nothing else would. (Fresh-clone CI beside two CPU hogs caught
// TestStaleRouterCannotMark waiting in that gap.)
func TestLeaseExpiringBeforeTheLookupRunsIsReclaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	acc := f.accept(delivery("expires-in-flight", "", "e1"))
	entered, resume := make(chan struct{}), make(chan struct{})
	a := f.router(ingress.RouterConfig{Owner: "a", Lease: time.Hour, Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
		close(entered)
		<-resume
		return routeFacts(ctx, c)
	}})
	turnErr := make(chan error, 1)
	go func() { _, err := a.Turn(f.ctx, ingress.DefaultClass); turnErr <- err }()
	<-entered

	in, faults := f.faultyInbox()
	faults.Add(faultdb.Rule{Statement: "NextReceiptDue", Before: func(ctx context.Context) {
		if _, err := f.db.ExecContext(ctx, "UPDATE ingress_receipt SET lease_until = NOW(6), next_attempt_at = NOW(6) WHERE receipt_id = ?", acc.Receipt.ID); err != nil {
			t.Error(err)
			return
		}
		waitfor.Poll(time.Minute, func() (bool, bool) {
			var late bool
			if err := f.db.QueryRowContext(ctx, "SELECT NOW(6) >= DATE_ADD(next_attempt_at, INTERVAL 300000 MICROSECOND) FROM ingress_receipt WHERE receipt_id = ?", acc.Receipt.ID).Scan(&late); err != nil {
				t.Error(err)
				return false, true
			}
			return late, false
		})
	}})
	b := f.routerOn(in, f.qu, ingress.RouterConfig{Owner: "b", Backstop: time.Hour})
	stopB := f.run(b)
	f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
	stopB() // its counters move after the commit the row shows
	close(resume)
	if err := <-turnErr; err != nil {
		t.Fatalf("stale router's turn: %v", err)
	}
	if n := faults.Fired("NextReceiptDue"); n != 1 {
		t.Fatalf("the delayed lookup ran %d times, want 1", n)
	}
	if after := f.receipt(acc.Receipt.ID); after.ClaimOwner != "b/default" || after.Attempts != 2 {
		t.Fatalf("receipt %+v, want taken over by b on its second attempt", after)
	}
	if st := b.Stats(); st.Reclaimed != 1 || st.Materialized != 1 {
		t.Fatalf("router b stats %+v", st)
	}
}

// TestTransientFailureRetriesWithBackoff: a route that fails twice with a
// transient error is retried after its backoff (the router's exact timer:
// its backstop is an hour) and then materialized; the receipt keeps the
// last failure's sanitized class and summary and counts three attempts.
func TestTransientFailureRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var calls atomic.Int32
	var mu sync.Mutex
	var backoffs []int32
	r := f.router(ingress.RouterConfig{
		Backstop: time.Hour,
		Backoff: func(attempt int32) time.Duration {
			mu.Lock()
			defer mu.Unlock()
			backoffs = append(backoffs, attempt)
			return 300 * time.Millisecond
		},
		Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
			if calls.Add(1) <= 2 {
				return nil, ingress.Transient("crm_unavailable", fmt.Errorf("upstream answered 503\r\nretry later"))
			}
			return routeFacts(ctx, c)
		},
	})
	acc := f.accept(delivery("flaky", "", "f1"))
	stopRouter := f.run(r)
	got := f.waitStatus(acc.Receipt.ID, ingress.StatusMaterialized)
	if got.Attempts != 3 || calls.Load() != 3 {
		t.Fatalf("attempts %d, route calls %d, want 3 and 3", got.Attempts, calls.Load())
	}
	if got.LastErrorClass != "crm_unavailable" || got.LastErrorSummary != "upstream answered 503  retry later" {
		t.Fatalf("last error %q: %q", got.LastErrorClass, got.LastErrorSummary)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(backoffs) != 2 || backoffs[0] != 1 || backoffs[1] != 2 {
		t.Fatalf("backoffs asked for attempts %v, want [1 2]", backoffs)
	}
	if wait := got.MaterializedAt.Sub(got.AcceptedAt); wait < 600*time.Millisecond {
		t.Fatalf("materialized %s after acceptance: the two 300ms backoffs were not kept", wait)
	}
	stopRouter() // its counters move after the commit the row shows
	if st := r.Stats(); st.Retried != 2 || st.Materialized != 1 || st.Reclaimed != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestTerminalFailureIsRecorded: a route's terminal error fails the
// receipt at once with a sanitized summary (no control characters,
// bounded); a route that stays transient fails once its attempts run out;
// events the queue refuses fail only their own receipt, while the rest of
// the batch materializes; failed receipts are never claimed again.
func TestTerminalFailureIsRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := strings.Repeat("x", 3000)
	r := f.router(ingress.RouterConfig{
		MaxAttempts: 2,
		Backoff:     func(int32) time.Duration { return 0 },
		Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
			switch c.DeliveryID {
			case "unparseable":
				return nil, ingress.Terminal("bad_body", fmt.Errorf("parse: unexpected \x00 at byte 3\n%s", long))
			case "always-busy":
				return nil, errors.New("busy")
			case "bad-events":
				return []workqueue.Event{{IdempotencyKey: "k", RouteID: "r", SourceKind: "s", SourceID: "1", Work: []workqueue.Work{{WorkType: ""}}}}, nil
			}
			return routeFacts(ctx, c)
		},
	})
	ids := map[string]int64{}
	for _, d := range []string{"unparseable", "always-busy", "bad-events", "fine"} {
		ids[d] = f.accept(delivery(d, "", "fact-of-"+d)).Receipt.ID
	}
	for range 3 { // the busy one needs a second claim to run out
		if _, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil {
			t.Fatal(err)
		}
	}
	check := func(d, status, class, summaryPrefix string) ingress.Receipt {
		t.Helper()
		got := f.receipt(ids[d])
		if got.Status != status || got.LastErrorClass != class || !strings.HasPrefix(got.LastErrorSummary, summaryPrefix) {
			t.Fatalf("%s: %s %q %q, want %s %q %q...", d, got.Status, got.LastErrorClass, got.LastErrorSummary, status, class, summaryPrefix)
		}
		return got
	}
	bad := check("unparseable", ingress.StatusFailed, "bad_body", "parse: unexpected   at byte 3 xxx")
	if n := len(bad.LastErrorSummary); n > 1024 || !strings.HasSuffix(bad.LastErrorSummary, "…") {
		t.Fatalf("summary of %d bytes not bounded with an ellipsis", n)
	}
	if bad.Attempts != 1 {
		t.Fatalf("terminal failure after %d attempts, want 1", bad.Attempts)
	}
	check("always-busy", ingress.StatusFailed, "route_failed", "attempt 2 of 2: busy")
	check("bad-events", ingress.StatusFailed, "invalid_events", "workqueue: invalid input")
	check("fine", ingress.StatusMaterialized, "", "")
	if n := f.count("SELECT COUNT(*) FROM event"); n != 1 {
		t.Fatalf("%d events, want only the fine receipt's", n)
	}
	before := r.Stats()
	if _, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil {
		t.Fatal(err)
	}
	if after := r.Stats(); after.Claimed != before.Claimed {
		t.Fatalf("a failed receipt was claimed again: %+v -> %+v", before, after)
	}
	if before.Failed != 3 || before.Retried != 1 {
		t.Fatalf("stats %+v, want 3 failed, 1 retried", before)
	}
}

// TestStragglerBehindTheFloorIsFound: a receipt that commits with a due
// time older than the router's floor (its accept statement began long
// before a receipt the router already consumed: a stalled client
// connection) is not read by the scans from the floor; the class's
// scan from the front, once per Backstop, finds and materializes it.
func TestStragglerBehindTheFloorIsFound(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	r := f.router(ingress.RouterConfig{Backstop: 500 * time.Millisecond})
	first := f.accept(delivery("first", "", "f1"))
	if n, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil || n != 1 {
		t.Fatalf("first turn: %d, %v", n, err)
	}
	late := f.accept(delivery("late", "", "l1"))
	// Test-only SQL: the straggler's due time, as if its statement had
	// begun a minute before the receipt the router consumed.
	if _, err := f.db.ExecContext(f.ctx, "UPDATE ingress_receipt SET next_attempt_at = DATE_SUB(next_attempt_at, INTERVAL 1 MINUTE) WHERE receipt_id = ?", late.Receipt.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil || n != 0 {
		t.Fatalf("a scan from the floor claimed %d (%v): the straggler lies behind it and must not be read", n, err)
	}
	f.run(r)
	f.waitStatus(late.Receipt.ID, ingress.StatusMaterialized)
	if got := f.receipt(first.Receipt.ID); got.Attempts != 1 {
		t.Fatalf("first receipt claimed %d times", got.Attempts)
	}
}

// TestTwoRoutersShareAClass: two routers (as two processes would, by
// owner) drain one class at once, racing for every claim: each receipt is
// materialized exactly once, with its own events, and no claim is lost.
func TestTwoRoutersShareAClass(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const receipts = 300
	ids := make([]int64, receipts)
	for i := range ids {
		ids[i] = f.accept(delivery(fmt.Sprintf("shared-%d", i), "", fmt.Sprintf("s%d-a", i), fmt.Sprintf("s%d-b", i))).Receipt.ID
	}
	a := f.router(ingress.RouterConfig{Owner: "a", BatchReceipts: 8})
	b := f.router(ingress.RouterConfig{Owner: "b", BatchReceipts: 8})
	stopA, stopB := f.run(a), f.run(b)
	for _, id := range ids {
		got := f.waitStatus(id, ingress.StatusMaterialized)
		if got.Attempts != 1 || got.ClaimToken != 1 || len(got.EventIDs) != 2 {
			t.Fatalf("receipt %d: attempts %d, token %d, events %v", id, got.Attempts, got.ClaimToken, got.EventIDs)
		}
	}
	if n := f.count("SELECT COUNT(*) FROM event"); n != 2*receipts {
		t.Fatalf("%d events, want %d", n, 2*receipts)
	}
	stopA() // their counters move after the commits the rows show
	stopB()
	sa, sb := a.Stats(), b.Stats()
	if sa.Materialized+sb.Materialized != receipts || sa.LeaseLost+sb.LeaseLost != 0 || sa.Claimed+sb.Claimed != receipts {
		t.Fatalf("stats a %+v, b %+v", sa, sb)
	}
	t.Logf("router a materialized %d, router b %d", sa.Materialized, sb.Materialized)
}

// TestBatchesAreBoundedByEvents: receipts go into one materializing
// transaction until the next would cross BatchEvents; a receipt with more
// events than the bound goes alone; order is acceptance order.
func TestBatchesAreBoundedByEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	facts := func(prefix string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%d", prefix, i)
		}
		return out
	}
	var ids []int64
	for _, d := range []struct {
		id     string
		events int
	}{{"r1", 3}, {"r2", 3}, {"big", 12}, {"r4", 3}, {"r5", 2}} {
		ids = append(ids, f.accept(delivery(d.id, "", facts(d.id, d.events)...)).Receipt.ID)
	}
	r := f.router(ingress.RouterConfig{BatchEvents: 6})
	if n, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil || n != len(ids) {
		t.Fatalf("turn: claimed %d, %v", n, err)
	}
	// [r1 r2] (6), [big] (12, alone), [r4 r5] (5): three transactions.
	if st := r.Stats(); st.Transactions != 3 || st.Materialized != 5 || st.Events != 23 {
		t.Fatalf("stats %+v, want 5 receipts with 23 events in 3 transactions", st)
	}
	var at []time.Time
	for _, id := range ids {
		at = append(at, f.receipt(id).MaterializedAt)
	}
	if !at[0].Equal(at[1]) || at[1].Equal(at[2]) || at[2].Equal(at[3]) || !at[3].Equal(at[4]) || !at[1].Before(at[2]) || !at[2].Before(at[3]) {
		t.Fatalf("materialized at %v: want [r1 r2] then [big] then [r4 r5]", at)
	}
}

// TestFailedClaimKeepsTheFloor: a claim whose CAS fails (a deadlock, a
// dropped connection) took nothing, so the scan floor stays where it was:
// the next turn claims every candidate again, the oldest included, with
// no scan from the front (Turn alone never makes one). Had the failed
// claim moved the floor to just behind its newest candidate, the older
// one would wait for the class's next front scan.
func TestFailedClaimKeepsTheFloor(t *testing.T) {
	t.Parallel()
	for _, fault := range []faultdb.Fault{faultdb.Deadlock, faultdb.DropBefore} {
		t.Run(fault.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			in, faults := f.faultyInbox()
			older := f.accept(delivery("older", "", "o1"))
			newer := f.accept(delivery("newer", "", "n1"))
			// Test-only SQL: the older receipt due a minute before the
			// newer, far behind a floor set from the newer one.
			if _, err := f.db.ExecContext(f.ctx, "UPDATE ingress_receipt SET next_attempt_at = DATE_SUB(next_attempt_at, INTERVAL 1 MINUTE) WHERE receipt_id = ?", older.Receipt.ID); err != nil {
				t.Fatal(err)
			}
			faults.Add(faultdb.Rule{Statement: "ClaimReceipts", Fault: fault})
			r := f.routerOn(in, f.qu, ingress.RouterConfig{})
			if n, err := r.Turn(f.ctx, ingress.DefaultClass); err == nil || n != 0 {
				t.Fatalf("turn with a failing claim: claimed %d, err %v; want the injected error", n, err)
			}
			if faults.Fired("ClaimReceipts") != 1 {
				t.Fatalf("the claim fault fired %d times", faults.Fired("ClaimReceipts"))
			}
			if n, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil || n != 2 {
				t.Fatalf("turn after the failed claim: claimed %d, err %v; want both receipts", n, err)
			}
			for _, acc := range []ingress.Accepted{older, newer} {
				if got := f.receipt(acc.Receipt.ID); got.Status != ingress.StatusMaterialized || got.Attempts != 1 {
					t.Fatalf("receipt %s: %s after %d attempts, want materialized after 1", got.DeliveryID, got.Status, got.Attempts)
				}
			}
		})
	}
}

// TestRoutePanicFailsOnlyItsReceipt: a RouteFunc that panics on one
// receipt is a bug in the route, not in the delivery's timing: the router
// recovers, fails that receipt at once (class route_panic, the panic value
// as the summary, no stack in the row; the stack goes to the log), routes
// the others, and keeps running: the process survives, and a receipt
// accepted afterwards is materialized by the same router.
func TestRoutePanicFailsOnlyItsReceipt(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var logs syncBuffer
	r := f.router(ingress.RouterConfig{
		Backstop: time.Hour,
		Logger:   slog.New(slog.NewTextHandler(&logs, nil)),
		Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
			if c.DeliveryID == "bomb" {
				var m map[string]int
				m["boom"]++ // a route's bug: a nil map
			}
			return routeFacts(ctx, c)
		},
	})
	before := f.accept(delivery("before", "", "b1"))
	bomb := f.accept(delivery("bomb", "", "x1"))
	after := f.accept(delivery("after", "", "a1"))
	f.run(r)
	f.waitStatus(before.Receipt.ID, ingress.StatusMaterialized)
	f.waitStatus(after.Receipt.ID, ingress.StatusMaterialized)
	got := f.waitStatus(bomb.Receipt.ID, ingress.StatusFailed)
	if got.Attempts != 1 || got.LastErrorClass != "route_panic" || !strings.Contains(got.LastErrorSummary, "assignment to entry in nil map") ||
		strings.Contains(got.LastErrorSummary, "goroutine") || len(f.eventsOf(bomb.Receipt.ID)) != 0 {
		t.Fatalf("panicking receipt: attempts %d, %q: %q, %d events; want failed at once as route_panic with the panic value and no stack",
			got.Attempts, got.LastErrorClass, got.LastErrorSummary, len(f.eventsOf(bomb.Receipt.ID)))
	}
	// Still running: a receipt accepted now wakes it and is materialized.
	later := f.accept(delivery("later", "", "l1"))
	f.waitStatus(later.Receipt.ID, ingress.StatusMaterialized)
	if out := logs.String(); !strings.Contains(out, "route_panic") || !strings.Contains(out, "goroutine") {
		t.Fatalf("log %q: want the panic and its stack", out)
	}
}

// syncBuffer is a bytes.Buffer the router's loops may log to while the
// test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestBackstopRunsOnTheRoutersClock: an idle class probes on
// RouterConfig.Clock; a receipt accepted by another process (an Inbox this
// router does not listen to) waits, unread, until that clock reaches the
// backstop, and is routed once it does. With a fake clock nothing here
// waits for wall time to pass.
func TestBackstopRunsOnTheRoutersClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	fake := clock.NewFake(time.Now())
	r := f.router(ingress.RouterConfig{Backstop: time.Minute, Clock: fake})
	f.run(r)
	f.settle(r)
	if !fake.WaitArmed(fake.Now().Add(time.Minute), time.Minute) {
		t.Fatal("the router did not arm its backstop on its clock")
	}
	other, err := ingress.New(f.db, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := other.Accept(f.ctx, delivery("elsewhere", "", "e1"))
	if err != nil {
		t.Fatal(err)
	}
	// The loop sleeps on the fake clock and nothing wakes it: the receipt
	// stays pending however long the wall clock runs.
	if got := f.receipt(a.Receipt.ID); got.Status != ingress.StatusPending {
		t.Fatalf("receipt %s before the backstop, want pending", got.Status)
	}
	fake.Advance(time.Minute)
	f.waitStatus(a.Receipt.ID, ingress.StatusMaterialized)
}

// TestIdleRouterCostsOneProbePerBackstop: an idle class sends one
// statement per Backstop, its probe (the heads of its claim ranges), and
// claims nothing while they do not change: two classes idle for ten
// backstops cost twenty probes. Counted from the driver side, on the
// router's fake clock.
func TestIdleRouterCostsOneProbePerBackstop(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	db, counter, err := sqlcount.Open(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	in, err := ingress.NewFromQueue(qu, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.Now())
	r := f.routerOn(in, qu, ingress.RouterConfig{Classes: []string{"a", "b"}, Backstop: time.Minute, Clock: fake})
	f.run(r)
	f.settle(r) // past start-up
	before := counter.ByStatement()
	const backstops = 10
	for range backstops {
		if !fake.WaitArmed(fake.Now().Add(time.Minute), time.Minute) {
			t.Fatal("no probe armed a backstop ahead")
		}
		fake.Advance(time.Minute)
		f.settle(r)
	}
	if diff := cmp.Diff(map[string]int64{"ReceiptCandidates": 2 * backstops}, counter.Since(before)); diff != "" {
		t.Fatalf("statements of two idle classes over %d backstops (-want +got):\n%s", backstops, diff)
	}
}

// TestLeaseExpiringDuringATurnIsReclaimed: a dead router's lease that runs
// out while this router's turn is in progress (after its scan read the
// lease live, before its next-work lookup) is claimable at once, and
// nobody announces it. The lookup after the turn looks back to the turn's
// start and finds it; the router's probe is an hour away, so nothing else
// can.
func TestLeaseExpiringDuringATurnIsReclaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	abandoned := f.accept(delivery("abandoned", "", "b1"))
	// A router that claims the receipt and then hangs: its lease, 2s,
	// runs out with nothing routed.
	hung, cancelHung := context.WithCancel(f.ctx)
	defer cancelHung()
	dead := f.router(ingress.RouterConfig{Owner: "dead", Lease: 2 * time.Second, Route: func(ctx context.Context, _ ingress.Claimed) ([]workqueue.Event, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}})
	go func() { _, _ = dead.Turn(hung, ingress.DefaultClass) }()
	f.waitStatus(abandoned.Receipt.ID, ingress.StatusRouting)

	// This router's first turn scans while that lease is live and routes a
	// receipt until the lease has run out.
	held := f.accept(delivery("held", "", "h1"))
	expired := func() bool {
		var n int
		if err := f.db.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM ingress_receipt WHERE receipt_id = ? AND next_attempt_at < NOW(6)", abandoned.Receipt.ID).Scan(&n); err != nil {
			t.Error(err)
			return true
		}
		return n == 1
	}
	r := f.router(ingress.RouterConfig{Owner: "alive", Backstop: time.Hour, QuietBackstop: time.Hour, Route: func(ctx context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
		if c.ID == held.Receipt.ID {
			deadline := time.Now().Add(time.Minute)
			for !expired() && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
		return routeFacts(ctx, c)
	}})
	f.run(r)
	f.waitStatus(held.Receipt.ID, ingress.StatusMaterialized)
	got := f.waitStatus(abandoned.Receipt.ID, ingress.StatusMaterialized)
	if got.Attempts != 2 || got.ClaimOwner != "alive/default" {
		t.Fatalf("abandoned receipt: %d attempts, owner %q; want taken over by alive on its second claim", got.Attempts, got.ClaimOwner)
	}
	if st := r.Stats(); st.Turns != 2 {
		t.Fatalf("router stats %+v: want two turns, the first and the one the look-back caused", st)
	}
}
