package scheduler

import (
	"context"
	"fmt"
	"sync"
)

// Grant is a claim limiter's answer for one claim.
type Grant struct {
	// Max rows the claim may admit; 0 denies the claim.
	Max int
	// StaleOnly restricts the claim to expired leases (pressure mode). A
	// stale-only grant must never be turned into a fresh claim.
	StaleOnly bool
}

// Limiter admits claims against the scope's processing budget. The
// scheduler calls Admit just before a claim and Release for every admitted
// row that is no longer processing (not claimed after all, or finished).
type Limiter interface {
	Admit(ctx context.Context, want int) (Grant, error)
	Release(rows int)
	// Available is the budget left now, without I/O.
	Available() int
}

// Pressure is what a pressure probe reports about the database.
type Pressure int

const (
	PressureNormal Pressure = iota
	// PressureDegraded grants stale-reclaim-only capacity: expired leases
	// are recovered, no fresh work starts.
	PressureDegraded
	// PressureOverloaded denies claims.
	PressureOverloaded
)

func (p Pressure) String() string {
	switch p {
	case PressureNormal:
		return "normal"
	case PressureDegraded:
		return "degraded"
	case PressureOverloaded:
		return "overloaded"
	}
	return fmt.Sprintf("pressure(%d)", int(p))
}

// BudgetLimiter is the default Limiter: a processing-row budget shared by
// every queue class and executor shape of the scope in this process, plus
// an optional pressure probe.
type BudgetLimiter struct {
	max   int
	probe func(context.Context) Pressure

	mu         sync.Mutex
	processing int
}

// NewBudgetLimiter admits at most maxRows processing rows at a time;
// probe (optional) is consulted before every claim.
func NewBudgetLimiter(maxRows int, probe func(context.Context) Pressure) (*BudgetLimiter, error) {
	if maxRows < 1 {
		return nil, fmt.Errorf("scheduler: max processing rows must be at least 1, got %d", maxRows)
	}
	return &BudgetLimiter{max: maxRows, probe: probe}, nil
}

func (l *BudgetLimiter) Admit(ctx context.Context, want int) (Grant, error) {
	pressure := PressureNormal
	if l.probe != nil {
		pressure = l.probe(ctx)
	}
	if pressure == PressureOverloaded || want < 1 {
		return Grant{}, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	n := min(want, l.max-l.processing)
	if n <= 0 {
		return Grant{}, nil
	}
	l.processing += n
	return Grant{Max: n, StaleOnly: pressure == PressureDegraded}, nil
}

func (l *BudgetLimiter) Release(rows int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.processing -= rows
	if l.processing < 0 {
		panic(fmt.Sprintf("scheduler: limiter released %d rows more than it admitted", -l.processing))
	}
}

func (l *BudgetLimiter) Available() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.max - l.processing
}

// Processing is the number of admitted rows not yet released.
func (l *BudgetLimiter) Processing() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.processing
}
