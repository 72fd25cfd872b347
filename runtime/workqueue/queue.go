// Package workqueue is laneq's work-item lifecycle over the generated catalog:
// enqueue (immutable event + work items, idempotent), row-CAS claims fenced by
// lease tokens, lane heads, lease renew/release/retry/finish, and the due-time
// reads a controller needs.
//
// Authority and clocks. The work_item row is the only execution authority: a
// claim is a primary-key compare-and-swap that succeeds only while the row is
// still a pending, due lane head of the active generation, and it issues a
// new lease token that every later call of the holder presents. Lease expiry and due
// times are compared with the database's NOW(6) only, never a host clock, so a
// host whose clock is skewed cannot steal a live lease or run work early.
//
// Lanes. An item may belong to a source lane and a target lane. It may run
// only when no earlier live item exists in either lane of its generation. The
// queue keeps that as a stored fact: lane heads are pending, followers are
// blocked, and finishing an item promotes the next follower of each of its
// lanes in the same transaction. Claims therefore never probe lanes.
package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// Work-item states as stored in work_item.state.
const (
	StatePending           = "pending"
	StateBlocked           = "blocked"
	StateProcessing        = "processing"
	StateWaitingDependency = "waiting_dependency"
	StateCompleted         = "completed"
	StateSkipped           = "skipped"
	StateDead              = "dead"
)

// Config configures a Queue. Zero fields take the documented defaults.
type Config struct {
	// Lease is how long a claim owns an item before it may be reclaimed,
	// unless renewed. Default 30s.
	Lease time.Duration
	// Retry is the safe-retry backoff policy. Default DefaultRetryPolicy.
	Retry RetryPolicy
	// MaxEnqueueBatch bounds the events of one Enqueue call (one transaction).
	// Default 1000.
	MaxEnqueueBatch int
	// TxAttempts bounds how often a transaction is re-run after TiDB aborted
	// it to break a deadlock or a lock wait timed out. Default 5.
	TxAttempts int
}

func (c Config) withDefaults() (Config, error) {
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	if c.Retry == (RetryPolicy{}) {
		c.Retry = DefaultRetryPolicy
	}
	if c.MaxEnqueueBatch == 0 {
		c.MaxEnqueueBatch = 1000
	}
	if c.TxAttempts == 0 {
		c.TxAttempts = 5
	}
	switch {
	case c.Lease < time.Millisecond:
		return c, invalidf("Lease must be at least 1ms, got %s", c.Lease)
	case c.MaxEnqueueBatch < 1:
		return c, invalidf("MaxEnqueueBatch must be positive, got %d", c.MaxEnqueueBatch)
	case c.TxAttempts < 1:
		return c, invalidf("TxAttempts must be positive, got %d", c.TxAttempts)
	}
	if err := c.Retry.validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Queue runs the work-item lifecycle on one database. It is safe for
// concurrent use; it holds no per-scope state (see Claimer for that).
type Queue struct {
	db  *sql.DB
	q   *gen.Queries
	cfg Config
}

// ErrOptimisticMode reports sessions in TiDB's optimistic transaction mode,
// where READ COMMITTED silently becomes REPEATABLE READ and a finishing
// transaction could miss a concurrent finisher's commit.
var ErrOptimisticMode = errors.New("workqueue: TiDB sessions must use pessimistic transactions (tidb_txn_mode)")

// New returns a Queue on db, which must carry laneq's connection settings
// (parseTime, clientFoundRows, UTC session time zone; see internal/tidbenv)
// and pessimistic transactions (TiDB's default; checked here).
func New(db *sql.DB, cfg Config) (*Queue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	qu := &Queue{db: db, q: gen.New(db), cfg: cfg}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	mode, err := qu.q.TxnMode(ctx)
	if err != nil {
		return nil, fmt.Errorf("workqueue: read tidb_txn_mode: %w", err)
	}
	if m := fmt.Sprintf("%s", mode); m == "optimistic" {
		return nil, fmt.Errorf("%w: the session reports %q", ErrOptimisticMode, m)
	}
	return qu, nil
}

// EnsureScope creates the scope with the given active generation if it does
// not exist. An existing scope keeps its generation and ordinal counter.
func (qu *Queue) EnsureScope(ctx context.Context, scope string, generation int64) error {
	if err := validScope(scope); err != nil {
		return err
	}
	if generation < 1 {
		return invalidf("generation must be positive, got %d", generation)
	}
	if err := qu.q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: scope, ActiveGeneration: generation}); err != nil {
		return fmt.Errorf("workqueue: ensure scope %q: %w", scope, err)
	}
	return nil
}

// SetGeneration moves the scope's generation fence. Items of other
// generations stop being claimable at once; their lanes no longer block the
// new generation's items.
func (qu *Queue) SetGeneration(ctx context.Context, scope string, generation int64) error {
	if err := validScope(scope); err != nil {
		return err
	}
	if generation < 1 {
		return invalidf("generation must be positive, got %d", generation)
	}
	n, err := qu.q.SetScopeGeneration(ctx, gen.SetScopeGenerationParams{ActiveGeneration: generation, ScopeID: scope})
	if err != nil {
		return fmt.Errorf("workqueue: set generation of scope %q: %w", scope, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	return nil
}

// inTx runs fn in a transaction (pessimistic, TiDB's default), re-running it
// when TiDB aborted it to break a deadlock or a lock wait timed out.
func (qu *Queue) inTx(ctx context.Context, what string, opts *sql.TxOptions, fn func(q *gen.Queries) error) error {
	var err error
	for attempt := 1; attempt <= qu.cfg.TxAttempts; attempt++ {
		err = qu.runTx(ctx, opts, fn)
		if err == nil || !retryableTx(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("workqueue: %s: %w", what, err)
	}
	return nil
}

func (qu *Queue) runTx(ctx context.Context, opts *sql.TxOptions, fn func(q *gen.Queries) error) error {
	tx, err := qu.db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(qu.q.WithTx(tx)); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func micros(d time.Duration) int64 { return d.Microseconds() }

func validScope(scope string) error {
	if scope == "" || len(scope) > 128 {
		return invalidf("scope id must be 1..128 bytes, got %d", len(scope))
	}
	for i := 0; i < len(scope); i++ {
		if scope[i] < 0x20 || scope[i] > 0x7e {
			return invalidf("scope id must be printable ASCII, got byte 0x%02x at %d", scope[i], i)
		}
	}
	return nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Lease is the configured lease duration.
func (qu *Queue) Lease() time.Duration { return qu.cfg.Lease }
