// Package ingress admits provider deliveries durably (Inbox.Accept, and
// Handler for webhook endpoints) and routes them into the work queue
// (Router): seed 001's IngressReceipt and receipt-routing state.
//
// A receipt row is written once, on admission, and is the only router
// state there is: the router claims it with its own lease and fencing
// token (claim_token), materializes a bounded batch of receipts through the
// batch materializer (workqueue.Tx.Enqueue) in the same transaction that
// marks them materialized and records their event ids, backs off on
// transient failures and records terminal ones. laneq knows nothing about
// providers: the caller verifies requests, resolves their scope, delivery
// id and route class, and turns a receipt into events (RouteFunc).
package ingress

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// DefaultClass is the route class of a delivery that names none.
const DefaultClass = "default"

// Receipt router states.
const (
	StatusPending      = "pending"      // due for routing at NextAttemptAt
	StatusRouting      = "routing"      // claimed by a router until its lease ends
	StatusMaterialized = "materialized" // its events and work items exist
	StatusFailed       = "failed"       // a terminal routing failure, left for operators
)

// Size bounds. The body column is a MEDIUMBLOB (16 MiB); the default keeps
// a receipt far below TiDB's default 6 MiB entry limit.
const (
	DefaultMaxBody = 1 << 20
	MaxMaxBody     = 4 << 20
)

// Delivery is one verified provider delivery to admit.
type Delivery struct {
	Scope string
	// DeliveryID is the provider's identity of the delivery: a redelivery
	// with the same id (compared exactly: "a" and "a " differ) is the same
	// receipt and writes nothing.
	DeliveryID    string
	Method        string // HTTP method, or the transport's verb
	RouteKey      string // the route or path key the delivery arrived on
	ContentType   string
	EventKind     string // optional
	CorrelationID string // optional; a safe correlation id, never a credential
	// Class is the route class the router claims it under (DefaultClass
	// when empty): give interactive and bulk traffic different classes so
	// a bulk burst cannot hold up interactive receipts (see Router).
	Class string
	Body  []byte
	// ReceivedAt is when the request arrived in this process (zero: now).
	// Only its age is used: received_at = database now - age.
	ReceivedAt time.Time
}

// Admitted is what a receipt recorded at admission: its identity and the
// verified request envelope, enough to route it after any restart.
type Admitted struct {
	ID            int64
	Scope         string
	DeliveryID    string
	Method        string
	RouteKey      string
	ContentType   string
	EventKind     string
	CorrelationID string
	Class         string
	PayloadHash   [32]byte
	ReceivedAt    time.Time
	AcceptedAt    time.Time
}

// Receipt is a receipt row's admission envelope and routing state.
type Receipt struct {
	Admitted

	Status           string
	Attempts         int32
	NextAttemptAt    time.Time
	ClaimOwner       string
	ClaimToken       int64
	LeaseUntil       time.Time // zero when not leased
	LastErrorClass   string
	LastErrorSummary string
	MaterializedAt   time.Time // zero until materialized
	EventIDs         []int64   // the events it became, once materialized
}

// Accepted is what Accept did.
type Accepted struct {
	Receipt Receipt
	// Duplicate: the delivery id was already accepted; nothing was written
	// and Receipt is the existing receipt.
	Duplicate bool
	// BodyDiffers: a duplicate whose body hashes differently from the
	// receipt's (a provider reusing a delivery id, or a forgery that passed
	// verification). Nothing was written.
	BodyDiffers bool
}

// Config configures an Inbox.
type Config struct {
	// MaxBody bounds an accepted body in bytes: DefaultMaxBody when zero,
	// at most MaxMaxBody.
	MaxBody int
}

// Inbox admits deliveries. It is safe for concurrent use.
type Inbox struct {
	q   *gen.Queries
	cfg Config

	mu        sync.Mutex
	listeners map[int]func(scope, class string)
	nextID    int
}

// New returns an Inbox writing through db, which must be opened with
// workqueue.OpenDB: New refuses a pool whose sessions workqueue.New would
// refuse (errors.Is workqueue.ErrSessionSettings), because receipt due
// times are NOW(6) and a session in another time zone would make every
// receipt it accepts due hours early or late for the router.
func New(db *sql.DB, cfg Config) (*Inbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	st, err := store.New(db, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("ingress: %w", err)
	}
	return newInbox(st, cfg), nil
}

// NewFromQueue is New on qu's checked pool and prepared statements (no
// second session check), as stats.NewFromQueue and inspect.NewFromQueue
// are; the routers of the Inbox enqueue through qu.
func NewFromQueue(qu *workqueue.Queue, cfg Config) (*Inbox, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return newInbox(qu.Store(), cfg), nil
}

func (cfg *Config) validate() error {
	switch {
	case cfg.MaxBody == 0:
		cfg.MaxBody = DefaultMaxBody
	case cfg.MaxBody < 0 || cfg.MaxBody > MaxMaxBody:
		return &InvalidError{Field: "MaxBody", Reason: fmt.Sprintf("%d out of range 1..%d", cfg.MaxBody, MaxMaxBody)}
	}
	return nil
}

func newInbox(st *store.Store, cfg Config) *Inbox {
	return &Inbox{q: st.Queries(), cfg: cfg, listeners: map[int]func(string, string){}}
}

// Accept records a delivery durably and idempotently and returns its
// receipt only after the commit. A redelivery (same scope and delivery id)
// returns the existing receipt and writes nothing. Invalid input is refused
// with an *InvalidError before anything is written. After a new receipt
// commits, this process's routers of its scope and class are woken (and
// other processes' through AnnounceTo), even when reading it back fails.
func (in *Inbox) Accept(ctx context.Context, d Delivery) (Accepted, error) {
	if d.Class == "" {
		d.Class = DefaultClass
	}
	if err := in.validate(d); err != nil {
		return Accepted{}, err
	}
	hash := sha256.Sum256(d.Body)
	age := time.Duration(0)
	if !d.ReceivedAt.IsZero() {
		age = max(time.Since(d.ReceivedAt), 0)
	}
	params := gen.AcceptReceiptParams{
		ScopeID: d.Scope, DeliveryID: d.DeliveryID, HTTPMethod: d.Method, RouteKey: d.RouteKey,
		ContentType: d.ContentType, EventKind: store.NullString(d.EventKind), CorrelationID: store.NullString(d.CorrelationID),
		RouteClass: d.Class, PayloadHash: hash[:], Body: d.Body, ReceivedAgoMicros: age.Microseconds(),
	}
	if params.Body == nil {
		params.Body = []byte{} // NOT NULL: an empty body is a body
	}
	// Two tries: a duplicate-key error whose receipt is not there to read
	// (an AUTO_RANDOM primary-key collision, or a receipt deleted between
	// the insert and the read) inserts once more.
	for range 2 {
		id, err := in.q.AcceptReceipt(ctx, params)
		if err == nil {
			// The commit made the receipt routable: announce it whatever
			// the read-back does, or a failed read would leave it to the
			// routers' backstops (up to QuietBackstop in other processes).
			in.notify(d.Scope, d.Class)
			r, err := in.Receipt(ctx, id)
			if err != nil {
				return Accepted{}, fmt.Errorf("ingress: read back receipt %d of delivery %q (committed): %w", id, d.DeliveryID, err)
			}
			return Accepted{Receipt: r}, nil
		}
		if !isDuplicateKey(err) {
			return Accepted{}, fmt.Errorf("ingress: accept delivery %q of scope %q: %w", d.DeliveryID, d.Scope, err)
		}
		r, err := in.ReceiptByDelivery(ctx, d.Scope, d.DeliveryID)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return Accepted{}, fmt.Errorf("ingress: read the existing receipt of delivery %q: %w", d.DeliveryID, err)
		}
		return Accepted{Receipt: r, Duplicate: true, BodyDiffers: r.PayloadHash != hash}, nil
	}
	return Accepted{}, fmt.Errorf("ingress: accept delivery %q of scope %q: duplicate key twice, and no receipt holds the delivery id", d.DeliveryID, d.Scope)
}

// Receipt reads one receipt by id (ErrNotFound when there is none).
func (in *Inbox) Receipt(ctx context.Context, id int64) (Receipt, error) {
	row, err := in.q.GetReceipt(ctx, id)
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, fmt.Errorf("ingress: receipt %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("ingress: read receipt %d: %w", id, err)
	}
	return receiptFromRow(gen.GetReceiptByDeliveryRow(row))
}

// ReceiptByDelivery reads the receipt of one delivery (ErrNotFound when
// there is none).
func (in *Inbox) ReceiptByDelivery(ctx context.Context, scope, deliveryID string) (Receipt, error) {
	row, err := in.q.GetReceiptByDelivery(ctx, gen.GetReceiptByDeliveryParams{ScopeID: scope, DeliveryID: deliveryID})
	if errors.Is(err, sql.ErrNoRows) {
		return Receipt{}, fmt.Errorf("ingress: delivery %q of scope %q: %w", deliveryID, scope, ErrNotFound)
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("ingress: read the receipt of delivery %q: %w", deliveryID, err)
	}
	return receiptFromRow(row)
}

// AnnounceTo announces every receipt this Inbox commits to the scope's
// routers in other processes through hub (see RouterConfig.Wakes), until
// stop is called. Routers in this process are woken without it.
func (in *Inbox) AnnounceTo(hub *wake.Hub) (stop func()) {
	return in.onAccepted(func(scope, _ string) { hub.Publish(scope) })
}

// onAccepted registers fn to hear of every receipt this Inbox commits.
func (in *Inbox) onAccepted(fn func(scope, class string)) (stop func()) {
	in.mu.Lock()
	defer in.mu.Unlock()
	id := in.nextID
	in.nextID++
	in.listeners[id] = fn
	return func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		delete(in.listeners, id)
	}
}

func (in *Inbox) notify(scope, class string) {
	in.mu.Lock()
	fns := make([]func(string, string), 0, len(in.listeners))
	for _, fn := range in.listeners {
		fns = append(fns, fn)
	}
	in.mu.Unlock()
	for _, fn := range fns {
		fn(scope, class)
	}
}

func receiptFromRow(r gen.GetReceiptByDeliveryRow) (Receipt, error) {
	out := Receipt{
		Admitted: Admitted{
			ID: r.ReceiptID, Scope: r.ScopeID, DeliveryID: r.DeliveryID, Method: r.HTTPMethod,
			RouteKey: r.RouteKey, ContentType: r.ContentType, EventKind: r.EventKind.String,
			CorrelationID: r.CorrelationID.String, Class: r.RouteClass,
			ReceivedAt: r.ReceivedAt, AcceptedAt: r.AcceptedAt,
		},
		Status: r.RouterStatus, Attempts: r.AttemptCount, NextAttemptAt: r.NextAttemptAt,
		ClaimOwner: r.ClaimOwner.String, ClaimToken: r.ClaimToken, LeaseUntil: r.LeaseUntil.Time,
		LastErrorClass: r.LastErrorClass.String, LastErrorSummary: r.LastErrorSummary.String,
		MaterializedAt: r.MaterializedAt.Time,
	}
	copy(out.PayloadHash[:], r.PayloadHash)
	if len(r.EventIDs) > 0 {
		if err := json.Unmarshal(r.EventIDs, &out.EventIDs); err != nil {
			return Receipt{}, fmt.Errorf("ingress: receipt %d: event ids %q: %w", r.ReceiptID, r.EventIDs, err)
		}
	}
	return out, nil
}

func isDuplicateKey(err error) bool {
	return store.Errno(err) == 1062 // ER_DUP_ENTRY
}
