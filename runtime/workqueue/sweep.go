package workqueue

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/scanfloor"
	"github.com/laneq/laneq/internal/store"
)

// DependencySweepConfig bounds one safety pass. Zero fields take the
// defaults.
type DependencySweepConfig struct {
	// TimeBudget bounds a pass's wall time: checked before every statement,
	// and every read is cut off at it. A pass that runs out keeps its cursor
	// and the next pass resumes there. Default 1s.
	TimeBudget time.Duration
	// ProbeBudget bounds the waiters a pass checks (each costs its keys'
	// point reads). Default 1,000.
	ProbeBudget int
	// PageSize is the waiters read per statement (at most ProbeBudget).
	// Default 100.
	PageSize int
	// RegistrationGrace is how old, in database time, a dependency
	// registration must be before the pass settles it: a worker settles its
	// own within milliseconds, and one interrupted between the two steps of
	// Queue.Wait is left to the pass. Settling a live one early is harmless
	// (both settles are CASes on one token), only wasted work. Default 30s.
	RegistrationGrace time.Duration
}

// Defaults of DependencySweepConfig.
const (
	DefaultSweepTimeBudget        = time.Second
	DefaultSweepProbeBudget       = 1000
	DefaultSweepPageSize          = 100
	DefaultSweepRegistrationGrace = 30 * time.Second
)

func (c DependencySweepConfig) withDefaults() (DependencySweepConfig, error) {
	if c.TimeBudget == 0 {
		c.TimeBudget = DefaultSweepTimeBudget
	}
	if c.ProbeBudget == 0 {
		c.ProbeBudget = DefaultSweepProbeBudget
	}
	if c.PageSize == 0 {
		c.PageSize = DefaultSweepPageSize
	}
	if c.RegistrationGrace == 0 {
		c.RegistrationGrace = DefaultSweepRegistrationGrace
	}
	switch {
	case c.TimeBudget < time.Millisecond:
		return c, invalidf("sweep TimeBudget must be at least 1ms, got %s", c.TimeBudget)
	case c.ProbeBudget < 1:
		return c, invalidf("sweep ProbeBudget must be positive, got %d", c.ProbeBudget)
	case c.PageSize < 1 || c.PageSize > 10_000:
		return c, invalidf("sweep PageSize must be 1..10000, got %d", c.PageSize)
	case c.RegistrationGrace < 0:
		return c, invalidf("sweep RegistrationGrace must not be negative, got %s", c.RegistrationGrace)
	}
	return c, nil
}

// DependencySweep is the safety pass over one scope's dependency waiters
// (seed 002). Producers wake waiters in the transaction that satisfies their
// key; the sweep repairs what a missed wake left behind (a writer that
// bypassed Satisfy, a dependency row inserted by hand) and settles
// registrations a crashed worker left between the two steps of Queue.Wait.
//
// A pass pages the scope's waiters of the active generation in wait order
// from a resumable cursor, point-reads only their persisted keys, and wakes
// those with a satisfied key by an idempotent CAS. A waiter whose keys are
// all missing costs no write and no retry. A pass stops at its time or probe
// budget, or at the first error, keeping the cursor past the last waiter it
// finished: wakes already committed stay, and the next pass resumes there.
//
// Registrations past their grace are read, registrationPage at a time,
// by the pass's first statement (DependencySafetyPage, beside its first page
// of waiters) and, while there are more, by the pages after it; the other
// pages (DependencyWaitingPage) read waiters only, so they never read the
// registrations crashed workers left. A pass looks for registrations from
// the front; after a full read it goes on from the last one it settled,
// registrationSpan of wait times a read (the embedded engine reads a range
// whole before its LIMIT), in this pass and the next ones; a span that runs
// dry sends it back to the front, and a short read from the front ends the
// registrations. With no waiters and no registrations in the scope a pass
// is one indexed statement.
//
// A pass interval is not a per-waiter recovery bound: a backlog larger than
// a pass's budget takes several passes to go round.
type DependencySweep struct {
	qu    *Queue
	scope string
	cfg   DependencySweepConfig
	now   func() time.Time

	mu        sync.Mutex // one pass at a time
	afterTime time.Time  // the cursor: waiters after (afterTime, afterID)
	afterID   int64
	// The registration cursor, set while passes work through a backlog of
	// registrations (the last read was full): the next read is the span
	// after (regTime, regID). Unset, the next read is from the front.
	regSpan bool
	regTime time.Time
	regID   int64
}

// The registration reads: registrationPage is DependencySafetyPage's fixed
// LIMIT on its registration branch (registrations are rare), and a read
// from the registration cursor covers registrationSpan of wait times.
// regFront is the reg_until of a read from the front: no span.
const (
	registrationPage = 32
	registrationSpan = time.Minute
)

var regFront = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// SweepStats is what one pass did.
type SweepStats struct {
	Pages    int // page statements run
	Probed   int // waiters (and registrations) whose keys were read
	Woken    int // waiters this pass moved to pending
	Settled  int // registrations this pass settled
	Runnable int // of those, settled to pending
	// Wrapped is set when the pass reached the end of the waiters; the next
	// pass starts from the front.
	Wrapped bool
	// MayHaveWoken is set when a write's outcome is unknown (its reply was
	// lost): it may have made an item claimable.
	MayHaveWoken bool
}

// Claimable reports whether the pass may have made work claimable: a claim
// turn should follow.
func (s SweepStats) Claimable() bool { return s.Woken > 0 || s.Runnable > 0 || s.MayHaveWoken }

// NewDependencySweep returns the safety pass for scope.
func (qu *Queue) NewDependencySweep(scope string, cfg DependencySweepConfig) (*DependencySweep, error) {
	if err := validScope(scope); err != nil {
		return nil, err
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &DependencySweep{qu: qu, scope: scope, cfg: cfg, now: time.Now, afterTime: scanfloor.Front}, nil
}

// Pass runs one bounded safety pass. Its error (the first statement that
// failed) leaves the sweep usable: the next pass resumes from the cursor.
// A pass that made waiters claimable, or may have, announces the scope.
func (s *DependencySweep) Pass(ctx context.Context) (SweepStats, error) {
	began := time.Now()
	st, err := s.pass(ctx)
	if st.Claimable() {
		s.qu.announceSince(s.scope, false, began)
	}
	return st, err
}

func (s *DependencySweep) pass(ctx context.Context) (SweepStats, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st SweepStats
	deadline := s.now().Add(s.cfg.TimeBudget)
	budget := s.cfg.ProbeBudget
	registrations := true // the pass's first statement reads them
	for budget > 0 && s.now().Before(deadline) {
		limit := min(s.cfg.PageSize, budget)
		rows, err := s.page(ctx, deadline, registrations, limit)
		st.Pages++
		if err != nil {
			return st, err
		}
		var waiting []gen.DependencySafetyPageRow
		var settled int
		var lastTime time.Time
		var lastID int64
		for _, r := range rows {
			if r.State != StateDependencyRegistration {
				waiting = append(waiting, r)
				continue
			}
			if err := s.settle(ctx, r, &st); err != nil {
				return st, err
			}
			settled++
			budget--
			if r.RunAfter.After(lastTime) || (r.RunAfter.Equal(lastTime) && r.WorkID > lastID) {
				lastTime, lastID = r.RunAfter, r.WorkID
			}
		}
		if registrations {
			switch {
			case settled == registrationPage:
				// A full read: more may follow the last one; read on from
				// there, a span at a time (in this pass and the next).
				s.regSpan, s.regTime, s.regID = true, lastTime, lastID
			case s.regSpan:
				// The span ran dry, not necessarily the backlog: look from
				// the front again.
				s.regSpan = false
			default:
				// A short read from the front: none left up to the grace.
				registrations = false
			}
		}
		if err := s.wakeSatisfied(ctx, deadline, waiting, &st); err != nil {
			return st, err
		}
		budget -= len(waiting)
		if len(waiting) < limit {
			if registrations {
				// The end of the waiters, not of the registrations: the
				// next pages read past the last waiter, which holds none
				// but those that began waiting since.
				continue
			}
			// A short page: the end of the waiters.
			s.afterTime, s.afterID = scanfloor.Front, 0
			st.Wrapped = true
			return st, nil
		}
	}
	return st, nil
}

// page reads the waiters after the cursor and, with registrations, the
// registrations past their grace (from the front, or the span after the
// registration cursor), the read cut off at the pass's deadline.
func (s *DependencySweep) page(ctx context.Context, deadline time.Time, registrations bool, limit int) ([]gen.DependencySafetyPageRow, error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	var rows []gen.DependencySafetyPageRow
	var err error
	if registrations {
		regTime, regID, regUntil := scanfloor.Front, int64(0), regFront
		if s.regSpan {
			regTime, regID, regUntil = s.regTime, s.regID, s.regTime.Add(registrationSpan)
		}
		rows, err = s.qu.q.DependencySafetyPage(ctx, gen.DependencySafetyPageParams{
			ScopeID: s.scope, GraceMicros: store.Micros(s.cfg.RegistrationGrace),
			RegAfterTime: regTime, RegAfterWorkID: regID, RegUntil: regUntil,
			AfterTime: s.afterTime, AfterWorkID: s.afterID, Limit: int32(limit),
		})
	} else {
		var page []gen.DependencyWaitingPageRow
		page, err = s.qu.q.DependencyWaitingPage(ctx, gen.DependencyWaitingPageParams{
			ScopeID: s.scope, AfterTime: s.afterTime, AfterWorkID: s.afterID, Limit: int32(limit),
		})
		for _, r := range page {
			rows = append(rows, gen.DependencySafetyPageRow(r))
		}
	}
	if err != nil {
		return nil, fmt.Errorf("workqueue: dependency safety page of scope %q: %w", s.scope, err)
	}
	return rows, nil
}

// settle settles one registration as Queue.Wait would have.
func (s *DependencySweep) settle(ctx context.Context, r gen.DependencySafetyPageRow, st *SweepStats) error {
	keys := decodeKeys(r.DependencyKeys)
	var state string
	ctx, cancel := s.writeContext(ctx)
	defer cancel()
	err := s.qu.runTx(ctx, readCommitted, func(ctx context.Context, _ *sql.Tx, q *gen.Queries) error {
		var err error
		state, err = settleRegistration(ctx, q, s.scope, Lease{WorkID: r.WorkID, Token: r.LeaseToken}, keys)
		return err
	})
	st.Probed++
	if err != nil {
		st.MayHaveWoken = st.MayHaveWoken || !serverRejected(err)
		return fmt.Errorf("workqueue: settle dependency registration of work %d: %w", r.WorkID, err)
	}
	if state != "" {
		st.Settled++
		if state == StatePending {
			st.Runnable++
		}
	}
	return nil
}

// wakeSatisfied reads the page's keys in one batch point get and wakes each
// waiter with a satisfied key, moving the cursor past every waiter it
// finished, in page order.
func (s *DependencySweep) wakeSatisfied(ctx context.Context, deadline time.Time, page []gen.DependencySafetyPageRow, st *SweepStats) error {
	if len(page) == 0 {
		return nil
	}
	deps := make([][]string, len(page))
	var keys []string
	for i, r := range page {
		deps[i] = decodeKeys(r.DependencyKeys)
		for _, k := range deps[i] {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	satisfied := map[string]bool{}
	if len(keys) > 0 {
		readCtx, cancel := context.WithDeadline(ctx, deadline)
		got, err := s.qu.q.SatisfiedDependencies(readCtx, gen.SatisfiedDependenciesParams{ScopeID: s.scope, DependencyKeys: keys})
		cancel()
		if err != nil {
			return fmt.Errorf("workqueue: dependency keys of scope %q: %w", s.scope, err)
		}
		for _, k := range got {
			satisfied[k] = true
		}
	}
	st.Probed += len(page)
	for i, r := range page {
		ready := len(deps[i]) == 0 // no keys to read: never strand the row
		for _, k := range deps[i] {
			ready = ready || satisfied[k]
		}
		if ready {
			n, err := s.wake(ctx, r)
			if err != nil {
				st.MayHaveWoken = st.MayHaveWoken || !serverRejected(err)
				return err
			}
			st.Woken += int(n)
		}
		s.afterTime, s.afterID = r.RunAfter, r.WorkID
	}
	return nil
}

// writeContext is where a pass's writes run: once each, to a known outcome
// under WriteTimeout whatever is left of the pass's budget. A transient
// error ends the pass instead of being retried in it; the next pass resumes.
func (s *DependencySweep) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return s.qu.detached(ctx)
}

// wake is one idempotent CAS on the token the page read saw.
func (s *DependencySweep) wake(ctx context.Context, r gen.DependencySafetyPageRow) (int64, error) {
	ctx, cancel := s.writeContext(ctx)
	defer cancel()
	n, err := s.qu.q.WakeDependencyWaiter(ctx, gen.WakeDependencyWaiterParams{WorkID: r.WorkID, LeaseToken: r.LeaseToken})
	if err != nil {
		return 0, fmt.Errorf("workqueue: wake dependency waiter %d: %w", r.WorkID, err)
	}
	return n, nil
}
