// Package inspect is the operator's read path: one work item's state and
// history, and a scope's dead letters page by page. It returns context
// (event identity, route, receipt delivery id, sanitized failure
// summaries), never an event payload or a receipt body.
package inspect

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/runtime/workqueue"
)

// ErrInvalid is what every *InvalidError wraps.
var ErrInvalid = errors.New("inspect: invalid argument")

// InvalidError names the argument a call refused.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("inspect: invalid %s: %s", e.Field, e.Reason)
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// ErrNotFound: no work item has the id asked for.
var ErrNotFound = errors.New("inspect: not found")

// ErrUnknownScope is workqueue.ErrUnknownScope: the scope has no scope row.
var ErrUnknownScope = workqueue.ErrUnknownScope

// Reader reads items and dead letters.
type Reader struct {
	q *gen.Queries
}

// New returns a Reader on db. Like workqueue.New it refuses a pool whose
// sessions are not in UTC (times are the database's NOW(6)), and it runs
// its statements prepared.
func New(db *sql.DB) (*Reader, error) {
	st, err := store.New(db, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return &Reader{q: st.Queries()}, nil
}

// NewFromQueue returns a Reader on qu's pool and prepared statements
// (checked when qu was made; Config.TextProtocol honoured).
func NewFromQueue(qu *workqueue.Queue) *Reader { return &Reader{q: qu.Store().Queries()} }

// EventContext is what identifies an item's event and where it came from.
type EventContext struct {
	EventID        int64
	RouteID        string
	RouteVersion   int64
	EventKind      string
	SourceKind     string
	SourceID       string
	IdempotencyKey string
	// Receipt: the ingress receipt the event was materialized from; zero
	// ReceiptID for a direct enqueue.
	ReceiptID     int64
	DeliveryID    string
	RouteKey      string
	CorrelationID string
}

// Failure is a sanitized failure record.
type Failure struct {
	Class   string
	Summary string
}

// Item is one work item's state.
type Item struct {
	WorkID     int64
	Scope      string
	Generation int64
	Stale      bool // of a generation that is no longer the scope's active one: never claimed
	// ActiveGeneration is the scope's active generation when read.
	ActiveGeneration int64
	WorkType         string
	QueueClass       string
	// ClassPaused: an operator paused the item's class in its scope
	// (workqueue.Queue.PauseClass); nothing of it is claimed until resumed.
	ClassPaused bool
	State       string // pending, blocked, processing, dependency_registration, waiting_dependency, inactive, completed, skipped, dead
	RunAfter    time.Time
	At          time.Time // the database's clock when read
	Attempts    int
	SafeRetries int
	LeaseOwner  string // set while processing
	LeaseToken  int64
	SourceLane  string
	TargetLane  string
	LaneOrdinal int64
	Projection  string // the projection key of a projection generation
	WaitsOn     string // the dependency wake key of a waiting item
	// DependencyKeys are the keys a waiting item needs (any one satisfies
	// it); nil when it waits for nothing.
	DependencyKeys []string
	TerminalAt     time.Time
	Failure        *Failure // the last failure (nil: none recorded)
	ReplayOf       int64    // the parent this item replays (0: an original)
	ReplayDepth    int
	ReplayedAt     time.Time // when this dead item was replayed (zero: not)
	CreatedAt      time.Time
	UpdatedAt      time.Time
	Event          EventContext
	EventCreated   time.Time
	// History is the item's event and work type across replays, the
	// original first; it includes this item.
	History []HistoryEntry
}

// HistoryEntry is one generation of an item across replays.
type HistoryEntry struct {
	WorkID      int64
	ReplayDepth int
	State       string
	Attempts    int
	Failure     *Failure
	CreatedAt   time.Time
	TerminalAt  time.Time
	ReplayedAt  time.Time
}

// Item reads one work item with its event's context and its replay
// history.
func (r *Reader) Item(ctx context.Context, workID int64) (Item, error) {
	if workID <= 0 {
		return Item{}, &InvalidError{Field: "work id", Reason: fmt.Sprintf("%d is not a work id", workID)}
	}
	d, err := r.q.ItemDetail(ctx, workID)
	if errors.Is(err, sql.ErrNoRows) {
		return Item{}, fmt.Errorf("%w: work item %d", ErrNotFound, workID)
	}
	if err != nil {
		return Item{}, fmt.Errorf("inspect: read work item %d: %w", workID, err)
	}
	sc, err := r.q.GetScope(ctx, d.ScopeID)
	if err != nil {
		return Item{}, fmt.Errorf("inspect: scope of work item %d: %w", workID, err)
	}
	paused, err := workqueue.ParsePausedClasses(sc.PausedClasses)
	if err != nil {
		return Item{}, fmt.Errorf("inspect: scope of work item %d: %w", workID, err)
	}
	it := Item{
		ClassPaused: slices.Contains(paused, d.QueueClass),
		WorkID:      d.WorkID, Scope: d.ScopeID, Generation: d.Generation, Stale: d.Generation != sc.ActiveGeneration,
		ActiveGeneration: sc.ActiveGeneration,
		WorkType:         d.WorkType, QueueClass: d.QueueClass, State: d.State, RunAfter: d.RunAfter, At: d.DbNow,
		Attempts: int(d.AttemptCount), SafeRetries: int(d.SafeRetryCount), LeaseOwner: d.LeaseOwner.String,
		LeaseToken: d.LeaseToken, SourceLane: d.SourceLaneKey.String, TargetLane: d.TargetLaneKey.String,
		LaneOrdinal: d.LaneOrdinal, Projection: d.ProjectionKey.String, WaitsOn: d.DependencyWakeKey.String,
		TerminalAt: d.TerminalAt.Time, Failure: failure(d.FailureClass, d.FailureSummary),
		ReplayOf: d.ReplayOfWorkID.Int64, ReplayDepth: int(d.ReplayDepth), ReplayedAt: d.ReplayedAt.Time,
		CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, EventCreated: d.EventCreatedAt,
		Event: EventContext{
			EventID: d.EventID, RouteID: d.RouteID, RouteVersion: d.RouteVersion, EventKind: d.EventKind,
			SourceKind: d.SourceKind, SourceID: d.SourceID, IdempotencyKey: d.IdempotencyKey,
			ReceiptID: d.ReceiptID.Int64, DeliveryID: d.DeliveryID.String, RouteKey: d.RouteKey.String,
			CorrelationID: d.CorrelationID.String,
		},
	}
	if len(d.DependencyKeys) > 0 {
		if err := json.Unmarshal(d.DependencyKeys, &it.DependencyKeys); err != nil {
			return Item{}, fmt.Errorf("inspect: dependency keys of work item %d: %w", workID, err)
		}
	}
	chain, err := r.q.ReplayChain(ctx, gen.ReplayChainParams{EventID: d.EventID, WorkType: d.WorkType})
	if err != nil {
		return Item{}, fmt.Errorf("inspect: replay history of work item %d: %w", workID, err)
	}
	for _, c := range chain {
		it.History = append(it.History, HistoryEntry{
			WorkID: c.WorkID, ReplayDepth: int(c.ReplayDepth), State: c.State, Attempts: int(c.AttemptCount),
			Failure: failure(c.FailureClass, c.FailureSummary), CreatedAt: c.CreatedAt,
			TerminalAt: c.TerminalAt.Time, ReplayedAt: c.ReplayedAt.Time,
		})
	}
	return it, nil
}

func failure(class, summary sql.NullString) *Failure {
	if !class.Valid && !summary.Valid {
		return nil
	}
	return &Failure{Class: class.String, Summary: summary.String}
}

// DeadLetterQuery selects a page of dead letters.
type DeadLetterQuery struct {
	// Generation to read; 0: the scope's active generation.
	Generation int64
	// Filters: empty matches everything.
	WorkType     string
	FailureClass string
	// Time range of death (terminal time): From inclusive, To exclusive;
	// zero: unbounded.
	From, To time.Time
	// Cursor continues after the page that returned it ("": newest first).
	Cursor string
	// Limit is how many entries of the dead range a page reads (default
	// DefaultPageSize, at most MaxPageSize). With filters a page can hold
	// fewer matches than Limit, or none, and still return a Cursor.
	Limit int
}

// Page sizes of DeadLetters.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// DeadLetter is one dead item with its context.
type DeadLetter struct {
	WorkID     int64
	WorkType   string
	QueueClass string
	Attempts   int
	Failure    Failure
	DeadAt     time.Time
	Replayed   bool
	ReplayedAt time.Time
	ReplayOf   int64
	SourceLane string
	TargetLane string
	Projection string
	Event      EventContext
}

// DeadLetterPage is one page, newest first.
type DeadLetterPage struct {
	Scope      string
	Generation int64
	Items      []DeadLetter
	// Next continues after this page; "" when the dead range is exhausted.
	Next string
	// Scanned is how many dead entries the page read (matched or not).
	Scanned int
}

// DeadLetters reads one page of a scope's dead letters, newest first. A
// page reads at most Limit entries of the scope's dead range and their
// rows, whatever the filters: follow Next until it is "" to see them all.
func (r *Reader) DeadLetters(ctx context.Context, scope string, dq DeadLetterQuery) (DeadLetterPage, error) {
	if scope == "" {
		return DeadLetterPage{}, &InvalidError{Field: "scope", Reason: "empty"}
	}
	switch {
	case dq.Limit == 0:
		dq.Limit = DefaultPageSize
	case dq.Limit < 0 || dq.Limit > MaxPageSize:
		return DeadLetterPage{}, &InvalidError{Field: "Limit", Reason: fmt.Sprintf("%d out of range 1..%d", dq.Limit, MaxPageSize)}
	}
	if !dq.From.IsZero() && !dq.To.IsZero() && !dq.From.Before(dq.To) {
		return DeadLetterPage{}, &InvalidError{Field: "From", Reason: "not before To"}
	}
	before, beforeID, err := decodeCursor(dq.Cursor)
	if err != nil {
		return DeadLetterPage{}, err
	}
	if before.IsZero() || (!dq.To.IsZero() && dq.To.Before(before)) {
		before, beforeID = dq.To, 0 // To is exclusive: no entry at To itself
		if before.IsZero() {
			before, beforeID = farFuture, 0
		}
	}
	generation, err := r.generation(ctx, scope, dq.Generation)
	if err != nil {
		return DeadLetterPage{}, err
	}
	from := dq.From
	if from.IsZero() {
		from = farPast
	}
	rows, err := r.q.DeadLetterPage(ctx, gen.DeadLetterPageParams{
		WorkType: dq.WorkType, FailureClass: sql.NullString{String: dq.FailureClass, Valid: true},
		ScopeID: scope, Generation: generation, FromTime: from, BeforeTime: before, BeforeWorkID: beforeID,
		Limit: int32(dq.Limit),
	})
	if err != nil {
		return DeadLetterPage{}, fmt.Errorf("inspect: dead letters of scope %q: %w", scope, err)
	}
	page := DeadLetterPage{Scope: scope, Generation: generation, Scanned: len(rows)}
	for _, d := range rows {
		if d.Matches == 0 {
			continue
		}
		page.Items = append(page.Items, DeadLetter{
			WorkID: d.WorkID, WorkType: d.WorkType, QueueClass: d.QueueClass, Attempts: int(d.AttemptCount),
			Failure: Failure{Class: d.FailureClass.String, Summary: d.FailureSummary.String},
			DeadAt:  d.DeadAt, Replayed: d.ReplayedAt.Valid, ReplayedAt: d.ReplayedAt.Time, ReplayOf: d.ReplayOfWorkID.Int64,
			SourceLane: d.SourceLaneKey.String, TargetLane: d.TargetLaneKey.String, Projection: d.ProjectionKey.String,
			Event: EventContext{
				EventID: d.EventID, RouteID: d.RouteID, RouteVersion: d.RouteVersion, EventKind: d.EventKind,
				SourceKind: d.SourceKind, SourceID: d.SourceID, IdempotencyKey: d.IdempotencyKey,
				ReceiptID: d.ReceiptID.Int64, DeliveryID: d.DeliveryID.String, RouteKey: d.RouteKey.String,
				CorrelationID: d.CorrelationID.String,
			},
		})
	}
	if len(rows) == dq.Limit {
		last := rows[len(rows)-1]
		page.Next = encodeCursor(last.DeadAt, last.WorkID)
	}
	return page, nil
}

// Bounds for an open time range: DATETIME(6) holds years 1000 to 9999.
var (
	farPast   = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	farFuture = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
)

// A cursor is the last entry of a page: its dead time (microseconds) and
// work id, base64url: opaque to callers, stable across processes.
func encodeCursor(at time.Time, workID int64) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(at.UnixMicro()))
	binary.BigEndian.PutUint64(b[8:], uint64(workID))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func decodeCursor(s string) (time.Time, int64, error) {
	if s == "" {
		return time.Time{}, 0, nil
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != 16 {
		return time.Time{}, 0, &InvalidError{Field: "Cursor", Reason: "not a cursor this package returned"}
	}
	at := time.UnixMicro(int64(binary.BigEndian.Uint64(b[:8]))).UTC()
	id := int64(binary.BigEndian.Uint64(b[8:]))
	if at.Before(farPast) || at.After(farFuture) || id <= 0 {
		return time.Time{}, 0, &InvalidError{Field: "Cursor", Reason: "out of range"}
	}
	return at, id, nil
}

// ScopeInfo is one scope row.
type ScopeInfo struct {
	Scope        string
	Generation   int64     // the active generation
	LastAdmitted time.Time // the last enqueue's commit (zero: none yet)
	Created      time.Time
	Paused       []string // queue classes paused in the scope (workqueue.Queue.PauseClass)
}

// Scopes lists up to limit scopes in key order after the scope named after
// ("" from the first).
func (r *Reader) Scopes(ctx context.Context, after string, limit int) ([]ScopeInfo, error) {
	if limit < 1 || limit > MaxPageSize {
		return nil, &InvalidError{Field: "limit", Reason: fmt.Sprintf("%d out of range 1..%d", limit, MaxPageSize)}
	}
	rows, err := r.q.ListScopes(ctx, gen.ListScopesParams{AfterScopeID: after, Limit: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("inspect: list scopes: %w", err)
	}
	out := make([]ScopeInfo, len(rows))
	for i, s := range rows {
		paused, err := workqueue.ParsePausedClasses(s.PausedClasses)
		if err != nil {
			return nil, fmt.Errorf("inspect: scope %q: %w", s.ScopeID, err)
		}
		out[i] = ScopeInfo{Scope: s.ScopeID, Generation: s.ActiveGeneration, Created: s.CreatedAt, Paused: paused}
		if s.AdmittedAt.After(time.Unix(0, 0)) {
			out[i].LastAdmitted = s.AdmittedAt
		}
	}
	return out, nil
}
