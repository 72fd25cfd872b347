package workqueue

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/laneq/laneq/gen"
)

// Dependency states as stored in work_item.state (see queries/dependency.sql).
const (
	// StateDependencyRegistration is the first phase of entering a wait: the
	// item is visible to producers' wakes but its keys are not yet checked.
	StateDependencyRegistration = "dependency_registration"
)

// MaxDependencyKeys bounds Dependency.Keys: every key is point-read when the
// item waits, when it is woken and by the safety pass.
const MaxDependencyKeys = 16

// Dependency is a durable prerequisite a work item waits for instead of
// retrying: any one of Keys satisfied in the item's scope (Queue.Satisfy)
// makes it runnable.
//
// WakeKey groups the waiters one producer wakes, for example the object an
// item links to; it is a hint, never readiness. Keys are the exact facts
// that satisfy the item, for example that object's current and previous
// slots: a producer that satisfies any of them with the same WakeKey wakes
// the item, and a woken item whose keys turn out unsatisfied (an obsolete
// slot's wake) simply waits again, with no attempt and no retry counted.
// Keys and wake keys are compared exactly: "k" and "k " are two keys.
type Dependency struct {
	WakeKey string
	Keys    []string
}

// Validate checks a dependency as Wait and Enqueue do: a wake key and
// 1..MaxDependencyKeys distinct keys, each 1..255 characters of valid
// UTF-8.
func (d Dependency) Validate() error {
	if n := utf8.RuneCountInString(d.WakeKey); n < 1 || n > 255 || !utf8.ValidString(d.WakeKey) {
		return invalidf("dependency wake key must be 1..255 characters of valid UTF-8, got %q", d.WakeKey)
	}
	if len(d.Keys) < 1 || len(d.Keys) > MaxDependencyKeys {
		return invalidf("a dependency needs 1..%d keys, got %d", MaxDependencyKeys, len(d.Keys))
	}
	for i, k := range d.Keys {
		if err := validDependencyKey(k); err != nil {
			return fmt.Errorf("key %d: %w", i, err)
		}
		if slices.Contains(d.Keys[:i], k) {
			return invalidf("dependency key %q appears twice", k)
		}
	}
	return nil
}

func validDependencyKey(k string) error {
	if n := utf8.RuneCountInString(k); n < 1 || n > 255 || !utf8.ValidString(k) {
		return invalidf("dependency key must be 1..255 characters of valid UTF-8, got %q", k)
	}
	return nil
}

// columns is the dependency as work_item stores it.
func (d Dependency) columns() (sql.NullString, json.RawMessage, error) {
	keys, err := json.Marshal(d.Keys)
	if err != nil {
		return sql.NullString{}, nil, fmt.Errorf("encode dependency keys: %w", err)
	}
	return sql.NullString{String: d.WakeKey, Valid: true}, keys, nil
}

// dependencyFrom reads a stored dependency; nil when the row has none. Keys
// that cannot be decoded give a dependency with no keys, which the callers
// treat as satisfied: a waiter must never be stranded by a bad row.
func dependencyFrom(wake sql.NullString, keys json.RawMessage) *Dependency {
	if !wake.Valid && len(keys) == 0 {
		return nil
	}
	return &Dependency{WakeKey: wake.String, Keys: decodeKeys(keys)}
}

// decodeKeys reads stored dependency keys; nil when they cannot be decoded.
func decodeKeys(raw json.RawMessage) []string {
	var keys []string
	if err := json.Unmarshal(raw, &keys); err != nil {
		return nil
	}
	return keys
}

// DependencySatisfied reports whether any of dep's keys is satisfied in
// scope: the recheck of a woken item before any work. One batch point get.
func (qu *Queue) DependencySatisfied(ctx context.Context, scope string, dep Dependency) (bool, error) {
	if len(dep.Keys) == 0 {
		return true, nil // see dependencyFrom
	}
	got, err := qu.q.SatisfiedDependencies(ctx, gen.SatisfiedDependenciesParams{ScopeID: scope, DependencyKeys: dep.Keys})
	if err != nil {
		return false, fmt.Errorf("workqueue: read dependency keys of scope %q: %w", scope, err)
	}
	return len(got) > 0, nil
}

// Wait parks a claimed item until one of dep's keys is satisfied, instead
// of retrying it: the attempt is given back, no retry is counted, and the
// item is invisible to claims and due times while it waits; as its lanes'
// head it keeps their followers behind it.
//
// Two transactions, which close both races with a producer (see
// queries/dependency.sql): the row becomes a dependency registration, which
// producers' wakes already see; then the keys are read under locks and the
// row becomes waiting_dependency, or pending again when one is satisfied
// (runnable is then true). An error after the first committed leaves a
// registration that the safety pass settles (DependencySweep).
func (qu *Queue) Wait(ctx context.Context, c Claimed, dep Dependency) (runnable bool, err error) {
	if err := dep.Validate(); err != nil {
		return false, err
	}
	if c.Scope == "" {
		return false, invalidf("wait: the claimed item of work %d has no scope", c.WorkID)
	}
	wake, keys, err := dep.columns()
	if err != nil {
		return false, err
	}
	err = qu.fencedWrite(ctx, c.Lease, "begin dependency wait of", StateDependencyRegistration, func(ctx context.Context) (int64, error) {
		return qu.q.BeginDependencyWait(ctx, gen.BeginDependencyWaitParams{
			WakeKey: wake, DependencyKeys: keys, WorkID: c.WorkID, LeaseToken: c.Lease.Token,
		})
	})
	if err != nil {
		return false, err
	}
	registration := Lease{WorkID: c.WorkID, Token: c.Lease.Token + 1}
	var state string
	began := time.Now()
	err = qu.inTx(ctx, fmt.Sprintf("settle dependency wait of work %d", c.WorkID), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		var err error
		state, err = settleRegistration(ctx, q, c.Scope, registration, dep.Keys)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("%w (the safety pass settles the registration)", err)
	}
	// Settled by someone else (a producer's wake, the safety pass): the item
	// may be pending, and that one announced it.
	if state == StatePending {
		qu.announceSince(c.Scope, false, began)
	}
	return state != StateWaitingDependency, nil
}

// settleRegistration reads keys under locks and moves the registration
// with token reg.Token to waiting_dependency, or to pending when one of them
// is satisfied. It returns the state it wrote, or "" when the token moved
// on first (a producer's wake or another settle won). Locks: the keys, then
// the row, the order a producer's Satisfy takes them in.
func settleRegistration(ctx context.Context, q *gen.Queries, scope string, reg Lease, keys []string) (string, error) {
	next := StateWaitingDependency
	if len(keys) == 0 {
		next = StatePending // see dependencyFrom
	} else {
		got, err := q.LockSatisfiedDependencies(ctx, gen.LockSatisfiedDependenciesParams{ScopeID: scope, DependencyKeys: keys})
		if err != nil {
			return "", fmt.Errorf("lock dependency keys: %w", err)
		}
		if len(got) > 0 {
			next = StatePending
		}
	}
	n, err := q.SettleDependencyRegistration(ctx, gen.SettleDependencyRegistrationParams{NextState: next, WorkID: reg.WorkID, LeaseToken: reg.Token})
	if err != nil {
		return "", fmt.Errorf("settle registration: %w", err)
	}
	if n == 0 {
		return "", nil
	}
	return next, nil
}

// Satisfy records key as satisfied in scope, then returns every waiter of
// wakeKey to pending (woken counts them) and announces them. It is
// idempotent. Waiters of wakeKey whose own keys do not include key are
// woken too and wait again after their recheck: over-notification costs a
// claim, never a retry.
//
// The key commits first, then the waiters are woken in pages of
// DependencyWakePage, each a short statement of its own (see
// queries/dependency.sql): a wake key with thousands of waiters never
// locks them all at once. An error after the key committed leaves the
// rest of the waiters to the dependency safety pass, which wakes every
// waiter whose key is satisfied.
func (qu *Queue) Satisfy(ctx context.Context, scope, wakeKey, key string) (woken int64, err error) {
	if err := validSatisfy(scope, wakeKey, key); err != nil {
		return 0, err
	}
	err = qu.retryWrite(ctx, "satisfy dependency", func(ctx context.Context) error {
		if err := qu.q.SatisfyDependency(ctx, gen.SatisfyDependencyParams{ScopeID: scope, DependencyKey: key}); err != nil {
			return fmt.Errorf("record key: %w", err)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return qu.wakeWaiters(ctx, scope, wakeKey)
}

// Satisfy is Queue.Satisfy inside the transaction: the key commits with the
// caller's rows (so a producer commits its prerequisite and its
// satisfaction atomically), and its waiters are woken and announced after
// the commit (see Tx.Commit). The key's insert is run once: a transient
// error is returned, and the caller rolls back and runs the transaction
// again (Queue.InTx does).
func (t *Tx) Satisfy(ctx context.Context, scope, wakeKey, key string) error {
	if t.done {
		return ErrTxDone
	}
	if err := validSatisfy(scope, wakeKey, key); err != nil {
		return err
	}
	if err := t.q.SatisfyDependency(ctx, gen.SatisfyDependencyParams{ScopeID: scope, DependencyKey: key}); err != nil {
		return fmt.Errorf("workqueue: satisfy dependency: record key: %w", err)
	}
	w := satisfiedWake{scope: scope, wakeKey: wakeKey}
	if !slices.Contains(t.wakes, w) {
		t.wakes = append(t.wakes, w)
	}
	return nil
}

// satisfiedWake is a scope's wake key, as a Tx remembers the ones it satisfied.
type satisfiedWake struct{ scope, wakeKey string }

func validSatisfy(scope, wakeKey, key string) error {
	if err := validScope(scope); err != nil {
		return err
	}
	return Dependency{WakeKey: wakeKey, Keys: []string{key}}.Validate()
}

// DependencyWakePage bounds the waiters one wake statement returns to
// pending (see WakeDependencyWaitersPage).
const DependencyWakePage = 500

// wakeWaiters returns wakeKey's waiters to pending, a page per statement,
// until a page comes back short, and announces the scope after every page
// that woke any, so workers start on the first page while later ones run.
// A page run again after a lost reply may find nothing left of what its
// first run woke: it is announced all the same.
func (qu *Queue) wakeWaiters(ctx context.Context, scope, wakeKey string) (int64, error) {
	var woken int64
	for {
		var n int64
		runs, began := 0, time.Now()
		err := qu.retryWrite(ctx, "wake dependency waiters", func(ctx context.Context) error {
			runs++
			var err error
			n, err = qu.q.WakeDependencyWaitersPage(ctx, gen.WakeDependencyWaitersPageParams{
				ScopeID: scope, WakeKey: sql.NullString{String: wakeKey, Valid: true}, Limit: DependencyWakePage,
			})
			return err
		})
		if n > 0 || runs > 1 {
			qu.announceSince(scope, false, began)
		}
		if err != nil {
			return woken, fmt.Errorf("%w (the key is satisfied; the dependency safety pass wakes the waiters left)", err)
		}
		woken += n
		if n < DependencyWakePage {
			return woken, nil
		}
		if err := ctx.Err(); err != nil {
			return woken, fmt.Errorf("workqueue: wake dependency waiters: %w (the key is satisfied; the dependency safety pass wakes the waiters left)", err)
		}
	}
}
