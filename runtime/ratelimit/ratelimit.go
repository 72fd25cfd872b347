// Package ratelimit holds the rate limits of a scope's work types across
// every process: at most N starts per Per, counted by the database's clock,
// with no row that every claim writes. A limit is one work type's, or a
// named budget (Key) that several work types share; with PerKey, every
// rate key of its items (workqueue.Work.RateKey: a customer, an account)
// has a budget of its own.
//
// A limit's period is cut into k = min(N, 10) windows, and window i of the
// epoch (by the database's clock) may start N/k items, one more for the
// first N mod k windows of each period, so k consecutive windows hold N
// exactly. Each window has a row (rate_window) counting the starts granted
// in it. A process takes a share of the current window's budget in one
// short transaction when its own share is spent and an item is about to
// start (workqueue.Queue.TakeRateShare), sized to the items it claimed
// that wait to start, and spends the share locally: a transaction per
// share, not per claim or start. No process is granted more than the
// window has left. So any window-aligned period starts at most N items,
// and any span of length Per (it meets at most k+1 windows) at most
// N + ceil(N/k): 55 for 50 per second. A share's transaction may wait for
// another process's lock on the window's row; meanwhile only the starts
// of that budget in this process wait (for the share it takes): claims,
// unlimited work types included, and other budgets' starts go on. Every
// sweepEvery a taker deletes the scope's ended windows, of every limit
// and key (workqueue.Queue.PruneEndedRateWindows).
//
// Starts are counted as they happen, just before the handler runs
// (Take), so an item claimed in one window that waits for an executor into
// the next spends the next window's budget. The worker rechecks an item's
// dependency first: an item that goes back to waiting unrun spends no
// start (and gives its place in the next share back, Unclaimed). A
// limited work type whose window is spent is left out of the next claim
// (Admit: its items stay pending, due, attempts untouched, and other work
// is claimed as usual), and the worker's controller is told to claim
// again when the next window opens. An item that finds no start left when
// its executor takes it (a claim returns up to its Max) is given back
// unrun until a later window (workqueue.Queue.Defer: its attempt is not
// counted). Refusals fill the windows after the current one a quota each,
// and that booking carries from window to window, so a backlog of one key
// is spread over the windows it needs once, instead of coming due
// together again. Each process books its own refusals: with P processes
// refusing one key, a window may find up to P quotas due, and the items
// beyond its quota are refused and sent on again.
//
// A limit per key cannot leave a spent key out of a claim (the claim
// index does not hold the key, and a scan that skipped a hot key's
// backlog would read through all of it): its items are claimed as other
// work is, and refused ones are spread as above. So a key's backlog costs
// each of its items one claim and release more (a few more with several
// processes), and delays other
// work of the type while it is being spread; it never blocks it, and the
// budget holds for every key.
package ratelimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Limit caps the starts of one work type of a scope across all processes,
// or (Key) the starts of several work types together: a budget named Key
// shared by WorkTypes, such as one upstream API that several kinds of work
// call. Set WorkType, or Key and WorkTypes. Every process serving a limited
// work type must configure the same limit: the windows' rows (named by
// the limit's name, Key or WorkType) count starts, the quota is each
// taker's.
type Limit struct {
	WorkType  string        // the limited work type, for a limit of its own
	Key       string        // a budget's name, 1..64 ASCII bytes, shared by WorkTypes
	WorkTypes []string      // the work types spending Key's budget
	N         int           // starts allowed per Per (at least 1)
	Per       time.Duration // at least 10ms, in whole microseconds
	// PerKey gives every rate key of the limit's items (Work.RateKey; the
	// items without one share the empty key's) a budget of its own of N
	// per Per, instead of one budget for all: N calls a second per
	// customer, say. Its windows' rows are named by a hash of the limit's
	// name and the key (BudgetName).
	PerKey bool
}

// Name is what the limit's windows are counted under: Key, or WorkType.
// A Key and a work type with a limit of its own must not share a name.
func (l Limit) Name() string {
	if l.Key != "" {
		return l.Key
	}
	return l.WorkType
}

// Types are the work types spending the limit's budget.
func (l Limit) Types() []string {
	if l.Key != "" {
		return l.WorkTypes
	}
	return []string{l.WorkType}
}

// windows is k, the windows of one period.
func (l Limit) windows() int64 { return int64(min(l.N, 10)) }

// windowMicros is one window's length.
func (l Limit) windowMicros() int64 { return l.Per.Microseconds() / l.windows() }

// quota is window i's budget: N/k, plus one in the first N mod k windows
// of each period.
func (l Limit) quota(i int64) int {
	k := l.windows()
	q := int64(l.N) / k
	if ((i%k)+k)%k < int64(l.N)%k {
		q++
	}
	return int(q)
}

// Bound is the most starts any span of length Per can hold: N + ceil(N/k).
func (l Limit) Bound() int {
	k := int(l.windows())
	return l.N + (l.N+k-1)/k
}

func (l Limit) validate() error {
	switch {
	case l.Key != "" && l.WorkType != "":
		return fmt.Errorf("%w: rate limit %q: set Key (with WorkTypes) or WorkType, not both", workqueue.ErrInvalid, l.Key)
	case l.Key == "" && len(l.WorkTypes) > 0:
		return fmt.Errorf("%w: rate limit of %q: WorkTypes share a Key's budget: set Key", workqueue.ErrInvalid, l.WorkTypes)
	case l.Key != "" && len(l.WorkTypes) == 0:
		return fmt.Errorf("%w: rate limit %q: Key needs the WorkTypes that share it", workqueue.ErrInvalid, l.Key)
	case workqueue.ValidWorkType(l.Name()) != nil || strings.HasPrefix(l.Name(), keyedPrefix):
		// A work type's rule (1..64 printable ASCII without spaces): the
		// rows' limit_name is ascii_bin, which pads with spaces, so "crm"
		// and "crm " would count in one budget. Names beginning with the
		// prefix are the per-key budgets'.
		return fmt.Errorf("%w: rate limit name (Key or WorkType) %q must be 1..64 printable ASCII characters without spaces, not beginning with %q", workqueue.ErrInvalid, l.Name(), keyedPrefix)
	case l.N < 1:
		return fmt.Errorf("%w: rate limit %q: N must be at least 1, got %d", workqueue.ErrInvalid, l.Name(), l.N)
	case l.Per < 10*time.Millisecond || l.Per%time.Microsecond != 0:
		return fmt.Errorf("%w: rate limit %q: Per must be at least 10ms in whole microseconds, got %s", workqueue.ErrInvalid, l.Name(), l.Per)
	}
	seen := map[string]bool{}
	for _, t := range l.WorkTypes {
		if err := workqueue.ValidWorkType(t); err != nil {
			return fmt.Errorf("rate limit %q: %w", l.Key, err)
		}
		if seen[t] {
			return fmt.Errorf("%w: rate limit %q lists work type %q twice", workqueue.ErrInvalid, l.Key, t)
		}
		seen[t] = true
	}
	return nil
}

// keyedPrefix begins the names of per-key budgets' rows; no limit's own
// name may.
const keyedPrefix = "#"

// BudgetName is the limit_name of the rate_window rows of rateKey's
// budget under a PerKey limit named limitName (Limit.Name): "#" and a hash
// of the two, so any key (up to 128 bytes) fits the column's 64, and no
// two limits or keys share rows (128 bits). Operators find a key's rows
// with it.
func BudgetName(limitName, rateKey string) string {
	sum := sha256.Sum256([]byte(limitName + "\x00" + rateKey))
	return keyedPrefix + hex.EncodeToString(sum[:16])
}

// limit is a Limit and its budgets in this process.
type limit struct {
	Limit
	whole *share            // the limit's one budget (not PerKey)
	keyed map[string]*share // PerKey: a budget per rate key, made as items of it are claimed
}

// budget is the share that counts starts of rateKey.
func (m *limit) budget(rateKey string) *share {
	if !m.PerKey {
		return m.whole
	}
	s := m.keyed[rateKey]
	if s == nil {
		s = newShare(m.Limit, BudgetName(m.Name(), rateKey))
		m.keyed[rateKey] = s
	}
	return s
}

// share is a process's share of one window of one budget.
type share struct {
	Limit
	name   string // the budget's rows' limit_name
	window int64  // the window the share is of
	left   int    // starts of the share not spent yet
	spent  bool   // the window had nothing left to grant
	// waiting counts items claimed (Claimed) that have not asked Take
	// yet: the size of the next share, so a process takes what it will
	// start, not what it could.
	waiting int
	// spreadTo is the latest window refused items were sent to, and
	// spreadUsed how many were: refusals fill the windows after the
	// current one a quota each, carried from window to window, so a
	// backlog is sent on once, not again with every window's refusals.
	spreadTo   int64
	spreadUsed int
	// turn is held by the one Take of this budget at a time, across its
	// share's transaction, which may wait for another process's lock on
	// the window's row: the other Takes of the budget wait here for the
	// share it takes (one transaction per process and window), while
	// Limiter.mu, which every claim turn takes (Admit), is held only
	// between statements. Taken before Limiter.mu, never while holding it.
	turn chan struct{}
	// takers counts the Takes holding or waiting for turn: sweepDue
	// keeps their budget, so a key's next Take cannot make a second one
	// and run a transaction beside theirs.
	takers int
}

func newShare(l Limit, name string) *share {
	return &share{Limit: l, name: name, window: -1, turn: make(chan struct{}, 1)}
}

// Limiter is one process's view of a scope's limits. Safe for concurrent
// use.
type Limiter struct {
	qu    *workqueue.Queue
	scope string
	clk   clock.Clock
	keep  time.Duration // Options.KeepEnded

	// mu guards what follows and the budgets' shares, and is never held
	// across a statement: Admit takes it in every claim turn, so a share
	// transaction waiting for a lock must not hold it (see share.turn).
	mu        sync.Mutex
	byType    map[string]*limit
	offset    time.Duration // the database's clock minus clk, as last measured
	synced    bool          // offset measured at least once
	nextSweep time.Time     // when Take next forgets idle keys and prunes ended windows (sweepDue)
}

// Options tune a Limiter.
type Options struct {
	// Clock is the worker's clock (its reading is corrected by the
	// database's); nil is the real one.
	Clock clock.Clock
	// KeepEnded is how long a window's row stays after the window ended
	// before a taker deletes it (PruneEndedRateWindows): at least
	// MinKeepEnded, the default. Keep more to read recent windows' grants
	// back (laneq bench verifies them).
	KeepEnded time.Duration
}

// MinKeepEnded is the least (and default) Options.KeepEnded: a taker
// whose estimate of the database's clock lags may still lock a window
// that just ended, to learn it is not current.
const MinKeepEnded = time.Second

// New checks limits and opts and returns a Limiter of scope.
func New(qu *workqueue.Queue, scope string, limits []Limit, opts Options) (*Limiter, error) {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.KeepEnded == 0 {
		opts.KeepEnded = MinKeepEnded
	}
	if opts.KeepEnded < MinKeepEnded {
		return nil, fmt.Errorf("%w: rate limits: ended windows must be kept (KeepEnded; worker.Config.RateWindowsKept) at least %s, got %s", workqueue.ErrInvalid, MinKeepEnded, opts.KeepEnded)
	}
	l := &Limiter{qu: qu, scope: scope, clk: opts.Clock, keep: opts.KeepEnded, byType: map[string]*limit{}}
	names := map[string]bool{}
	for _, lim := range limits {
		if err := lim.validate(); err != nil {
			return nil, err
		}
		if names[lim.Name()] {
			return nil, fmt.Errorf("%w: two rate limits are named %q (a Key and a work type limited alone share a name)", workqueue.ErrInvalid, lim.Name())
		}
		names[lim.Name()] = true
		m := &limit{Limit: lim}
		if lim.PerKey {
			m.keyed = map[string]*share{}
		} else {
			m.whole = newShare(lim, lim.Name())
		}
		for _, t := range lim.Types() {
			if l.byType[t] != nil {
				return nil, fmt.Errorf("%w: work type %q has two rate limits", workqueue.ErrInvalid, t)
			}
			l.byType[t] = m
		}
	}
	return l, nil
}

// Limited reports whether workType has a limit.
func (l *Limiter) Limited(workType string) bool { return l.byType[workType] != nil }

// GatesClaims reports whether workType's claims are left out while its
// budget is spent (Admit): a limit of one budget. A limit per key cannot
// be (see the package comment), so its work types are claimed as
// unlimited ones are, and only Take limits them.
func (l *Limiter) GatesClaims(workType string) bool {
	m := l.byType[workType]
	return m != nil && !m.PerKey
}

// now is the database's clock as this process estimates it. Under l.mu.
func (l *Limiter) now() time.Time { return l.clk.Now().Add(l.offset) }

// windowOf is the window of s at t.
func windowOf(s *share, t time.Time) int64 {
	us, w := t.UnixMicro(), s.windowMicros()
	return (us - ((us%w)+w)%w) / w
}

// nextOpen is when the window after s's current one opens, on clk.
// Under l.mu.
func (l *Limiter) nextOpen(s *share, window int64) time.Time {
	return time.UnixMicro((window + 1) * s.windowMicros()).Add(-l.offset)
}

// Admit returns the work types of types that may be claimed now:
// unlimited ones, and limited ones whose current window is not known to
// be spent. For a limited type left out, retryAt is when its next window
// opens (on the Limiter's clock; the earliest of them), for the caller to
// claim again then. It takes no share: Take does, as items start, sized
// to the items claimed and not started yet (Claimed).
func (l *Limiter) Admit(ctx context.Context, types []string) (admitted []string, retryAt time.Time, err error) {
	if err := l.sync(ctx); err != nil {
		return nil, time.Time{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, t := range types {
		m := l.byType[t]
		if m == nil || m.PerKey {
			admitted = append(admitted, t)
			continue
		}
		s := m.whole
		w := windowOf(s, l.now())
		if s.window != w || s.left > 0 || !s.spent {
			admitted = append(admitted, t)
		} else if at := l.nextOpen(s, w); retryAt.IsZero() || at.Before(retryAt) {
			retryAt = at
		}
	}
	return admitted, retryAt, nil
}

// Claimed records n claimed items of workType (and rateKey, for a limit
// per key) that will ask Take to start: the size of the next share.
func (l *Limiter) Claimed(workType, rateKey string, n int) {
	m := l.byType[workType]
	if m == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	m.budget(rateKey).waiting += n
	l.mu.Unlock()
}

// sync measures the database clock's offset once (resync measures it
// again). Not under l.mu.
func (l *Limiter) sync(ctx context.Context) error {
	l.mu.Lock()
	synced := l.synced
	l.mu.Unlock()
	if synced {
		return nil
	}
	return l.resync(ctx)
}

// resync measures the database clock's offset from the middle of one
// read of it: a read that took long (a paused server, a dropped
// connection) is off by up to half its time, which the next window's
// check (TakeRateShare's NotCurrent) finds and sends here again. Not
// under l.mu: the read is a statement.
func (l *Limiter) resync(ctx context.Context) error {
	before := l.clk.Now()
	now, err := l.qu.DatabaseNow(ctx)
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	after := l.clk.Now()
	l.mu.Lock()
	l.offset, l.synced = now.Sub(before.Add(after.Sub(before)/2)), true
	l.mu.Unlock()
	return nil
}

// topUp returns the starts left in this process's share of s's current
// window, taking a share of the window (as many starts as items wait for
// one, Claimed) when none are left and the window has some. The caller
// holds s.turn, so no other Take changes s meanwhile; topUp takes l.mu
// only between statements (Admit reads s under it).
func (l *Limiter) topUp(ctx context.Context, s *share) (left int, err error) {
	l.mu.Lock()
	w := l.currentWindow(s)
	left, spent, want := s.left, s.spent, max(s.waiting, 1)
	l.mu.Unlock()
	for try := 0; left == 0 && !spent; try++ {
		got, err := l.qu.TakeRateShare(ctx, l.scope, s.name, w, s.windowMicros(), want, s.quota(w))
		if err != nil {
			return 0, fmt.Errorf("ratelimit: %w", err)
		}
		if got.NotCurrent {
			// This process's estimate of the database's clock is off: measure
			// it again and ask for the window it is in, once; failing that,
			// the item waits for the next window.
			if try > 0 {
				return 0, nil
			}
			if err := l.resync(ctx); err != nil {
				return 0, err
			}
			l.mu.Lock()
			w, want = l.currentWindow(s), max(s.waiting, 1)
			l.mu.Unlock()
			continue
		}
		l.mu.Lock()
		s.left, s.spent = got.Granted, got.Used >= s.quota(w)
		left, spent = s.left, s.spent
		l.mu.Unlock()
	}
	return left, nil
}

// currentWindow moves s to the current window, if it is not there yet,
// and returns it. Under l.mu.
func (l *Limiter) currentWindow(s *share) int64 {
	w := windowOf(s, l.now())
	if w != s.window {
		s.window, s.left, s.spent = w, 0, false // a past window's share is worthless
	}
	return w
}

// Take spends one start of workType (counted under rateKey for a limit
// per key), just before its handler starts: from this process's share of
// the current window, topped up from the window's budget when spent. It
// reports false, with when the item may ask again (on the Limiter's
// clock), when the window has nothing left: the caller gives the item
// back unrun until then. The window's refusals are spread over the
// windows after it, a quota each, so a backlog does not come due again
// all at once. Starts are counted when they happen, so an item claimed in
// one window that waits for an executor into the next spends the next
// window's budget. An unlimited work type always starts.
func (l *Limiter) Take(ctx context.Context, workType, rateKey string) (ok bool, retryAt time.Time, err error) {
	m := l.byType[workType]
	if m == nil {
		return true, time.Time{}, nil
	}
	ok, retryAt, prune, err := l.take(ctx, m, rateKey)
	if prune {
		l.pruneEnded(ctx)
	}
	return ok, retryAt, err
}

// take is Take in the turn of rateKey's budget (share.turn); prune
// reports that Take is to delete the scope's ended windows.
func (l *Limiter) take(ctx context.Context, m *limit, rateKey string) (ok bool, retryAt time.Time, prune bool, err error) {
	if err := l.sync(ctx); err != nil {
		return false, time.Time{}, false, err
	}
	l.mu.Lock()
	prune = l.sweepDue()
	s := m.budget(rateKey)
	s.waiting = max(s.waiting-1, 0) // this item asks once: it starts or is given back
	s.takers++
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		s.takers--
		l.mu.Unlock()
	}()
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return false, time.Time{}, prune, fmt.Errorf("ratelimit: wait for the share of %q another start of this process is taking: %w", s.name, ctx.Err())
	}
	defer func() { <-s.turn }()
	left, err := l.topUp(ctx, s)
	if err != nil {
		return false, time.Time{}, prune, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if left == 0 {
		return false, l.spread(s), prune, nil
	}
	s.left--
	return true, time.Time{}, prune, nil
}

// spread sends a refused item of s to the first window after the current
// one that this process has not sent a quota of refusals to yet, and
// returns when it opens (on the Limiter's clock). Under l.mu.
func (l *Limiter) spread(s *share) time.Time {
	if s.spreadTo <= s.window {
		s.spreadTo, s.spreadUsed = s.window+1, 0
	}
	for s.spreadUsed >= s.quota(s.spreadTo) {
		s.spreadTo, s.spreadUsed = s.spreadTo+1, 0
	}
	s.spreadUsed++
	return l.nextOpen(s, s.spreadTo-1)
}

// Unclaimed takes back one Claimed item of workType (and rateKey) that is
// given back without asking Take (an item claimed ahead that could not
// renew its lease), so its key's next share is not sized for it and the
// key can be forgotten when idle.
func (l *Limiter) Unclaimed(workType, rateKey string) {
	m := l.byType[workType]
	if m == nil {
		return
	}
	l.mu.Lock()
	s := m.budget(rateKey)
	s.waiting = max(s.waiting-1, 0)
	l.mu.Unlock()
}

// sweepEvery is how often Take forgets idle keys and deletes the scope's
// ended windows, and sweepSoon how soon it deletes again when a delete
// left more (a full batch) or failed.
const (
	sweepEvery = 10 * time.Second
	sweepSoon  = time.Second
)

// sweepDue reports whether a sweep is due, and if so forgets the budgets
// of keys with no item waiting to start, none sent to a later window
// (spread), no share of the current window and no Take under way, so a
// process's memory follows the keys in use, not every key ever seen. The
// caller then deletes the ended windows (pruneEnded). Under l.mu.
func (l *Limiter) sweepDue() bool {
	now := l.clk.Now()
	if now.Before(l.nextSweep) {
		return false
	}
	l.nextSweep = now.Add(sweepEvery)
	for _, m := range l.byType {
		for key, s := range m.keyed {
			if current := windowOf(s, l.now()); s.waiting == 0 && s.takers == 0 && s.spreadTo <= current && s.window < current {
				delete(m.keyed, key)
			}
		}
	}
	return true
}

// pruneEnded deletes a batch of the scope's windows that ended over
// Options.KeepEnded ago, of every limit and key, whichever process wrote
// them (rows of keys whose processes stopped included): one statement,
// outside l.mu, on a context of its own (the item's may end first). A
// full batch, or a failure, brings the next sweep forward.
func (l *Limiter) pruneEnded(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	n, err := l.qu.PruneEndedRateWindows(ctx, l.scope, l.keep)
	if err == nil && n < workqueue.PruneRateWindowsBatch {
		return
	}
	l.mu.Lock()
	if soon := l.clk.Now().Add(sweepSoon); soon.Before(l.nextSweep) {
		l.nextSweep = soon
	}
	l.mu.Unlock()
}
