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
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
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
	// Retry is the safe-retry backoff policy; zero fields take the fields of
	// DefaultRetryPolicy.
	Retry RetryPolicy
	// MaxAttempts is the attempt budget of an item: claims taken, reclaims
	// after an expired lease included (a release gives its attempt back).
	// An item whose lease expires at the budget goes to dead instead of
	// being reclaimed again, and a failure of its last attempt sends it to
	// dead; either way its lane followers move on. It is what ends a poison
	// item that kills its process in every attempt. Default 25.
	MaxAttempts int32
	// MaxEnqueueBatch bounds the events of one Enqueue call (one transaction).
	// Default 1000.
	MaxEnqueueBatch int
	// TxAttempts bounds how often a write is run when TiDB answered it with a
	// transient error (a deadlock broken, a lock wait timed out, a write
	// conflict, a busy or unavailable store) or the connection failed under
	// it, with a jittered backoff between runs. Default 6.
	TxAttempts int
	// WriteTimeout bounds each run of a lease-fenced write (finish, retry,
	// release, renew) and of a claim's compare-and-swap and read-back, which
	// run under a context the caller cannot cancel: a write that TiDB may
	// already be committing is seen through to a known outcome. It also
	// bounds each read that follows such a write (a renewal's check for a
	// requested cancellation, the lookup of a released item's scope to
	// announce it), so that a connection that stops answering cannot hold
	// the caller forever. Default 10s.
	WriteTimeout time.Duration
	// OnWriteRetry, when set, is called before a write is run again after a
	// transient error (op names the write); for logs and metrics.
	OnWriteRetry func(op string, attempt int, err error)
	// Announce tunes how the Queue tells other processes about work it
	// made claimable while no wake hub is attached (see Announcement).
	Announce AnnounceConfig
	// TextProtocol sends every statement as text instead of preparing it
	// once per connection. Prepared statements let TiDB reuse each
	// statement's plan (the optimizer is a large share of a claim's and a
	// finish's server time); turn this on only behind a proxy that cannot
	// keep server-side prepared statements.
	TextProtocol bool
}

// DefaultMaxAttempts is Config.MaxAttempts when zero.
const DefaultMaxAttempts = 25

func (c Config) withDefaults() (Config, error) {
	if c.Lease == 0 {
		c.Lease = 30 * time.Second
	}
	c.Retry = c.Retry.withDefaults()
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxEnqueueBatch == 0 {
		c.MaxEnqueueBatch = 1000
	}
	if c.TxAttempts == 0 {
		c.TxAttempts = 6
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = store.DefaultWriteTimeout
	}
	if c.OnWriteRetry == nil {
		c.OnWriteRetry = func(string, int, error) {}
	}
	switch {
	case c.Lease < time.Millisecond:
		return c, invalidf("Lease must be at least 1ms, got %s", c.Lease)
	case c.MaxAttempts < 1:
		return c, invalidf("MaxAttempts must be positive, got %d", c.MaxAttempts)
	case c.MaxEnqueueBatch < 1:
		return c, invalidf("MaxEnqueueBatch must be positive, got %d", c.MaxEnqueueBatch)
	case c.TxAttempts < 1:
		return c, invalidf("TxAttempts must be positive, got %d", c.TxAttempts)
	case c.WriteTimeout < time.Millisecond:
		return c, invalidf("WriteTimeout must be at least 1ms, got %s", c.WriteTimeout)
	}
	if err := c.Retry.validate(); err != nil {
		return c, err
	}
	return c, nil
}

// Queue runs the work-item lifecycle on one database. It is safe for
// concurrent use; it holds no per-scope state (see Claimer for that).
type Queue struct {
	st  *store.Store // the checked pool and its statements (see Config.TextProtocol)
	db  *sql.DB      // st.DB()
	q   *gen.Queries // st.Queries()
	cfg Config

	kindsMu sync.Mutex
	kinds   map[workKind]bool // work kinds this Queue registered (see Enqueue)

	ann announcing // see announce.go

	writeRetries, writesAbandoned, deferredWakes atomic.Uint64
}

// QueueStats counts what a Queue's writes went through.
type QueueStats struct {
	// WriteRetries counts writes run again after a transient error.
	WriteRetries uint64
	// WritesAbandoned counts writes that still failed transiently after
	// TxAttempts runs.
	WritesAbandoned uint64
	// DeferredWakes counts satisfied dependencies whose waiters a Tx's
	// commit could not wake (the wake after the commit failed): the
	// dependency safety pass wakes them.
	DeferredWakes uint64
}

// Stats returns the counters.
func (qu *Queue) Stats() QueueStats {
	return QueueStats{WriteRetries: qu.writeRetries.Load(), WritesAbandoned: qu.writesAbandoned.Load(), DeferredWakes: qu.deferredWakes.Load()}
}

// New returns a Queue on db. It checks the session settings every laneq
// statement relies on and returns a *SessionError for each one db's
// connections get wrong (joined): parseTime=true, loc=UTC,
// clientFoundRows=true, a session time zone that is UTC all year
// (time_zone='+00:00'), pessimistic transactions (TiDB's default), and an
// innodb_lock_wait_timeout below WriteTimeout. OpenDB and SessionDSN give
// a DSN all of them.
func New(db *sql.DB, cfg Config) (*Queue, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	st, err := store.New(db, store.Options{TextProtocol: cfg.TextProtocol, WriteTimeout: cfg.WriteTimeout})
	if err != nil {
		return nil, err // as store.New says it: "workqueue: session setting ...", unchanged for callers
	}
	qu := &Queue{st: st, db: st.DB(), q: st.Queries(), cfg: cfg, kinds: map[workKind]bool{}}
	qu.initAnnouncing()
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

// SetGeneration moves the scope's generation fence forward. Items of older
// generations stop being claimable at once; their lanes no longer block the
// new generation's items.
//
// The fence only moves forward, in one conditional statement (no
// read-then-write window): a generation below the active one is refused
// with a *GenerationError (errors.Is ErrGenerationNotAhead) and changes
// nothing, so a late or racing call cannot make an older generation's
// items, lanes and projections claimable again; of two racing calls the
// higher generation always wins. The active generation itself is a no-op
// success, so a call retried after a lost reply succeeds. A scope with no
// row is ErrUnknownScope. RollbackGeneration moves the fence back on
// purpose.
func (qu *Queue) SetGeneration(ctx context.Context, scope string, generation int64) error {
	if err := validScope(scope); err != nil {
		return err
	}
	if generation < 1 {
		return invalidf("generation must be positive, got %d", generation)
	}
	// The UPDATE matched nothing: the scope is missing, or at or past the
	// generation. Only a RollbackGeneration committed between the UPDATE and
	// the read can leave the fence below it; the UPDATE then runs again.
	for range 3 {
		n, err := qu.q.SetScopeGeneration(ctx, gen.SetScopeGenerationParams{ActiveGeneration: generation, ScopeID: scope})
		if err != nil {
			return fmt.Errorf("workqueue: set generation of scope %q: %w", scope, err)
		}
		if n > 0 {
			qu.announce(scope, true) // the new generation's work, some of it due later
			return nil
		}
		sc, err := qu.q.GetScope(ctx, scope)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %q", ErrUnknownScope, scope)
		}
		if err != nil {
			return fmt.Errorf("workqueue: set generation of scope %q: read the active generation: %w", scope, err)
		}
		switch {
		case sc.ActiveGeneration == generation:
			return nil
		case sc.ActiveGeneration > generation:
			return &GenerationError{Scope: scope, Active: sc.ActiveGeneration, Requested: generation}
		}
	}
	return fmt.Errorf("workqueue: set generation of scope %q: the fence kept moving back under it (concurrent RollbackGeneration calls)", scope)
}

// RollbackGeneration is the deliberate override of SetGeneration's
// forward-only fence: it sets the scope's active generation to generation
// whatever it is now, lower included. Rolling back makes the older
// generation's live items claimable again (pending heads, blocked lane
// followers behind them, expired leases, its projections), and fences the
// newer generation's work the same way SetGeneration fences older work.
// For an operator undoing a bad deployment, never for a routine caller: a
// late RollbackGeneration moves the fence back as surely as the bug
// SetGeneration's guard prevents. A scope with no row is ErrUnknownScope.
func (qu *Queue) RollbackGeneration(ctx context.Context, scope string, generation int64) error {
	if err := validScope(scope); err != nil {
		return err
	}
	if generation < 1 {
		return invalidf("generation must be positive, got %d", generation)
	}
	n, err := qu.q.RollbackScopeGeneration(ctx, gen.RollbackScopeGenerationParams{ActiveGeneration: generation, ScopeID: scope})
	if err != nil {
		return fmt.Errorf("workqueue: roll back generation of scope %q: %w", scope, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrUnknownScope, scope)
	}
	qu.announce(scope, true) // the older generation's live work is claimable again
	return nil
}

// inTx runs fn in a transaction (pessimistic, TiDB's default), re-running
// it after a transient error (see transient) with a backoff, up to
// TxAttempts runs. The context of the runs cannot be cancelled by the
// caller's: a transaction that may be committing is seen through to a known
// outcome, and each run is bounded by WriteTimeout. fn must be safe to run
// again: idempotent, or fenced by compare-and-swaps.
func (qu *Queue) inTx(ctx context.Context, what string, opts *sql.TxOptions, fn func(ctx context.Context, q *gen.Queries) error) error {
	return qu.inRawTx(ctx, what, opts, func(ctx context.Context, _ *sql.Tx, q *gen.Queries) error { return fn(ctx, q) })
}

// inRawTx is inTx for a fn that also runs the statements sqlc cannot
// compile (queries/load) on the transaction itself.
func (qu *Queue) inRawTx(ctx context.Context, what string, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx, q *gen.Queries) error) error {
	return qu.retryWrite(ctx, what, func(ctx context.Context) error {
		return qu.runTx(ctx, opts, fn)
	})
}

// detached returns the context of a statement that must reach a known
// outcome whatever becomes of the caller's context (a write that may be
// committing, a read that follows a committed write): it keeps ctx's
// values but not its cancellation or deadline, and ends after
// WriteTimeout. The bound is what keeps it detached safely: on a
// connection that stops answering without an error (half-open TCP: a peer
// or a path that died without a reset) nothing else would end the wait,
// and a worker's heartbeat stuck in one holds up its scheduler's timers
// and Stop. WriteTimeout, because it is already how long one run of such a
// write may take (see Config.WriteTimeout).
func (qu *Queue) detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), qu.cfg.WriteTimeout)
}

// retryWrite runs write until it succeeds, fails for good, or ran
// TxAttempts times; see inTx.
func (qu *Queue) retryWrite(ctx context.Context, what string, write func(ctx context.Context) error) error {
	base := context.WithoutCancel(ctx)
	var err error
	for attempt := 1; ; attempt++ {
		runCtx, cancel := qu.detached(base)
		err = write(runCtx)
		cancel()
		timedOut := errors.Is(err, context.DeadlineExceeded) && base.Err() == nil
		if err == nil || !(transient(err) || timedOut) {
			break
		}
		if attempt >= qu.cfg.TxAttempts {
			qu.writesAbandoned.Add(1)
			break
		}
		qu.writeRetries.Add(1)
		qu.cfg.OnWriteRetry(what, attempt, err)
		_ = sleepCtx(base, writeBackoff.Next(attempt))
	}
	if err != nil {
		return fmt.Errorf("workqueue: %s: %w", what, err)
	}
	return nil
}

func (qu *Queue) runTx(ctx context.Context, opts *sql.TxOptions, fn func(ctx context.Context, tx *sql.Tx, q *gen.Queries) error) error {
	tx, err := qu.db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(ctx, tx, qu.inTxQueries(tx)); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// inTxQueries returns the catalog's statements inside tx.
func (qu *Queue) inTxQueries(tx *sql.Tx) *gen.Queries { return qu.st.InTx(tx) }

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

// Store is the Queue's checked pool and prepared statements, for the
// runtime packages that read through the same ones (stats.NewFromQueue,
// inspect.NewFromQueue). Its type is internal to laneq.
func (qu *Queue) Store() *store.Store { return qu.st }

// Lease is the configured lease duration.
func (qu *Queue) Lease() time.Duration { return qu.cfg.Lease }

// MaxEnqueueBatch is the configured bound on the events of one Enqueue,
// for callers that split a larger set into batches (runtime/periodic).
func (qu *Queue) MaxEnqueueBatch() int { return qu.cfg.MaxEnqueueBatch }

// DatabaseNow reads the database's clock (DatabaseNowMicros), the clock
// every due time and lease of laneq is measured by, as an absolute instant
// in UTC whatever the session's time zone.
func (qu *Queue) DatabaseNow(ctx context.Context) (time.Time, error) {
	us, err := qu.q.DatabaseNowMicros(ctx)
	if err != nil {
		return time.Time{}, fmt.Errorf("workqueue: read the database clock: %w", err)
	}
	return time.UnixMicro(us).UTC(), nil
}
