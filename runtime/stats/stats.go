// Package stats reads a scope's queue statistics the way the claim path
// sees the queue: the scope's active generation, one queue class at a time,
// the claim's work-type filter, and the database's clock for due times and
// lease expiry. Applications, tests and operators call it instead of
// querying work_item with hard-coded state and index names.
//
// Two readers: Exact counts every live and dead row of each class (its cost
// is the backlog: a diagnostic), Cheap caps every count at CapCount (its
// cost is bounded at any backlog: safe to call often). Drained answers "is
// there any live work left?" with one bounded read.
package stats

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/runtime/workqueue"
)

// CapCount is where Cheap stops counting a bucket: a count above it (it
// reports CapCount+1) means "more than CapCount". queries/stats.sql's
// ClassStatsCapped reads at most CapCount+1 entries per bucket.
const CapCount = 1_000

// ErrInvalid is what every *InvalidError wraps.
var ErrInvalid = errors.New("stats: invalid argument")

// InvalidError names the argument a call refused.
type InvalidError struct {
	Field  string
	Reason string
}

func (e *InvalidError) Error() string { return fmt.Sprintf("stats: invalid %s: %s", e.Field, e.Reason) }

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// ErrUnknownScope is workqueue.ErrUnknownScope: the scope has no scope row.
var ErrUnknownScope = workqueue.ErrUnknownScope

// Filter selects what is counted, as a claimer's configuration does.
type Filter struct {
	// Classes to count; empty: every class the scope has had work of
	// (scope_work_kind).
	Classes []string
	// WorkTypes counted in every class; empty: each class's work types from
	// scope_work_kind (everything a claimer of the class could be serving).
	WorkTypes []string
}

// Counts are one class's (or a scope's) items by what claim would do with
// them now.
type Counts struct {
	// Due: pending lane heads whose run_after has passed: claimable now.
	Due int64
	// NotDue: pending rows whose run_after is ahead (delayed enqueues and
	// retries in backoff).
	NotDue int64
	// Retrying: the part of NotDue that was claimed before (retries in
	// backoff). Exact only: Cheap reports -1, because telling a retry from
	// a delayed item takes a row read each.
	Retrying int64
	// Leased: processing rows whose lease has not ended.
	Leased int64
	// ExpiredLeases: processing rows whose lease ended: reclaimable now.
	ExpiredLeases int64
	// LaneBlocked: lane followers waiting for the rows ahead of them.
	LaneBlocked int64
	// WaitingDependency: rows waiting on a dependency (registering or
	// registered).
	WaitingDependency int64
	// InactiveSuccessors: projection successors waiting for the active
	// generation of their projection to finish.
	InactiveSuccessors int64
	// Dead: terminal failures (replayable; replayed ones stay counted).
	Dead int64
	// OldestDue: how long the longest-due claimable row has been due
	// (0 when nothing is due).
	OldestDue time.Duration
	// OldestExpiredLease: how long ago the oldest expired lease ended.
	OldestExpiredLease time.Duration
}

// Live is every count but Dead: the items the scope still has to run.
func (c Counts) Live() int64 {
	return c.Due + c.NotDue + c.Leased + c.ExpiredLeases + c.LaneBlocked + c.WaitingDependency + c.InactiveSuccessors
}

func (c *Counts) add(o Counts) {
	c.Due += o.Due
	c.NotDue += o.NotDue
	if c.Retrying < 0 || o.Retrying < 0 {
		c.Retrying = -1
	} else {
		c.Retrying += o.Retrying
	}
	c.Leased += o.Leased
	c.ExpiredLeases += o.ExpiredLeases
	c.LaneBlocked += o.LaneBlocked
	c.WaitingDependency += o.WaitingDependency
	c.InactiveSuccessors += o.InactiveSuccessors
	c.Dead += o.Dead
	c.OldestDue = max(c.OldestDue, o.OldestDue)
	c.OldestExpiredLease = max(c.OldestExpiredLease, o.OldestExpiredLease)
}

// Class is one queue class's counts.
type Class struct {
	Class     string
	WorkTypes []string // the work types counted
	Counts
	// Capped (Cheap only): some count stopped at CapCount+1.
	Capped bool
}

// Scope is a scope's statistics at one instant of the database's clock.
type Scope struct {
	Scope      string
	Generation int64     // the active generation counted
	At         time.Time // the database's clock (UTC) the due splits used
	Exact      bool
	Classes    []Class // in class order
	Total      Counts  // the sum of Classes (oldest ages: the largest)
	Capped     bool    // some class's count stopped at CapCount+1
}

// Reader reads statistics.
type Reader struct {
	q *gen.Queries
}

// New returns a Reader on db. Like workqueue.New it refuses a pool whose
// sessions are not in UTC (due times are compared with NOW(6)), and it
// runs its statements prepared.
func New(db *sql.DB) (*Reader, error) {
	st, err := store.New(db, store.Options{})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return &Reader{q: st.Queries()}, nil
}

// NewFromQueue returns a Reader on qu's pool and prepared statements
// (checked when qu was made; Config.TextProtocol honoured).
func NewFromQueue(qu *workqueue.Queue) *Reader { return &Reader{q: qu.Store().Queries()} }

// Exact counts every bucket exactly. It reads every live and dead row of
// each counted class (index entries only, plus one row read per not-due
// pending row for Retrying): call it for a diagnosis, not in a loop.
func (r *Reader) Exact(ctx context.Context, scope string, f Filter) (Scope, error) {
	return r.read(ctx, scope, f, true)
}

// Cheap counts every bucket up to CapCount+1, reading at most that many
// index entries per bucket and class: its cost does not grow with the
// backlog. Retrying is -1 (not counted).
func (r *Reader) Cheap(ctx context.Context, scope string, f Filter) (Scope, error) {
	return r.read(ctx, scope, f, false)
}

func (r *Reader) read(ctx context.Context, scope string, f Filter, exact bool) (Scope, error) {
	if err := validate(scope, f); err != nil {
		return Scope{}, err
	}
	sc, err := r.scope(ctx, scope)
	if err != nil {
		return Scope{}, err
	}
	classes, err := r.classes(ctx, scope, f)
	if err != nil {
		return Scope{}, err
	}
	out := Scope{Scope: scope, Generation: sc.ActiveGeneration, At: sc.DbNow, Exact: exact}
	if !exact {
		out.Total.Retrying = -1
	}
	for _, c := range classes {
		var err error
		if exact {
			c.Counts, err = r.exactClass(ctx, sc, c)
		} else {
			c.Counts, c.Capped, err = r.cappedClass(ctx, sc, c)
		}
		if err != nil {
			return Scope{}, fmt.Errorf("stats: class %q of scope %q: %w", c.Class, scope, err)
		}
		out.Total.add(c.Counts)
		out.Capped = out.Capped || c.Capped
		out.Classes = append(out.Classes, c)
	}
	return out, nil
}

// Drained reports whether the scope's active generation has no live item
// left (dead ones do not count), any class or work type. One statement
// reading at most one index entry per live state.
func (r *Reader) Drained(ctx context.Context, scope string) (bool, error) {
	if err := validate(scope, Filter{}); err != nil {
		return false, err
	}
	sc, err := r.scope(ctx, scope)
	if err != nil {
		return false, err
	}
	rows, err := r.q.AnyLiveWork(ctx, gen.AnyLiveWorkParams{ScopeID: scope, Generation: sc.ActiveGeneration})
	if err != nil {
		return false, fmt.Errorf("stats: live work of scope %q: %w", scope, err)
	}
	return len(rows) == 0, nil
}

func (r *Reader) scope(ctx context.Context, scope string) (gen.GetScopeRow, error) {
	sc, err := r.q.GetScope(ctx, scope)
	if errors.Is(err, sql.ErrNoRows) {
		return sc, fmt.Errorf("stats: %w: %q", ErrUnknownScope, scope)
	}
	if err != nil {
		return sc, fmt.Errorf("stats: read scope %q: %w", scope, err)
	}
	return sc, nil
}

// classes resolves the filter against the scope's work kinds.
func (r *Reader) classes(ctx context.Context, scope string, f Filter) ([]Class, error) {
	kinds, err := r.q.ListWorkKinds(ctx, scope)
	if err != nil {
		return nil, fmt.Errorf("stats: work kinds of scope %q: %w", scope, err)
	}
	byClass := map[string][]string{}
	for _, k := range kinds {
		byClass[k.QueueClass] = append(byClass[k.QueueClass], k.WorkType)
	}
	names := f.Classes
	if len(names) == 0 {
		for c := range byClass {
			names = append(names, c)
		}
	}
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]Class, 0, len(names))
	for _, name := range names {
		types := f.WorkTypes
		if len(types) == 0 {
			types = byClass[name]
		}
		types = slices.Clone(types)
		slices.Sort(types)
		out = append(out, Class{Class: name, WorkTypes: slices.Compact(types)})
	}
	return out, nil
}

func (r *Reader) exactClass(ctx context.Context, sc gen.GetScopeRow, c Class) (Counts, error) {
	var n Counts
	if len(c.WorkTypes) == 0 {
		return n, nil // no work type: nothing a claimer could take
	}
	rows, err := r.q.ClassStatsExact(ctx, gen.ClassStatsExactParams{
		DbNow: sc.DbNow, ScopeID: sc.ScopeID, Generation: sc.ActiveGeneration, QueueClass: c.Class, WorkTypes: c.WorkTypes,
	})
	if err != nil {
		return n, fmt.Errorf("exact counts: %w", err)
	}
	for _, row := range rows {
		first := store.FromMicros(row.FirstRunAfterMicros)
		switch row.State {
		case "pending":
			n.Due, n.NotDue = row.AtOrPastRunAfter, row.Total-row.AtOrPastRunAfter
			if n.Due > 0 {
				n.OldestDue = -first
			}
		case "processing":
			n.ExpiredLeases, n.Leased = row.AtOrPastRunAfter, row.Total-row.AtOrPastRunAfter
			if n.ExpiredLeases > 0 {
				n.OldestExpiredLease = -first
			}
		case "blocked":
			n.LaneBlocked = row.Total
		case "dependency_registration", "waiting_dependency":
			n.WaitingDependency += row.Total
		case "inactive":
			n.InactiveSuccessors = row.Total
		case "dead":
			n.Dead = row.Total
		default:
			return n, fmt.Errorf("exact counts: unexpected state %q", row.State)
		}
	}
	if n.NotDue > 0 {
		n.Retrying, err = r.q.ClassRetryingExact(ctx, gen.ClassRetryingExactParams{
			ScopeID: sc.ScopeID, Generation: sc.ActiveGeneration, QueueClass: c.Class, DbNow: sc.DbNow, WorkTypes: c.WorkTypes,
		})
		if err != nil {
			return n, fmt.Errorf("retrying count: %w", err)
		}
	}
	return n, nil
}

func (r *Reader) cappedClass(ctx context.Context, sc gen.GetScopeRow, c Class) (Counts, bool, error) {
	n := Counts{Retrying: -1}
	if len(c.WorkTypes) == 0 {
		return n, false, nil
	}
	rows, err := r.q.ClassStatsCapped(ctx, gen.ClassStatsCappedParams{
		ScopeID: sc.ScopeID, Generation: sc.ActiveGeneration, QueueClass: c.Class, DbNow: sc.DbNow, WorkTypes: c.WorkTypes,
	})
	if err != nil {
		return n, false, fmt.Errorf("capped counts: %w", err)
	}
	capped := false
	for _, row := range rows {
		capped = capped || row.Total > CapCount
		first := store.FromMicros(row.FirstRunAfterMicros)
		switch row.Bucket {
		case "due":
			n.Due = row.Total
			if row.Total > 0 {
				n.OldestDue = -first
			}
		case "not_due":
			n.NotDue = row.Total
		case "expired_leases":
			n.ExpiredLeases = row.Total
			if row.Total > 0 {
				n.OldestExpiredLease = -first
			}
		case "leased":
			n.Leased = row.Total
		case "lane_blocked":
			n.LaneBlocked = row.Total
		case "waiting_dependency":
			n.WaitingDependency = row.Total
		case "inactive_successors":
			n.InactiveSuccessors = row.Total
		case "dead":
			n.Dead = row.Total
		default:
			return n, false, fmt.Errorf("capped counts: unexpected bucket %q", row.Bucket)
		}
	}
	return n, capped, nil
}

// FormatCount shows a count for people: "-" for a count that was not
// taken (Cheap's Retrying), ">1000" for a capped count that stopped at
// CapCount+1 (exact false), the number otherwise.
func FormatCount(n int64, exact bool) string {
	switch {
	case n < 0:
		return "-"
	case !exact && n > CapCount:
		return ">" + strconv.Itoa(CapCount)
	}
	return strconv.FormatInt(n, 10)
}

func validate(scope string, f Filter) error {
	if scope == "" {
		return &InvalidError{Field: "scope", Reason: "empty"}
	}
	for _, c := range f.Classes {
		if c == "" {
			return &InvalidError{Field: "Filter.Classes", Reason: "an empty class"}
		}
	}
	for _, w := range f.WorkTypes {
		if w == "" {
			return &InvalidError{Field: "Filter.WorkTypes", Reason: "an empty work type"}
		}
	}
	return nil
}
