package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// Tx is a database transaction in which a caller commits its own rows and
// the work they cause atomically (transactional enqueue). laneq begins it
// pessimistic READ COMMITTED: enqueue settles lanes with reads that must
// see every enqueue committed before it took the scope lock, which a
// snapshot taken earlier (REPEATABLE READ) would not, and a lane's order
// would break. That is why it takes no transaction of the caller's
// making: the caller's statements run on SQL().
//
// A Tx is not safe for concurrent use. Enqueue locks the scope row until
// the transaction ends, so other enqueues into that scope wait for it:
// enqueue last, just before Commit.
type Tx struct {
	qu *Queue
	tx *sql.Tx
	q  *gen.Queries

	kinds  []workKind      // registered inside the transaction; remembered after the commit
	scopes map[string]bool // scopes that got work (true: some of it delayed): announced after the commit
	wakes  []satisfiedWake // satisfied keys whose waiters are woken after the commit
	done   bool
}

// BeginTx begins a Tx.
func (qu *Queue) BeginTx(ctx context.Context) (*Tx, error) {
	tx, err := qu.db.BeginTx(ctx, readCommitted)
	if err != nil {
		return nil, fmt.Errorf("workqueue: begin transaction: %w", err)
	}
	return &Tx{qu: qu, tx: tx, q: qu.inTxQueries(tx), scopes: map[string]bool{}}, nil
}

// SQL is the transaction itself, for the caller's own statements.
func (t *Tx) SQL() *sql.Tx { return t.tx }

// ErrTxDone reports a Tx used after Commit or Rollback.
var ErrTxDone = errors.New("workqueue: transaction already committed or rolled back")

// Enqueue is Queue.Enqueue inside the transaction: claimers see nothing of
// it before Commit, and Rollback (or a failed Commit) leaves nothing. It
// is run once: a transient error (deadlock, lock wait timeout) is
// returned, and the caller rolls back and runs the whole transaction again
// (Queue.InTx does).
func (t *Tx) Enqueue(ctx context.Context, scope string, events []Event) ([]EnqueuedEvent, error) {
	if t.done {
		return nil, ErrTxDone
	}
	if err := t.qu.validateEnqueue(scope, events); err != nil {
		return nil, err
	}
	kinds := t.qu.newKinds(scope, events)
	out, err := enqueueTx(ctx, t.q, t.tx, scope, events, kinds)
	if err != nil {
		return nil, enqueueError(err)
	}
	t.kinds = append(t.kinds, kinds...)
	if createdWork(out) {
		t.scopes[scope] = t.scopes[scope] || delayed(events)
	}
	return out, nil
}

// Commit commits the transaction; then every scope that got work is
// announced (see Announcement), and the waiters of the dependencies it
// satisfied are woken (see Tx.Satisfy). A wake that fails after the
// commit is not the commit's failure: Commit returns nil, the dependency
// safety pass wakes those waiters, and QueueStats.DeferredWakes counts it.
func (t *Tx) Commit() error {
	if t.done {
		return ErrTxDone
	}
	t.done = true
	if err := t.tx.Commit(); err != nil {
		return fmt.Errorf("workqueue: commit: %w", err)
	}
	t.qu.rememberKinds(t.kinds)
	for scope, delayed := range t.scopes {
		t.qu.announce(scope, delayed)
	}
	for _, w := range t.wakes {
		if _, err := t.qu.wakeWaiters(context.Background(), w.scope, w.wakeKey); err != nil {
			t.qu.deferredWakes.Add(1)
		}
	}
	return nil
}

// Rollback abandons the transaction: nothing it wrote stays. Calling it
// after Commit does nothing and returns ErrTxDone, so `defer tx.Rollback()`
// is safe.
func (t *Tx) Rollback() error {
	if t.done {
		return ErrTxDone
	}
	t.done = true
	if err := t.tx.Rollback(); err != nil {
		return fmt.Errorf("workqueue: rollback: %w", err)
	}
	return nil
}

// InTx runs fn in a Tx and commits it. When fn fails with a transient
// error (a deadlock, a lock wait timeout, a write conflict, a lost
// connection), or TiDB rejects the commit with one, nothing committed: it
// rolls back and runs fn again in a new Tx, up to Config.TxAttempts runs
// with backoff, so fn must do nothing outside the transaction that cannot
// run twice. A commit whose reply was lost is never run again (the
// caller's rows may have committed): that error wraps ErrCommitUnknown.
// Other errors end it at once. ctx bounds everything, retries included.
func (qu *Queue) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	for attempt := 1; ; attempt++ {
		retryable, err := qu.runInTx(ctx, fn)
		if err == nil || !retryable || attempt >= qu.cfg.TxAttempts || ctx.Err() != nil {
			return err
		}
		qu.writeRetries.Add(1)
		qu.cfg.OnWriteRetry("transaction", attempt, err)
		if sleepCtx(ctx, writeBackoff.Next(attempt)) != nil {
			return err
		}
	}
}

// ErrCommitUnknown reports a commit whose outcome was not learned (the
// connection failed while it ran): the transaction may have committed.
var ErrCommitUnknown = errors.New("workqueue: commit outcome unknown")

// runInTx is one run of InTx: whether running fn again is safe and worth
// it, and the error.
func (qu *Queue) runInTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) (retryable bool, err error) {
	tx, err := qu.BeginTx(ctx)
	if err != nil {
		return transient(err), err
	}
	defer func() { _ = tx.Rollback() }()
	if err := fn(ctx, tx); err != nil {
		return transient(err), err // not committed: the rollback undoes it
	}
	if err := tx.Commit(); err != nil {
		if !serverRejected(err) {
			return false, fmt.Errorf("%w: %w", ErrCommitUnknown, err)
		}
		return transient(err), err
	}
	return false, nil
}

// delayed reports whether any of the events' work has a Delay.
func delayed(events []Event) bool {
	for _, ev := range events {
		for _, w := range ev.Work {
			if w.Delay > 0 {
				return true
			}
		}
	}
	return false
}

// createdWork reports whether an enqueue wrote any work item.
func createdWork(out []EnqueuedEvent) bool {
	for _, ev := range out {
		for _, w := range ev.Work {
			if w.Created {
				return true
			}
		}
	}
	return false
}

// enqueueError maps a duplicate key: Enqueue's own duplicates are found
// under the scope lock before any insert, so one here means another writer
// bypassed it.
func enqueueError(err error) error {
	if store.Errno(err) == errDuplicateEntry {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}
