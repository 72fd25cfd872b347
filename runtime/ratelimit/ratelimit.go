// Package ratelimit holds the rate limits of a scope's work types across
// every process: at most N starts per Per, counted by the database's clock,
// with no row that every claim writes. A limit is one work type's, or a
// named budget (Key) that several work types share.
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
// window has left. So any
// window-aligned period starts at most N items, and any span of length Per
// (it meets at most k+1 windows) at most N + ceil(N/k): 55 for 50 per
// second.
//
// Starts are counted as they happen, just before the handler runs
// (Take), so an item claimed in one window that waits for an executor into
// the next spends the next window's budget. A limited work type whose
// window is spent is left out of the next claim (Admit: its items stay
// pending, due, attempts untouched, and other work is claimed as usual),
// and the worker's controller is told to claim again when the next window
// opens. An item that finds no start left when its executor takes it (a
// claim returns up to its Max) is given back unrun until the next window
// (workqueue.Queue.Defer: its attempt is not counted).
package ratelimit

import (
	"context"
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
	case len(l.Name()) < 1 || len(l.Name()) > 64:
		return fmt.Errorf("%w: rate limit name (Key or WorkType) must be 1..64 bytes, got %d", workqueue.ErrInvalid, len(l.Name()))
	case !ascii(l.Name()) || strings.TrimRight(l.Name(), " ") != l.Name():
		// The rows' limit_name is ascii_bin, which pads with spaces: "crm"
		// and "crm " would count in one budget.
		return fmt.Errorf("%w: rate limit name %q must be ASCII without trailing spaces", workqueue.ErrInvalid, l.Name())
	case l.N < 1:
		return fmt.Errorf("%w: rate limit %q: N must be at least 1, got %d", workqueue.ErrInvalid, l.Name(), l.N)
	case l.Per < 10*time.Millisecond || l.Per%time.Microsecond != 0:
		return fmt.Errorf("%w: rate limit %q: Per must be at least 10ms in whole microseconds, got %s", workqueue.ErrInvalid, l.Name(), l.Per)
	}
	for _, t := range l.WorkTypes {
		if t == "" {
			return fmt.Errorf("%w: rate limit %q: a work type is empty", workqueue.ErrInvalid, l.Key)
		}
	}
	return nil
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// share is a process's share of one window of one limit.
type share struct {
	Limit
	window int64 // the window the share is of
	left   int   // starts of the share not spent yet
	spent  bool  // the window had nothing left to grant
	// waiting counts items claimed (Claimed) that have not asked Take
	// yet: the size of the next share, so a process takes what it will
	// start, not what it could.
	waiting int
}

// Limiter is one process's view of a scope's limits. Safe for concurrent
// use.
type Limiter struct {
	qu    *workqueue.Queue
	scope string
	clk   clock.Clock

	mu     sync.Mutex
	byType map[string]*share
	offset time.Duration // the database's clock minus clk, as last measured
	synced bool          // offset measured at least once
	takes  uint64
}

// New checks limits and returns a Limiter of scope; clk is the worker's
// clock (its reading is corrected by the database's).
func New(qu *workqueue.Queue, scope string, clk clock.Clock, limits []Limit) (*Limiter, error) {
	if clk == nil {
		clk = clock.Real()
	}
	l := &Limiter{qu: qu, scope: scope, clk: clk, byType: map[string]*share{}}
	names := map[string]bool{}
	for _, lim := range limits {
		if err := lim.validate(); err != nil {
			return nil, err
		}
		if names[lim.Name()] {
			return nil, fmt.Errorf("%w: two rate limits are named %q (a Key and a work type limited alone share a name)", workqueue.ErrInvalid, lim.Name())
		}
		names[lim.Name()] = true
		s := &share{Limit: lim, window: -1}
		for _, t := range lim.Types() {
			if l.byType[t] != nil {
				return nil, fmt.Errorf("%w: work type %q has two rate limits", workqueue.ErrInvalid, t)
			}
			l.byType[t] = s
		}
	}
	return l, nil
}

// Limited reports whether workType has a limit.
func (l *Limiter) Limited(workType string) bool { return l.byType[workType] != nil }

// now is the database's clock as this process estimates it.
func (l *Limiter) now() time.Time { return l.clk.Now().Add(l.offset) }

// windowOf is the window of s at t.
func windowOf(s *share, t time.Time) int64 {
	us, w := t.UnixMicro(), s.windowMicros()
	return (us - ((us%w)+w)%w) / w
}

// nextOpen is when the window after s's current one opens, on clk.
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
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.sync(ctx); err != nil {
		return nil, time.Time{}, err
	}
	for _, t := range types {
		s := l.byType[t]
		if s == nil {
			admitted = append(admitted, t)
			continue
		}
		w := windowOf(s, l.now())
		if s.window != w || s.left > 0 || !s.spent {
			admitted = append(admitted, t)
		} else if at := l.nextOpen(s, w); retryAt.IsZero() || at.Before(retryAt) {
			retryAt = at
		}
	}
	return admitted, retryAt, nil
}

// Claimed records n claimed items of workType that will ask Take to
// start: the size of the next share.
func (l *Limiter) Claimed(workType string, n int) {
	s := l.byType[workType]
	if s == nil || n <= 0 {
		return
	}
	l.mu.Lock()
	s.waiting += n
	l.mu.Unlock()
}

// sync measures the database clock's offset once (resync measures it
// again).
func (l *Limiter) sync(ctx context.Context) error {
	if l.synced {
		return nil
	}
	return l.resync(ctx)
}

// resync measures the database clock's offset from the middle of one
// read of it: a read that took long (a paused server, a dropped
// connection) is off by up to half its time, which the next window's
// check (TakeRateShare's NotCurrent) finds and sends here again.
func (l *Limiter) resync(ctx context.Context) error {
	before := l.clk.Now()
	now, err := l.qu.DatabaseNow(ctx)
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	after := l.clk.Now()
	l.offset, l.synced = now.Sub(before.Add(after.Sub(before)/2)), true
	return nil
}

// topUp returns the starts left in this process's share of s's current
// window, taking a share of the window (as many starts as items wait for
// one, Claimed) when none are left and the window has some, and when the
// next window opens (on the Limiter's clock). Under l.mu.
func (l *Limiter) topUp(ctx context.Context, s *share) (left int, nextOpen time.Time, err error) {
	w := windowOf(s, l.now())
	if w != s.window {
		s.window, s.left, s.spent = w, 0, false // a past window's share is worthless
	}
	for try := 0; s.left == 0 && !s.spent; try++ {
		got, err := l.qu.TakeRateShare(ctx, l.scope, s.Name(), w, s.windowMicros(), max(s.waiting, 1), s.quota(w))
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("ratelimit: %w", err)
		}
		if got.NotCurrent {
			// This process's estimate of the database's clock is off: measure
			// it again and ask for the window it is in, once; failing that,
			// the item waits for the next window.
			if try > 0 {
				return 0, l.nextOpen(s, w), nil
			}
			if err := l.resync(ctx); err != nil {
				return 0, time.Time{}, err
			}
			w = windowOf(s, l.now())
			s.window, s.left, s.spent = w, 0, false
			continue
		}
		s.left, s.spent = got.Granted, got.Used >= s.quota(w)
		l.takes++
		if l.takes%256 == 0 {
			// Now and then: windows older than two periods are worthless.
			_, _ = l.qu.PruneRateWindows(ctx, l.scope, s.Name(), w-2*s.windows())
		}
	}
	return s.left, l.nextOpen(s, w), nil
}

// Take spends one start of workType, just before its handler starts: from
// this process's share of the current window, topped up from the window's
// budget when spent. It reports false, with when the next window opens (on
// the Limiter's clock), when the window has nothing left: the caller gives
// the item back until then, unrun. Starts are counted when they happen, so
// an item claimed in one window that waits for an executor into the next
// spends the next window's budget. An unlimited work type always starts.
func (l *Limiter) Take(ctx context.Context, workType string) (ok bool, retryAt time.Time, err error) {
	s := l.byType[workType]
	if s == nil {
		return true, time.Time{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.sync(ctx); err != nil {
		return false, time.Time{}, err
	}
	s.waiting = max(s.waiting-1, 0) // this item asks once: it starts or is given back
	left, at, err := l.topUp(ctx, s)
	if err != nil || left == 0 {
		return false, at, err
	}
	s.left--
	return true, time.Time{}, nil
}
