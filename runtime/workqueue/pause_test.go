package workqueue_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestPausedFinisherDoesNotStallEnqueue: a process paused inside a finish
// transaction (a GC pause, SIGSTOP, a debugger) holds the lock on the lane
// follower it promotes. Enqueue locks the scope row, then the lane tail, so
// without a bound every enqueue of the scope waits for the paused process.
// The pause is a faultdb barrier before the finish's COMMIT, released only
// after the enqueue returned: with SessionDSN's idle-transaction timeout
// TiDB kills the paused session and the enqueue goes through; the control,
// the same pause on a session without the timeout, keeps the enqueue
// waiting until its own deadline. Afterwards nothing is lost or out of
// lane order: the finish is done again on the lease it still holds.
func TestPausedFinisherDoesNotStallEnqueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dsnTail string // appended to the fixture's DSN before SessionDSN
		timeout bool   // whether the paused session is killed
	}{
		{"default idle-transaction timeout", "", true},
		{"control: timeout off", "&tidb_idle_transaction_timeout=0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, workqueue.Config{})
			head := f.one(workqueue.Work{SourceLane: "L"})
			follower := f.one(workqueue.Work{SourceLane: "L"})

			dsn, err := workqueue.SessionDSN(f.dsn + tc.dsnTail)
			if err != nil {
				t.Fatal(err)
			}
			db, in, err := faultdb.Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			paused, err := workqueue.New(db, workqueue.Config{})
			if err != nil {
				t.Fatal(err)
			}
			c, err := paused.NewClaimer(scope, "paused", workqueue.ClaimerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			got, _, err := c.Claim(f.ctx, withTestDefaults(workqueue.ClaimRequest{}))
			if err != nil || len(got) != 1 || got[0].WorkID != head {
				t.Fatalf("claim: %v, %v; want the lane head %d", ids(got), err, head)
			}

			atCommit, release := make(chan struct{}), make(chan struct{})
			in.Add(faultdb.Rule{Statement: "COMMIT", Before: func(context.Context) {
				close(atCommit)
				<-release
			}})
			finished := make(chan error, 1)
			go func() {
				_, err := paused.Complete(f.ctx, got[0].Lease)
				finished <- err
			}()
			<-atCommit // the finish holds its locks and sends nothing more
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()

			// The enqueue's runs end in lock-wait timeouts while the finisher
			// holds the lane tail; the control allows two of them, and
			// cannot succeed however fast or slow the machine is.
			enqueuer := f.qu
			if !tc.timeout {
				if enqueuer, err = workqueue.New(f.db, workqueue.Config{TxAttempts: 2}); err != nil {
					t.Fatal(err)
				}
			}
			_, err = enqueuer.Enqueue(f.ctx, scope, []workqueue.Event{{
				IdempotencyKey: "behind-the-pause",
				Work:           []workqueue.Work{{WorkType: "deliver", SourceLane: "L"}},
			}})
			select {
			case err := <-finished:
				t.Fatalf("the paused finish returned (%v) before it was released", err)
			default:
			}
			if !tc.timeout {
				if err == nil {
					t.Fatal("enqueue went through behind a paused finisher whose session has no idle-transaction timeout: the test cannot tell the timeout's effect")
				}
				t.Logf("control: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("enqueue behind a paused finisher: %v", err)
			}

			close(release)
			if err := <-finished; err != nil {
				// The session was killed under the COMMIT: unknown outcome to
				// the caller, who finishes again on the lease it holds.
				t.Logf("finish after the pause: %v", err)
				if _, err := paused.Complete(f.ctx, got[0].Lease); err != nil {
					t.Fatalf("finishing again on the same lease: %v", err)
				}
			}
			want := map[int64]string{head: "completed", follower: "pending"}
			for id, state := range want {
				if s := f.state(id); s != state {
					t.Errorf("item %d is %s, want %s", id, s, state)
				}
			}
			var newest string
			if err := f.db.QueryRow("SELECT state FROM work_item WHERE source_lane_key = 'L' ORDER BY lane_ordinal DESC LIMIT 1").Scan(&newest); err != nil {
				t.Fatal(err)
			}
			if newest != "blocked" {
				t.Errorf("the item enqueued behind the pause is %s, want blocked behind the follower", newest)
			}
		})
	}
}

// TestAbandonedLockWaitKeepsItsLocks is why New refuses a lock-wait
// timeout that is not below WriteTimeout: go-sql-driver gives a statement
// up by closing its connection, and TiDB's session, waiting for a lock,
// keeps every lock its transaction took until that wait ends. Here an
// enqueue-shaped transaction (scope row, then a lane tail another
// transaction holds) is given up after its context ends; the scope row
// stays locked until the lane tail is released.
func TestAbandonedLockWaitKeepsItsLocks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	tail := f.one(workqueue.Work{SourceLane: "L"})
	ctx := f.ctx

	blocker, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback() //nolint:errcheck // released below
	if _, err := blocker.ExecContext(ctx, "SELECT work_id FROM work_item WHERE work_id = ? FOR UPDATE", tail); err != nil {
		t.Fatal(err)
	}

	// The abandoned write, on a session with TiDB's default lock wait.
	tx := beginWithLockWait(t, f, 50)
	if err := lockScopeRow(ctx, tx); err != nil {
		t.Fatal(err)
	}
	waitCtx, cancel := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := tx.ExecContext(waitCtx, "SELECT work_id FROM work_item WHERE work_id = ? FOR UPDATE", tail)
		waited <- err
	}()
	waitForLockWait(t, f.db)
	cancel() // the client gives the statement up: the driver closes the connection
	if err := <-waited; err == nil {
		t.Fatal("the lock wait returned without the lock")
	}

	probe := func(lockWait int) error { return lockScopeRow(ctx, beginWithLockWait(t, f, lockWait)) }
	if err := probe(1); mysqlErrno(err) != 1205 {
		t.Fatalf("scope row after its holder's client gave up: %v, want still locked (1205)", err)
	}
	if err := blocker.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := probe(20); err != nil {
		t.Fatalf("scope row once the lane tail was released: %v, want free", err)
	}
}

// beginWithLockWait begins a transaction on a pool of its own whose
// sessions wait lockWait seconds for a lock; the test's end rolls it back.
func beginWithLockWait(t *testing.T, f *fixture, lockWait int) *sql.Tx {
	t.Helper()
	db, err := sql.Open("mysql", fmt.Sprintf("%s&innodb_lock_wait_timeout=%d", f.dsn, lockWait))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	tx, err := db.BeginTx(f.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback() })
	return tx
}

// lockScopeRow takes the scope row's lock as enqueue does first.
func lockScopeRow(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "SELECT scope_id FROM scope WHERE scope_id = ? FOR UPDATE", scope)
	return err
}

// waitForLockWait returns once a transaction waits for a lock on a row of
// db's database (queuetest.LockWaits), polling; no deadline but the
// test's.
func waitForLockWait(t *testing.T, db *sql.DB) {
	t.Helper()
	for {
		n, err := queuetest.LockWaits(context.Background(), db, "")
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
