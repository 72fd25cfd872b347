// Package laneq is the front door to laneq, a durable work queue for TiDB:
// one Client opens the database, checks (or applies) the schema, and owns
// the work queue, the wake announcements, a worker with typed handlers and
// the completion events of this process.
//
//	client, err := laneq.Open(ctx, dsn, laneq.Config{Scope: "tenant-a"})
//	laneq.AddWorker(client, func(ctx context.Context, job *laneq.Job[SendEmail]) error {
//		return send(ctx, job.Args.To)
//	})
//	client.Start(ctx)
//	client.Enqueue(ctx, SendEmail{To: "a@example.com"})
//
// Every lower layer stays reachable (Queue, DB, Worker) for what the Client
// does not wrap: runtime/workqueue (claims, lanes, projections, dependency
// waits, replay), runtime/worker, runtime/ingress, runtime/stats and
// runtime/inspect.
package laneq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
	"github.com/laneq/laneq/schema"
)

// Config configures a Client. Only Scope is required.
type Config struct {
	// Scope is the tenant or partition this client enqueues into and works
	// on (1..128 printable ASCII bytes). Open creates it when missing.
	Scope string
	// Generation is the active generation Open gives a scope it creates
	// (an existing scope keeps its own; see workqueue.Queue.SetGeneration).
	// Default 1.
	Generation int64
	// Migrate applies laneq's pending schema migrations on Open (run it
	// from one deployer at a time). Without it Open fails with an error
	// wrapping ErrSchemaNotCurrent when a migration is pending.
	Migrate bool
	// Queue configures the work queue: lease, retry backoff, attempt
	// budget, write timeouts, announcements (workqueue.Config).
	Queue workqueue.Config
	// Worker configures the worker Start runs: executors, queue profile,
	// controller periods, wake hub (worker.Config). Its Scope is the
	// Client's; its OnFinished is called before the Client's events are
	// published (a panic in it is recovered and logged, and the event is
	// published still).
	Worker worker.Config
	// Logger for the client, its queue's worker and their parts. Default
	// slog.Default().
	Logger *slog.Logger
	// SubscribeBuffer is each subscription's buffer (see Subscribe).
	// Default 256.
	SubscribeBuffer int
	// Ingress, when set, gives the Client an Inbox for webhook deliveries
	// and makes Start run the router that turns them into events. Default
	// nil: no ingress.
	Ingress *IngressConfig
	// Serve, when set, makes Start run the handlers for many scopes (a
	// list, or every scope of a prefix) with one worker.Group: one pool
	// fair across scopes, one wake endpoint, nothing run for a scope
	// without live work. Its Member is Config.Worker; Scope stays the
	// default scope of Enqueue (WithScope picks another). Default nil: a
	// worker for Scope alone.
	Serve *worker.GroupConfig
	// Periodic jobs enqueue work into Scope on a schedule while the Client
	// runs (Start): each tick once across every process running the same
	// jobs, with no leader (PeriodicJob, runtime/periodic). Not with
	// Serve. Default none.
	Periodic []PeriodicJob
}

// DefaultSubscribeBuffer is Config.SubscribeBuffer's default.
const DefaultSubscribeBuffer = 256

// ErrConfig is matched (errors.Is) by every *ConfigError.
var ErrConfig = errors.New("laneq: invalid configuration")

// ConfigError reports an invalid setting.
type ConfigError struct {
	Setting string
	Reason  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("laneq: invalid configuration: %s: %s", e.Setting, e.Reason)
}

// Is makes every ConfigError match ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Errors of the Client's lifecycle and registration.
var (
	// ErrSchemaNotCurrent: the database lacks migrations this laneq needs
	// (Config.Migrate applies them; schema.Up does it by hand).
	ErrSchemaNotCurrent = errors.New("laneq: database schema is not current")
	// ErrStarted: Start was called on a running Client, or a worker was
	// added after Start.
	ErrStarted = errors.New("laneq: client already started")
	// ErrStopped: the Client was stopped or closed; it does not start again.
	ErrStopped = errors.New("laneq: client stopped")
	// ErrNoWorkers: Start needs at least one registered work kind, or
	// Config.Ingress.
	ErrNoWorkers = errors.New("laneq: no workers registered")
	// ErrDuplicateKind: a kind registered twice.
	ErrDuplicateKind = errors.New("laneq: kind already registered")
	// ErrInvalidKind: a kind that cannot name a work type (1..64 printable
	// ASCII characters without spaces).
	ErrInvalidKind = errors.New("laneq: invalid kind")
)

// Client is the front door: enqueue, register handlers, run them, hear what
// became of them. It is safe for concurrent use.
type Client struct {
	db      *sql.DB
	ownsDB  bool
	qu      *workqueue.Queue
	cfg     Config
	log     *slog.Logger
	events  *broker
	inspect *inspect.Reader
	stats   *stats.Reader

	// With Config.Ingress: the Inbox, and the wake hub its accepts go out
	// on (owned unless Worker.Wake.Shared gave it; nil with wakes off).
	inbox        *ingress.Inbox
	router       *ingress.Router
	hub          *wake.Hub
	ownsHub      bool
	stopAnnounce func()

	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	handlers map[string]worker.Handler
	state    clientState
	w        *worker.Worker
	g        *worker.Group // with Config.Serve, instead of w
	cancel   context.CancelFunc
	done     chan struct{} // closed when the running worker's and router's Runs returned
	runErr   error
}

type clientState int

const (
	stateNew clientState = iota
	stateRunning
	stateStopped
)

// Open connects to dsn with the session settings laneq needs
// (workqueue.OpenDB), checks the schema (or applies it, with
// Config.Migrate), and creates the scope when missing. Close releases the
// pool it opened.
func Open(ctx context.Context, dsn string, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	db, err := workqueue.OpenDB(dsn)
	if err != nil {
		return nil, fmt.Errorf("laneq: open database: %w", err)
	}
	c, err := newClient(ctx, db, cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	c.ownsDB = true
	return c, nil
}

// New is Open on a pool the caller opened and keeps (Close leaves it
// open). The pool's sessions must have laneq's settings
// (workqueue.SessionDSN); New checks them and returns the
// *workqueue.SessionError of each one they get wrong.
func New(ctx context.Context, db *sql.DB, cfg Config) (*Client, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newClient(ctx, db, cfg)
}

func (cfg Config) validate() error {
	if cfg.Scope == "" {
		return &ConfigError{Setting: "Scope", Reason: "required"}
	}
	if cfg.Generation < 0 {
		return &ConfigError{Setting: "Generation", Reason: fmt.Sprintf("must be positive, got %d", cfg.Generation)}
	}
	if cfg.SubscribeBuffer < 0 {
		return &ConfigError{Setting: "SubscribeBuffer", Reason: fmt.Sprintf("must not be negative, got %d", cfg.SubscribeBuffer)}
	}
	if cfg.Worker.Scope != "" && cfg.Worker.Scope != cfg.Scope {
		return &ConfigError{Setting: "Worker.Scope", Reason: fmt.Sprintf("%q differs from Scope %q (leave it empty)", cfg.Worker.Scope, cfg.Scope)}
	}
	if cfg.Serve != nil {
		if cfg.Serve.Member.Scope != "" || cfg.Serve.Member.Logger != nil || cfg.Serve.Member.Owner != "" {
			return &ConfigError{Setting: "Serve.Member", Reason: "leave it empty: Config.Worker configures each scope's worker"}
		}
	}
	if cfg.Ingress != nil {
		return cfg.Ingress.validate(cfg.Scope)
	}
	return nil
}

func newClient(ctx context.Context, db *sql.DB, cfg Config) (*Client, error) {
	if cfg.Generation == 0 {
		cfg.Generation = 1
	}
	if cfg.SubscribeBuffer == 0 {
		cfg.SubscribeBuffer = DefaultSubscribeBuffer
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Migrate {
		if _, err := schema.Up(ctx, db); err != nil {
			return nil, fmt.Errorf("laneq: migrate: %w", err)
		}
	} else {
		pending, err := schema.Pending(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("laneq: check schema: %w", err)
		}
		if pending > 0 {
			return nil, fmt.Errorf("%w: %d migrations pending (set Config.Migrate or run schema.Up)", ErrSchemaNotCurrent, pending)
		}
	}
	qu, err := workqueue.New(db, cfg.Queue)
	if err != nil {
		return nil, fmt.Errorf("laneq: %w", err)
	}
	if err := qu.EnsureScope(ctx, cfg.Scope, cfg.Generation); err != nil {
		_ = qu.Close()
		return nil, fmt.Errorf("laneq: %w", err)
	}
	// The readers share the Queue's checked pool and prepared statements.
	rd, st := inspect.NewFromQueue(qu), stats.NewFromQueue(qu)
	c := &Client{
		db: db, qu: qu, cfg: cfg, log: cfg.Logger, inspect: rd, stats: st,
		events:   newBroker(cfg.SubscribeBuffer),
		handlers: map[string]worker.Handler{},
	}
	if cfg.Ingress != nil {
		if err := c.newIngress(); err != nil {
			_ = qu.Close()
			return nil, err
		}
	}
	return c, nil
}

// Scope is the scope this client enqueues into and works on.
func (c *Client) Scope() string { return c.cfg.Scope }

// Queue is the work queue underneath, for what the Client does not wrap
// (lanes and projections by hand, generations, claims of your own).
// Everything made claimable through it is announced as through the Client.
func (c *Client) Queue() *workqueue.Queue { return c.qu }

// DB is the pool underneath (with laneq's session settings).
func (c *Client) DB() *sql.DB { return c.db }

// Worker is the running worker (nil before Start, and with Config.Serve),
// for its Stats and Settle.
func (c *Client) Worker() *worker.Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.w
}

// Group is the running group of Config.Serve (nil before Start or
// without Serve), for its Stats and its members.
func (c *Client) Group() *worker.Group {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.g
}

// Item reads one work item's state, its failure and its event context.
func (c *Client) Item(ctx context.Context, workID int64) (inspect.Item, error) {
	it, err := c.inspect.Item(ctx, workID)
	if err != nil {
		return it, fmt.Errorf("laneq: read item %d: %w", workID, err)
	}
	return it, nil
}

// Cancel cancels one of the scope's items (workqueue.Queue.Cancel): one no
// process holds ends skipped with failure class "cancelled" at once, and its
// lanes move on; a running one is told at its holder's next heartbeat, its
// handler's context is cancelled (context.Cause wraps
// workqueue.ErrCancelRequested), and it ends cancelled when the handler
// returns (completed, if the handler returns nil regardless). reason is
// recorded on the item. A terminal item is refused (workqueue.ErrRefused).
func (c *Client) Cancel(ctx context.Context, workID int64, reason string) (workqueue.CancelOutcome, error) {
	out, err := c.qu.Cancel(ctx, c.cfg.Scope, workID, reason)
	if err != nil {
		return out, fmt.Errorf("laneq: cancel item %d: %w", workID, err)
	}
	return out, nil
}

// Stats counts the scope's items by state per queue class, capped
// (stats.Reader.Cheap: a bounded read whatever the backlog).
func (c *Client) Stats(ctx context.Context) (stats.Scope, error) {
	sc, err := c.stats.Cheap(ctx, c.cfg.Scope, stats.Filter{})
	if err != nil {
		return sc, fmt.Errorf("laneq: %w", err)
	}
	return sc, nil
}

// DeadLetters reads a page of the scope's dead items, newest first
// (inspect.Reader.DeadLetters); Replay gives one a new attempt.
func (c *Client) DeadLetters(ctx context.Context, q inspect.DeadLetterQuery) (inspect.DeadLetterPage, error) {
	page, err := c.inspect.DeadLetters(ctx, c.cfg.Scope, q)
	if err != nil {
		return page, fmt.Errorf("laneq: %w", err)
	}
	return page, nil
}

// Drained reports whether the scope's active generation has no live item
// left (pending, blocked, running, waiting for a dependency, or a queued
// projection successor; dead items do not count). One indexed statement.
func (c *Client) Drained(ctx context.Context) (bool, error) {
	ok, err := c.stats.Drained(ctx, c.cfg.Scope)
	if err != nil {
		return false, fmt.Errorf("laneq: %w", err)
	}
	return ok, nil
}

// Start runs the registered handlers (a worker for the scope) and, with
// Config.Ingress, the receipt router, in the background until Stop or
// Close. It fails with ErrNoWorkers when neither is there to run,
// ErrStarted when running, ErrStopped after a Stop.
func (c *Client) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateRunning:
		return ErrStarted
	case stateStopped:
		return ErrStopped
	}
	if len(c.handlers) == 0 && c.inbox == nil {
		return ErrNoWorkers
	}
	var (
		w *worker.Worker
		g *worker.Group
	)
	if len(c.handlers) > 0 {
		var err error
		if c.cfg.Serve != nil {
			g, err = c.newGroup()
		} else {
			w, err = c.newWorker()
		}
		if err != nil {
			return err
		}
	}
	r := c.router // nil without ingress
	// The worker runs until Stop, not until the caller's ctx: Start's ctx
	// bounds starting only (a request context must not stop the worker).
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("laneq: start: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	c.w, c.g, c.cancel, c.done, c.state = w, g, cancel, done, stateRunning
	var wg sync.WaitGroup
	run := func(what string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := fn(runCtx)
			if err != nil && runCtx.Err() == nil {
				c.log.Error("laneq: "+what+" stopped", "scope", c.cfg.Scope, "err", err)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				c.mu.Lock()
				c.runErr = errors.Join(c.runErr, fmt.Errorf("laneq: %s: %w", what, err))
				c.mu.Unlock()
			}
		}()
	}
	if w != nil {
		run("worker", w.Run)
	}
	if g != nil {
		run("group", g.Run)
	}
	if r != nil {
		run("router", r.Run)
	}
	go func() {
		wg.Wait()
		close(done)
	}()
	return nil
}

// workerConfig is Config.Worker as the Client runs it: its logger, its
// wake hub when it has one, and its completion events.
func (c *Client) workerConfig() worker.Config {
	wcfg := c.cfg.Worker
	if wcfg.Logger == nil {
		wcfg.Logger = c.log
	}
	if c.hub != nil {
		wcfg.Wake.Shared = c.hub
	}
	userFinished := wcfg.OnFinished
	wcfg.OnFinished = func(f worker.Finished) {
		// Deferred: the Client's event is published even when the user's
		// callback panics (the worker recovers and logs the panic).
		defer c.events.publish(eventOf(f))
		if userFinished != nil {
			userFinished(f)
		}
	}
	return wcfg
}

// newGroup is the group Start runs with Config.Serve.
func (c *Client) newGroup() (*worker.Group, error) {
	if len(c.cfg.Periodic) > 0 {
		return nil, fmt.Errorf("laneq: start: %w: Config.Periodic runs in the worker of Config.Scope, not with Config.Serve", workqueue.ErrInvalid)
	}
	gcfg := *c.cfg.Serve
	gcfg.Member = c.workerConfig()
	gcfg.Member.Scope = ""
	g, err := worker.NewGroup(c.qu, gcfg, c.handlers)
	if err != nil {
		return nil, fmt.Errorf("laneq: start: %w", err)
	}
	return g, nil
}

// newWorker is the worker Start runs.
func (c *Client) newWorker() (*worker.Worker, error) {
	wcfg := c.workerConfig()
	wcfg.Scope = c.cfg.Scope
	jobs, err := schedules(c.cfg.Periodic)
	if err != nil {
		return nil, fmt.Errorf("laneq: start: %w", err)
	}
	wcfg.Schedules = append(slices.Clone(wcfg.Schedules), jobs...)
	w, err := worker.New(c.qu, wcfg, c.handlers)
	if err != nil {
		return nil, fmt.Errorf("laneq: start: %w", err)
	}
	return w, nil
}

// Stop ends the worker and the router gracefully: no new claims, running
// handlers see their context end, and their items are finished or released
// (due at once, for another process) before it returns; a receipt the
// router holds is materialized or left to its lease. A handler that ignores
// its context keeps its item, and the item's lanes, until it returns: its
// lease is held meanwhile, for worker.Config.Scheduler.GiveUpAfter at most
// (default 30s), after which the item is left to its lease's expiry, never
// released while the handler may still act. ctx bounds the wait; the
// shutdown goes on after ctx ends, and a later Stop or Close waits for it
// again. It returns the worker's or router's error, if one failed before
// the Stop. A Client that never started stops at once.
func (c *Client) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.state = stateStopped
	cancel, done := c.cancel, c.done
	c.mu.Unlock()
	if done == nil {
		return nil // never started
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return fmt.Errorf("laneq: stop: %w", ctx.Err())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runErr
}

// Close stops the worker (as Stop, without a bound: after a Stop whose
// context ended, it waits for that shutdown to end), sends the
// announcements still coalescing, ends every subscription, and closes the
// pool if Open opened it. Nothing is closed under a running handler: its
// finish needs the pool.
// Closing again returns the first Close's result.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		errs := []error{c.Stop(context.Background())}
		if c.stopAnnounce != nil {
			c.stopAnnounce()
		}
		if c.ownsHub {
			errs = append(errs, c.hub.Close())
		}
		errs = append(errs, c.qu.Close())
		c.events.close()
		if c.ownsDB {
			errs = append(errs, c.db.Close())
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}
