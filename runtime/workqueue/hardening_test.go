package workqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestKeysDifferingByATrailingSpaceAreDistinct: TiDB's utf8mb4_bin and
// ascii_bin collations are PAD SPACE ('k' = 'k '); laneq's keys use a NO PAD
// binary collation, so idempotency keys, lanes and scopes that differ by a
// trailing space stay apart.
func TestKeysDifferingByATrailingSpaceAreDistinct(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	evs, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{
		{IdempotencyKey: "k", Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "L"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	again, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{
		{IdempotencyKey: "k ", Work: []workqueue.Work{{WorkType: "deliver", SourceLane: "L "}}},
	})
	if err != nil {
		t.Fatalf("enqueue of key %q after %q: %v", "k ", "k", err)
	}
	if again[0].Duplicate || again[0].EventID == evs[0].EventID {
		t.Fatalf("key %q was taken for a duplicate of %q: %+v", "k ", "k", again[0])
	}
	// Lane "L " is not lane "L": both items head their own lane.
	if got := again[0].Work[0].State; got != workqueue.StatePending {
		t.Fatalf("the item in lane %q is %s behind lane %q's head", "L ", got, "L")
	}
	if got := f.claim(f.claimer("w"), workqueue.ClaimRequest{}); len(got) != 2 {
		t.Fatalf("claimed %v, want both lane heads", ids(got))
	}
	// Scopes "t" and "t " are two scopes with their own counters.
	for _, s := range []string{"t", "t "} {
		if err := f.qu.EnsureScope(f.ctx, s, 1); err != nil {
			t.Fatal(err)
		}
		if _, err := f.qu.Enqueue(f.ctx, s, []workqueue.Event{{IdempotencyKey: "same", Work: []workqueue.Work{{WorkType: "deliver"}}}}); err != nil {
			t.Fatalf("scope %q: %v", s, err)
		}
	}
	var scopes, events int
	if err := f.db.QueryRow("SELECT (SELECT COUNT(*) FROM scope WHERE scope_id IN ('t', 't ')), (SELECT COUNT(*) FROM event WHERE idempotency_key = 'same')").Scan(&scopes, &events); err != nil {
		t.Fatal(err)
	}
	if scopes != 2 || events != 2 {
		t.Fatalf("%d scope rows and %d events for scopes %q and %q, want 2 and 2", scopes, events, "t", "t ")
	}
}

// TestNewRefusesSessionsItCannotTrust: each connection setting laneq relies
// on, when wrong, makes New fail with a *SessionError naming it. A session
// in another time zone would see every due time and lease off by its offset.
func TestNewRefusesSessionsItCannotTrust(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	for _, tc := range []struct {
		setting string
		edit    func(*mysql.Config)
	}{
		{"time_zone", func(c *mysql.Config) { c.Params["time_zone"] = "'-05:00'" }},
		{"time_zone", func(c *mysql.Config) { c.Params["time_zone"] = "'Europe/London'" }},
		{"loc", func(c *mysql.Config) { c.Loc = tokyo(t) }},
		{"parseTime", func(c *mysql.Config) { c.ParseTime = false }},
		{"clientFoundRows", func(c *mysql.Config) { c.ClientFoundRows = false }},
		{"tidb_txn_mode", func(c *mysql.Config) { c.Params["tidb_txn_mode"] = "'optimistic'" }},
		{"innodb_lock_wait_timeout", func(c *mysql.Config) { c.Params["innodb_lock_wait_timeout"] = "50" }}, // TiDB's default, above WriteTimeout
	} {
		cfg, err := mysql.ParseDSN(f.dsn)
		if err != nil {
			t.Fatal(err)
		}
		tc.edit(cfg)
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			t.Fatal(err)
		}
		_, err = workqueue.New(db, workqueue.Config{})
		db.Close()
		var se *workqueue.SessionError
		if !errors.As(err, &se) || se.Setting != tc.setting || !errors.Is(err, workqueue.ErrSessionSettings) {
			t.Errorf("%s: New returned %v, want a *SessionError for %s", cfg.FormatDSN(), err, tc.setting)
		}
	}
	// A WriteTimeout at or below the session's lock wait (5s here) is
	// refused too, with a lock wait that fits it.
	_, err := workqueue.New(f.db, workqueue.Config{WriteTimeout: 3 * time.Second})
	var se *workqueue.SessionError
	if !errors.As(err, &se) || se.Setting != "innodb_lock_wait_timeout" || !strings.Contains(se.Want, "innodb_lock_wait_timeout=1") {
		t.Errorf("New with WriteTimeout 3s on a 5s lock wait: %v, want a *SessionError asking for innodb_lock_wait_timeout=1", err)
	}
	// The check writes nothing that stays.
	var n int
	if err := f.db.QueryRow("SELECT COUNT(*) FROM scope WHERE scope_id LIKE '%laneq-session-check'").Scan(&n); err != nil || n != 0 {
		t.Fatalf("session-check rows left behind: %d (%v)", n, err)
	}
}

func tokyo(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// faultFixture is a fixture whose Queue runs on a fault-injecting driver.
func faultFixture(t *testing.T, cfg workqueue.Config) (*fixture, *workqueue.Queue, *faultdb.Injector) {
	t.Helper()
	f := newFixture(t, cfg)
	db, in, err := faultdb.Open(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	qu, err := workqueue.New(db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, qu, in
}

func claimWith(t *testing.T, c *workqueue.Claimer, ctx context.Context, req workqueue.ClaimRequest) ([]workqueue.Claimed, workqueue.ClaimStats, error) {
	t.Helper()
	return c.Claim(ctx, withTestDefaults(req))
}

// TestClaimOutcomesUnderInjectedFaults: a claim CAS that TiDB answers with
// a deadlock or a lock-wait timeout committed nothing and says so; one whose
// reply is lost is resolved by reading back its reference; a read-back that
// fails is run again; a reclaim CAS that fails leaves the lease for the next
// scan. Nothing is stranded and nothing is claimed twice.
func TestClaimOutcomesUnderInjectedFaults(t *testing.T) {
	t.Parallel()
	f, qu, in := faultFixture(t, workqueue.Config{})
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	a := f.one(workqueue.Work{})
	for _, fault := range []faultdb.Fault{faultdb.Deadlock, faultdb.LockWaitTimeout} {
		in.Add(faultdb.Rule{Statement: "ClaimBatchCAS", Fault: fault})
		got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if !errors.Is(err, workqueue.ErrNothingCommitted) || len(got) != 0 {
			t.Fatalf("%s on the claim CAS: claimed %v, err %v; want nothing and ErrNothingCommitted", fault, ids(got), err)
		}
		if s := f.state(a); s != workqueue.StatePending {
			t.Fatalf("after %s: %s, want pending", fault, s)
		}
	}
	in.Add(faultdb.Rule{Statement: "ClaimBatchCAS", Fault: faultdb.ReplyLost})
	in.Add(faultdb.Rule{Statement: "ClaimedByRef", Fault: faultdb.DropBefore})
	got, stats, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
	if err != nil || len(got) != 1 || got[0].WorkID != a || stats.Resolved != 1 {
		t.Fatalf("lost CAS reply: claimed %v (stats %+v), err %v; want [%d] resolved by the read-back", ids(got), stats, err, a)
	}
	if in.Fired("ClaimBatchCAS") != 3 || in.Fired("ClaimedByRef") != 1 {
		t.Fatalf("faults fired: CAS %d, read-back %d", in.Fired("ClaimBatchCAS"), in.Fired("ClaimedByRef"))
	}
	if _, err := qu.Complete(f.ctx, got[0].Lease); err != nil {
		t.Fatalf("complete the resolved claim: %v", err)
	}

	// A reclaim CAS answered with a deadlock leaves the lease expired for
	// the next scan, which takes it.
	b := f.one(workqueue.Work{})
	first, _, _ := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
	if len(first) != 1 || first[0].WorkID != b {
		t.Fatalf("claimed %v, want [%d]", ids(first), b)
	}
	f.expireLease(b)
	in.Add(faultdb.Rule{Statement: "ReclaimCAS", Fault: faultdb.Deadlock})
	if got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{StaleOnly: true}); err != nil || len(got) != 0 {
		t.Fatalf("deadlocked reclaim: %v, %v; want nothing and no error", ids(got), err)
	}
	got, _, err = claimWith(t, c, f.ctx, workqueue.ClaimRequest{StaleOnly: true})
	if err != nil || len(got) != 1 || got[0].WorkID != b || got[0].Attempt != 2 {
		t.Fatalf("reclaim after the deadlock: %+v, %v; want %d on attempt 2", got, err, b)
	}
}

// TestFinishRunsAgainAndResolvesLostReplies: a finish answered with a
// transient error is run again; one whose reply was lost after it committed
// is recognized by its token, not reported as a lost lease; the item is
// finished exactly once.
func TestFinishRunsAgainAndResolvesLostReplies(t *testing.T) {
	t.Parallel()
	f, qu, in := faultFixture(t, workqueue.Config{})
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		lane  string
		rules []faultdb.Rule
	}{
		{"deadlock on the autocommit finish", "", []faultdb.Rule{{Statement: "Finish", Fault: faultdb.Deadlock}}},
		{"lock wait timeout twice", "", []faultdb.Rule{{Statement: "Finish", Fault: faultdb.LockWaitTimeout, Times: 2}}},
		{"lost reply of the autocommit finish", "", []faultdb.Rule{{Statement: "Finish", Fault: faultdb.ReplyLost}}},
		{"deadlock inside the lane transaction", "lane-a", []faultdb.Rule{{Statement: "NextBlockedInSourceLane", Fault: faultdb.Deadlock}}},
		{"lost reply of the lane transaction's commit", "lane-b", []faultdb.Rule{{Statement: "COMMIT", Fault: faultdb.ReplyLost}}},
	} {
		head := f.one(workqueue.Work{SourceLane: tc.lane})
		var follower int64
		if tc.lane != "" {
			follower = f.one(workqueue.Work{SourceLane: tc.lane})
		}
		got, _, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
		if err != nil || len(got) != 1 || got[0].WorkID != head {
			t.Fatalf("%s: claimed %v, %v", tc.name, ids(got), err)
		}
		for _, r := range tc.rules {
			in.Add(r)
		}
		fin, err := qu.Complete(f.ctx, got[0].Lease)
		if err != nil {
			t.Fatalf("%s: complete: %v", tc.name, err)
		}
		if s := f.state(head); s != workqueue.StateCompleted {
			t.Fatalf("%s: head is %s", tc.name, s)
		}
		if follower != 0 {
			if s := f.state(follower); s != workqueue.StatePending || (fin.Promoted != 1 && !fin.PromotionsUnknown) {
				t.Fatalf("%s: follower %s, finished %+v", tc.name, s, fin)
			}
			next, _, _ := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
			if len(next) != 1 || next[0].WorkID != follower {
				t.Fatalf("%s: claimed %v, want the follower", tc.name, ids(next))
			}
			f.complete(next[0])
		}
	}
	if st := qu.Stats(); st.WriteRetries < 5 {
		t.Fatalf("write retries counted %d, want at least 5", st.WriteRetries)
	}
	// A release whose reply is lost is recognized too.
	x := f.one(workqueue.Work{})
	got, _, _ := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
	in.Add(faultdb.Rule{Statement: "ReleaseLease", Fault: faultdb.ReplyLost})
	if len(got) != 1 || got[0].WorkID != x {
		t.Fatalf("claimed %v", ids(got))
	}
	if err := qu.Release(f.ctx, got[0].Lease); err != nil || f.state(x) != workqueue.StatePending {
		t.Fatalf("release with a lost reply: %v, state %s", err, f.state(x))
	}
}

// TestCancellationDuringTheClaimStrandsNothing: the caller's context ends
// while the claim CAS or its read-back runs (a shutdown mid-claim). The
// claim still learns what it won and returns it, so nothing is left
// processing under a reference no one holds.
func TestCancellationDuringTheClaimStrandsNothing(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"ClaimBatchCAS", "ClaimedByRef"} {
		f, qu, in := faultFixture(t, workqueue.Config{})
		c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
		if err != nil {
			t.Fatal(err)
		}
		var want []int64
		for range 4 {
			want = append(want, f.one(workqueue.Work{}))
		}
		ctx, cancel := context.WithCancel(f.ctx)
		in.Add(faultdb.Rule{Statement: at, Before: func(context.Context) { cancel() }})
		got, _, err := claimWith(t, c, ctx, workqueue.ClaimRequest{})
		if err != nil {
			t.Fatalf("cancelled at %s: %v", at, err)
		}
		if diff := cmp.Diff(want, ids(got)); diff != "" {
			t.Fatalf("cancelled at %s: claimed (-want +got):\n%s", at, diff)
		}
		for _, g := range got {
			if err := qu.Release(f.ctx, g.Lease); err != nil {
				t.Fatalf("cancelled at %s: the claim does not own %d: %v", at, g.WorkID, err)
			}
		}
	}
}

// TestGenerationMovedDuringTheClaimCAS: SetGeneration commits while a claim
// CAS that read the old generation is in flight. The CAS wins its rows, but
// the read-back sees the new generation and releases them unrun, with the
// attempt given back: no item of the old generation starts after
// SetGeneration returned.
func TestGenerationMovedDuringTheClaimCAS(t *testing.T) {
	t.Parallel()
	f, qu, in := faultFixture(t, workqueue.Config{})
	c, err := qu.NewClaimer(scope, "w", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	x, y := f.one(workqueue.Work{}), f.one(workqueue.Work{})
	in.Add(faultdb.Rule{Statement: "ClaimedByRef", Before: func(ctx context.Context) {
		if err := f.qu.SetGeneration(ctx, scope, 2); err != nil {
			t.Error(err)
		}
	}})
	got, stats, err := claimWith(t, c, f.ctx, workqueue.ClaimRequest{})
	if err != nil || len(got) != 0 || stats.Fenced != 2 {
		t.Fatalf("claimed %v (stats %+v), err %v; want nothing run and 2 fenced", ids(got), stats, err)
	}
	for _, id := range []int64{x, y} {
		var state string
		var attempts int
		if err := f.db.QueryRow("SELECT state, attempt_count FROM work_item WHERE work_id = ?", id).Scan(&state, &attempts); err != nil {
			t.Fatal(err)
		}
		if state != workqueue.StatePending || attempts != 0 {
			t.Fatalf("work %d: %s after %d attempts, want pending with the attempt given back", id, state, attempts)
		}
	}
}

// TestAttemptBudgetSendsRepeatedlyExpiredLeasesToDead: an item whose lease
// expires in every attempt (its process dies each time) is reclaimed until
// its budget is spent and then goes to dead through the finish path, which
// promotes its lane follower.
func TestAttemptBudgetSendsRepeatedlyExpiredLeasesToDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{MaxAttempts: 3})
	poison := f.one(workqueue.Work{SourceLane: "L"})
	follower := f.one(workqueue.Work{SourceLane: "L"})
	for attempt := 1; attempt <= 3; attempt++ {
		c := f.claimer(fmt.Sprintf("process-%d", attempt)) // each attempt's process is new
		got := f.claim(c, workqueue.ClaimRequest{})
		if len(got) != 1 || got[0].WorkID != poison || got[0].Attempt != int32(attempt) {
			t.Fatalf("attempt %d: claimed %+v", attempt, got)
		}
		f.expireLease(poison) // the process died holding it
	}
	c := f.claimer("process-4")
	got, stats, err := c.Claim(f.ctx, workqueue.ClaimRequest{QueueClasses: allClasses, WorkTypes: []string{"deliver"}, Max: 5})
	if err != nil {
		t.Fatal(err)
	}
	if stats.ExpiredToDead != 1 || len(got) != 0 {
		t.Fatalf("after the budget: claimed %v, stats %+v; want one item expired to dead", ids(got), stats)
	}
	// Its follower was promoted in the same transaction; it became
	// claimable after this claim's scan bound, so the next claim takes it
	// (a worker wakes itself for that claim).
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 1 || got[0].WorkID != follower {
		t.Fatalf("claimed %v, want the follower %d", ids(got), follower)
	}
	var state, class string
	var attempts int
	if err := f.db.QueryRow("SELECT state, failure_class, attempt_count FROM work_item WHERE work_id = ?", poison).Scan(&state, &class, &attempts); err != nil {
		t.Fatal(err)
	}
	if state != workqueue.StateDead || class != workqueue.FailureAttemptsExhausted || attempts != 3 {
		t.Fatalf("poison item: %s (%s) after %d attempts", state, class, attempts)
	}
}

// TestFailureOfTheLastAttemptIsDead: with the attempt budget spent, a safe
// retry is not offered.
func TestFailureOfTheLastAttemptIsDead(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{MaxAttempts: 2})
	x := f.one(workqueue.Work{})
	c := f.claimer("w")
	for attempt := 1; attempt <= 2; attempt++ {
		f.makeDue(x)
		got := f.claim(c, workqueue.ClaimRequest{})
		if len(got) != 1 {
			t.Fatalf("attempt %d: claimed %v", attempt, ids(got))
		}
		out, err := f.qu.Fail(f.ctx, got[0], workqueue.Failure{Class: "transient"}, errors.New("timeout"))
		if err != nil || out.Dead != (attempt == 2) {
			t.Fatalf("attempt %d: dead=%v err=%v", attempt, out.Dead, err)
		}
	}
}

// TestStaleReclaimTakesEveryServedClass: expired leases of every class the
// process serves come back through one claim of any executor shape, even
// one whose own classes are fewer (reclaim is liveness, not fresh work).
func TestStaleReclaimTakesEveryServedClass(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	var want []int64
	for _, class := range []string{"interactive", "default", "bulk", "interactive", "default", "bulk"} {
		want = append(want, f.one(workqueue.Work{QueueClass: class}))
	}
	dead := f.claim(f.claimer("dead"), workqueue.ClaimRequest{})
	if len(dead) != 6 {
		t.Fatalf("claimed %v", ids(dead))
	}
	for _, id := range want {
		f.expireLease(id)
	}
	c := f.claimer("survivor")
	got := f.claim(c, workqueue.ClaimRequest{QueueClasses: []string{"bulk"}, StaleClasses: allClasses, Max: 6})
	if diff := cmp.Diff(sorted(want), sorted(ids(got))); diff != "" {
		t.Fatalf("reclaimed (-want +got):\n%s", diff)
	}
	for _, g := range got {
		if !g.Reclaimed || g.Attempt != 2 {
			t.Fatalf("%+v, want a reclaim on attempt 2", g)
		}
	}
}

// TestNewRefusesPadSpaceTablesOfAPreReleaseSchema: a database migrated by a
// pre-release laneq (whose scope_id was ascii_bin, PAD SPACE) is refused
// instead of silently merging keys that differ by a trailing space.
func TestNewRefusesPadSpaceTablesOfAPreReleaseSchema(t *testing.T) {
	t.Parallel()
	// An empty database: the test builds a pre-release schema by hand.
	db, _ := tidbtest.NewEmptyDB(t)
	if _, err := db.Exec(`CREATE TABLE scope (
		scope_id VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
		active_generation BIGINT NOT NULL DEFAULT 1,
		next_enqueue_ordinal BIGINT NOT NULL DEFAULT 1,
		admitted_at DATETIME(6) NOT NULL DEFAULT '1970-01-01 00:00:00',
		created_at DATETIME(6) NOT NULL, updated_at DATETIME(6) NOT NULL,
		PRIMARY KEY (scope_id) CLUSTERED)`); err != nil {
		t.Fatal(err)
	}
	if _, err := workqueue.New(db, workqueue.Config{}); !errors.Is(err, workqueue.ErrPreReleaseSchema) {
		t.Fatalf("New on PAD SPACE tables: %v, want ErrPreReleaseSchema", err)
	}
}
