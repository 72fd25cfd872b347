package laneq

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// EnqueueOption shapes one Enqueue.
type EnqueueOption func(*enqueueOptions)

type enqueueOptions struct {
	key   string
	scope string
	work  workqueue.Work
}

// WithScope enqueues into scope instead of Config.Scope (a multi-tenant
// service with Config.Serve serving many scopes). The scope must exist
// (workqueue.Queue.EnsureScope). NewEvent ignores it: a route's events go
// to its receipt's scope.
func WithScope(scope string) EnqueueOption {
	return func(o *enqueueOptions) { o.scope = scope }
}

// WithIdempotencyKey makes the enqueue idempotent: a second enqueue with
// the same key in the scope changes nothing and reports Duplicate. Without
// it every Enqueue gets a fresh random key (no deduplication).
func WithIdempotencyKey(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.key = key }
}

// WithQueueClass puts the item in a queue class (default "default"; the
// worker's queue profile decides which classes it serves and how).
func WithQueueClass(class string) EnqueueOption {
	return func(o *enqueueOptions) { o.work.QueueClass = class }
}

// WithSourceLane serializes the item behind every earlier live item of the
// same source lane (for example one contact's messages). A lane runs one
// item at a time whatever its handler does: an item whose handler ignores
// its cancelled context keeps the lane until the handler returns, and only
// a lost lease (its process died, froze or lost the database) hands it on.
func WithSourceLane(lane string) EnqueueOption {
	return func(o *enqueueOptions) { o.work.SourceLane = lane }
}

// WithTargetLane serializes the item behind every earlier live item of the
// same target lane (for example one account written to).
func WithTargetLane(lane string) EnqueueOption {
	return func(o *enqueueOptions) { o.work.TargetLane = lane }
}

// WithDelay postpones the first attempt by d after the commit's database
// time.
func WithDelay(d time.Duration) EnqueueOption {
	return func(o *enqueueOptions) { o.work.Delay = d }
}

// WithUniqueKey makes the item unique while live in its scope: while an
// item enqueued with the same key is pending, running, retrying or
// waiting, Enqueue creates no live item and reports that item with
// Refused (not an error); the refusal is stored, so the same idempotency
// key enqueued again gets the same refusal even once the key is free. New
// events find the key free once that item is terminal
// (workqueue.Work.UniqueKey).
func WithUniqueKey(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.work.UniqueKey = key }
}

// WithRateKey sets the key a rate limit per key (ratelimit.Limit.PerKey)
// counts the item's start under: a customer, an account
// (workqueue.Work.RateKey).
func WithRateKey(key string) EnqueueOption {
	return func(o *enqueueOptions) { o.work.RateKey = key }
}

// WithPriority stores a priority for operators (claim order does not use it
// yet: lane ordinal, then due time).
func WithPriority(p int32) EnqueueOption {
	return func(o *enqueueOptions) { o.work.Priority = p }
}

// WithWaitFor declares a prerequisite: the item waits, unrun and without
// spending attempts, until any of dep.Keys is satisfied (Client.Satisfy,
// Tx.Satisfy).
func WithWaitFor(dep workqueue.Dependency) EnqueueOption {
	return func(o *enqueueOptions) { o.work.WaitFor = &dep }
}

// Enqueued reports one Enqueue.
type Enqueued struct {
	WorkID  int64
	EventID int64
	// State is the item's state: pending (runnable when due), blocked
	// (behind an earlier item of a lane), or, for a duplicate, its current
	// state.
	State string
	// Duplicate: the idempotency key existed; nothing was written.
	Duplicate bool
	// Refused: an item with the same unique key (WithUniqueKey) was live
	// when this event was first enqueued; WorkID and State are that item's
	// (its current state) and no live item was created (the event and the
	// refused item's terminal record are stored).
	Refused bool
}

// Enqueue stores args as an immutable event with one work item of
// args.Kind(), in one transaction, and announces it to every worker of the
// scope (this process's and others') after the commit. Invalid input
// (an option's lane or class, a kind) returns an error wrapping
// workqueue.ErrInvalid and writes nothing.
func (c *Client) Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (Enqueued, error) {
	ev, scope, err := c.event(args, opts)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := c.qu.Enqueue(ctx, scope, []workqueue.Event{ev})
	if err != nil {
		return Enqueued{}, fmt.Errorf("laneq: enqueue %s: %w", args.Kind(), err)
	}
	return enqueuedOf(res), nil
}

// Satisfy records the dependency key of the scope as satisfied and makes
// the items waiting on wakeKey runnable (woken counts them), announced to
// every worker of the scope. It is idempotent.
func (c *Client) Satisfy(ctx context.Context, wakeKey, key string) (woken int64, err error) {
	woken, err = c.qu.Satisfy(ctx, c.cfg.Scope, wakeKey, key)
	if err != nil {
		return woken, fmt.Errorf("laneq: satisfy %q: %w", key, err)
	}
	return woken, nil
}

// Replay gives a dead item a new attempt as a child item with a fresh
// budget (workqueue.Queue.Replay) and publishes EventReplayed. It returns
// the child's id; an item already replayed returns the earlier child's id
// with an error wrapping workqueue.ErrAlreadyReplayed.
func (c *Client) Replay(ctx context.Context, workID int64) (int64, error) {
	r, err := c.qu.Replay(ctx, c.cfg.Scope, workID)
	if err != nil {
		return r.WorkID, fmt.Errorf("laneq: replay %d: %w", workID, err)
	}
	c.events.publish(Event{Kind: EventReplayed, WorkID: r.WorkID, ReplayOf: workID})
	return r.WorkID, nil
}

// Tx is a transaction in which your own rows and the work they cause
// commit together (see InTx).
type Tx struct {
	c  *Client
	tx *workqueue.Tx
}

// SQL is the transaction for your own statements.
func (t *Tx) SQL() *sql.Tx { return t.tx.SQL() }

// Enqueue is Client.Enqueue inside the transaction: nothing is visible
// before the commit, nothing is left after a rollback, and the commit
// announces it. It locks the scope row until the transaction ends: enqueue
// last.
func (t *Tx) Enqueue(ctx context.Context, args Args, opts ...EnqueueOption) (Enqueued, error) {
	ev, scope, err := t.c.event(args, opts)
	if err != nil {
		return Enqueued{}, err
	}
	res, err := t.tx.Enqueue(ctx, scope, []workqueue.Event{ev})
	if err != nil {
		return Enqueued{}, fmt.Errorf("laneq: enqueue %s: %w", args.Kind(), err)
	}
	return enqueuedOf(res), nil
}

// Satisfy records the dependency key with the transaction; its waiters are
// woken and announced after the commit.
func (t *Tx) Satisfy(ctx context.Context, wakeKey, key string) error {
	if err := t.tx.Satisfy(ctx, t.c.cfg.Scope, wakeKey, key); err != nil {
		return fmt.Errorf("laneq: satisfy %q: %w", key, err)
	}
	return nil
}

// InTx runs fn in a transaction and commits it (workqueue.Queue.InTx):
// after a transient error before the commit it runs fn again in a new
// transaction, so fn must do nothing outside it that cannot run twice; a
// commit whose reply was lost is not run again and returns an error
// wrapping workqueue.ErrCommitUnknown.
func (c *Client) InTx(ctx context.Context, fn func(ctx context.Context, tx *Tx) error) error {
	return c.qu.InTx(ctx, func(ctx context.Context, tx *workqueue.Tx) error {
		return fn(ctx, &Tx{c: c, tx: tx})
	})
}

// event is the event Enqueue writes for args and the scope it goes to.
func (c *Client) event(args Args, opts []EnqueueOption) (workqueue.Event, string, error) {
	ev, err := NewEvent(args, opts...)
	if err != nil {
		return ev, "", fmt.Errorf("laneq: enqueue: %w", err)
	}
	if ev.IdempotencyKey == "" {
		ev.IdempotencyKey = randomKey()
	}
	return ev, cmp.Or(optionsOf(opts).scope, c.cfg.Scope), nil
}

func optionsOf(opts []EnqueueOption) enqueueOptions {
	var o enqueueOptions
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// NewEvent is the event Enqueue writes for args (its kind, its JSON, one
// item of work with opts), for a route function (IngressConfig.Route) or
// for a caller of the Queue underneath. Unlike Enqueue it leaves the
// idempotency key empty unless WithIdempotencyKey gives one: a router keys
// a receipt's events "receipt:<id>:<index>", the same on every reroute.
func NewEvent(args Args, opts ...EnqueueOption) (workqueue.Event, error) {
	if args == nil {
		return workqueue.Event{}, fmt.Errorf("%w: nil args", workqueue.ErrInvalid)
	}
	o := optionsOf(opts)
	kind := args.Kind()
	if err := workqueue.ValidWorkType(kind); err != nil {
		return workqueue.Event{}, fmt.Errorf("%w %q: %w", ErrInvalidKind, kind, err)
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return workqueue.Event{}, fmt.Errorf("%s: %w: encode args: %w", kind, workqueue.ErrInvalid, err)
	}
	o.work.WorkType = kind
	return workqueue.Event{IdempotencyKey: o.key, EventKind: kind, Payload: payload, Work: []workqueue.Work{o.work}}, nil
}

// randomKey is the idempotency key of an enqueue without one: 128 random
// bits, so it never collides with another.
func randomKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return "laneq:" + hex.EncodeToString(b[:])
}

func enqueuedOf(res []workqueue.EnqueuedEvent) Enqueued {
	e := Enqueued{EventID: res[0].EventID, Duplicate: res[0].Duplicate}
	if len(res[0].Work) > 0 {
		e.WorkID, e.State, e.Refused = res[0].Work[0].WorkID, res[0].Work[0].State, res[0].Work[0].Refused
	}
	return e
}
