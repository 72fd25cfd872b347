package workqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/runtime/workqueue"
)

// appTable is a table of the caller's own, in the test's database.
func appTable(f *fixture) {
	f.t.Helper()
	f.exec("CREATE TABLE app_order (order_id BIGINT PRIMARY KEY, note VARCHAR(64) NOT NULL)")
}

func (f *fixture) count(query string, args ...any) int {
	f.t.Helper()
	var n int
	if err := f.db.QueryRow(query, args...).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func orderEvent(key string, lane string) workqueue.Event {
	return workqueue.Event{IdempotencyKey: key, Payload: []byte(key),
		Work: []workqueue.Work{{WorkType: "deliver", SourceLane: lane}}}
}

// TestTxCommitsCallersRowsAndWorkTogether: the caller's row and the work
// it causes appear together at the commit, not before, and the worker
// side hears of it once, after the commit; a rolled-back Tx leaves
// neither, and nobody hears of it.
func TestTxCommitsCallersRowsAndWorkTogether(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	appTable(f)
	var heard atomic.Int32
	stop := f.qu.OnAnnounce(func(a workqueue.Announcement) {
		if a.Scope == scope {
			heard.Add(1)
		}
	})
	defer stop()
	c := f.claimer("w")

	tx, err := f.qu.BeginTx(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.SQL().ExecContext(f.ctx, "INSERT INTO app_order VALUES (1, 'placed')"); err != nil {
		t.Fatal(err)
	}
	res, err := tx.Enqueue(f.ctx, scope, []workqueue.Event{orderEvent("order-1", "")})
	if err != nil {
		t.Fatal(err)
	}
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 0 || heard.Load() != 0 || f.count("SELECT COUNT(*) FROM app_order") != 0 {
		t.Fatalf("before the commit: claimed %v, heard %d times, %d orders visible", ids(got), heard.Load(), f.count("SELECT COUNT(*) FROM app_order"))
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if heard.Load() != 1 {
		t.Fatalf("heard %d times after one commit", heard.Load())
	}
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != res[0].Work[0].WorkID || f.count("SELECT COUNT(*) FROM app_order") != 1 {
		t.Fatalf("after the commit: claimed %v, want [%d]", ids(got), res[0].Work[0].WorkID)
	}
	if err := tx.Rollback(); !errors.Is(err, workqueue.ErrTxDone) {
		t.Fatalf("rollback after commit: %v", err)
	}
	if _, err := tx.Enqueue(f.ctx, scope, []workqueue.Event{orderEvent("order-x", "")}); !errors.Is(err, workqueue.ErrTxDone) {
		t.Fatalf("enqueue after commit: %v", err)
	}

	// Rolled back: nothing of it stays, nobody hears of it, and a work
	// kind it registered is registered again by the next enqueue.
	tx, err = f.qu.BeginTx(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.SQL().ExecContext(f.ctx, "INSERT INTO app_order VALUES (2, 'placed')"); err != nil {
		t.Fatal(err)
	}
	ev := orderEvent("order-2", "")
	ev.Work[0].QueueClass = "bulk"
	if _, err := tx.Enqueue(f.ctx, scope, []workqueue.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n := f.count("SELECT COUNT(*) FROM event WHERE idempotency_key = 'order-2'") + f.count("SELECT COUNT(*) FROM app_order WHERE order_id = 2"); n != 0 || heard.Load() != 1 {
		t.Fatalf("after the rollback: %d rows stayed, heard %d times", n, heard.Load())
	}
	if _, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if n := f.count("SELECT COUNT(*) FROM scope_work_kind WHERE scope_id = ? AND queue_class = 'bulk'", scope); n != 1 {
		t.Fatalf("bulk work kind registered %d times after the rolled-back one", n)
	}
	if heard.Load() != 2 {
		t.Fatalf("a plain Enqueue was heard %d times in all, want 2", heard.Load())
	}
	stop()
	f.one(workqueue.Work{})
	if heard.Load() != 2 {
		t.Fatal("a stopped listener was called")
	}
}

// TestTxSeesEnqueuesCommittedBeforeItLockedTheScope: a Tx that began (and
// read) before another enqueue into the same lane committed still puts its
// item behind that one. A transaction reading an older snapshot
// (REPEATABLE READ) would take its item for the lane's head.
func TestTxSeesEnqueuesCommittedBeforeItLockedTheScope(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	appTable(f)
	tx, err := f.qu.BeginTx(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if f.count("SELECT COUNT(*) FROM work_item") != 0 {
		t.Fatal("fixture not empty")
	}
	var before int
	if err := tx.SQL().QueryRowContext(f.ctx, "SELECT COUNT(*) FROM work_item WHERE scope_id = ?", scope).Scan(&before); err != nil {
		t.Fatal(err)
	}
	first, err := f.qu.Enqueue(f.ctx, scope, []workqueue.Event{orderEvent("first", "contact:1")})
	if err != nil {
		t.Fatal(err)
	}
	second, err := tx.Enqueue(f.ctx, scope, []workqueue.Event{orderEvent("second", "contact:1")})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if s := second[0].Work[0].State; s != workqueue.StateBlocked || f.state(second[0].Work[0].WorkID) != workqueue.StateBlocked {
		t.Fatalf("the Tx's item is %s (row %s), want blocked behind %d", s, f.state(second[0].Work[0].WorkID), first[0].Work[0].WorkID)
	}
	c := f.claim(f.claimer("w"), workqueue.ClaimRequest{})
	if len(c) != 1 || c[0].WorkID != first[0].Work[0].WorkID {
		t.Fatalf("claimed %v, want only the lane head %d", ids(c), first[0].Work[0].WorkID)
	}
}

// TestInTxRunsAgainOnlyWhatDidNotCommit: a deadlock or a lock wait
// timeout inside the transaction runs fn again from a clean slate (one
// order, one event in the end); a commit whose reply was lost is
// never run again and says ErrCommitUnknown; fn's own error ends it.
func TestInTxRunsAgainOnlyWhatDidNotCommit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		rule    faultdb.Rule
		runs    int
		wantErr error
	}{
		{"deadlock inside", faultdb.Rule{Statement: "InsertWorkItem", Fault: faultdb.Deadlock}, 2, nil},
		{"lock wait timeout on the scope lock", faultdb.Rule{Statement: "LockScopeForEnqueue", Fault: faultdb.LockWaitTimeout, Times: 2}, 3, nil},
		{"commit reply lost", faultdb.Rule{Statement: "COMMIT", Fault: faultdb.ReplyLost}, 1, workqueue.ErrCommitUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, qu, in := faultFixture(t, workqueue.Config{OnWriteRetry: func(string, int, error) {}})
			appTable(f)
			in.Add(tc.rule)
			runs := 0
			err := qu.InTx(f.ctx, func(ctx context.Context, tx *workqueue.Tx) error {
				runs++
				if _, err := tx.SQL().ExecContext(ctx, "INSERT INTO app_order VALUES (7, ?)", fmt.Sprint("run ", runs)); err != nil {
					return err
				}
				_, err := tx.Enqueue(ctx, scope, []workqueue.Event{orderEvent("order-7", "")})
				return err
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) || runs != tc.runs {
				t.Fatalf("err %v after %d runs; want %v after %d", err, runs, tc.wantErr, tc.runs)
			}
			if n := f.count("SELECT COUNT(*) FROM app_order") + f.count("SELECT COUNT(*) FROM event"); n != 2 {
				t.Fatalf("%d order and event rows, want one of each", n)
			}
		})
	}
	f := newFixture(t, workqueue.Config{})
	boom := errors.New("out of stock")
	runs := 0
	err := f.qu.InTx(f.ctx, func(ctx context.Context, tx *workqueue.Tx) error {
		runs++
		if _, err := tx.Enqueue(ctx, scope, []workqueue.Event{orderEvent("order-8", "")}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) || runs != 1 || f.count("SELECT COUNT(*) FROM event") != 0 {
		t.Fatalf("fn's own error: %v after %d runs, %d events", err, runs, f.count("SELECT COUNT(*) FROM event"))
	}
}
