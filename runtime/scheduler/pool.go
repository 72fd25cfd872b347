package scheduler

import (
	"context"
	"fmt"
	"sync"
)

// Pool is one processing budget shared by the schedulers of several scopes
// in one process (worker.Group): each scope's scheduler admits its claims
// through its own Member, a Limiter.
//
// Fairness: a member may hold at most MaxPerMember rows, and while another
// member waits (its scheduler found nothing it could be granted, or was
// granted less than it asked) no member above its fair share (Max divided
// by the members that hold rows or wait, at least 1) is granted anything.
// Each released row is offered to the waiting member that holds the fewest
// (its OnFreed is called). So a scope with a long backlog cannot keep a
// scope with a few items out: once the pool is full, the waiting scope is
// offered the next row any member releases, and the busy scope's claims
// are denied until it is down to its share (runtime/worker's
// TestManyScopesFairness). A member offered rows that asks for nothing
// while Max more rows are released stops counting as waiting (its work
// went elsewhere).
type Pool struct {
	max, perMember int

	mu         sync.Mutex
	processing int
	releases   uint64 // Release calls so far
	members    map[*Member]struct{}
}

// NewPool builds a pool of max rows, at most perMember of them held by one
// member.
func NewPool(max, perMember int) (*Pool, error) {
	if max < 1 {
		return nil, fmt.Errorf("scheduler: pool needs at least 1 row, got %d", max)
	}
	if perMember < 1 || perMember > max {
		return nil, fmt.Errorf("scheduler: pool's rows per member must be 1..%d, got %d", max, perMember)
	}
	return &Pool{max: max, perMember: perMember, members: map[*Member]struct{}{}}, nil
}

// Member is one scheduler's share of a Pool: its Limiter.
type Member struct {
	p       *Pool
	onFreed func()
	// Under p.mu: rows held; whether it waits; whether it was offered rows
	// since it last asked, and at which release count.
	processing int
	waiting    bool
	offered    bool
	offeredAt  uint64
}

// Join adds a member; onFreed is called (without the pool's lock, on the
// releasing goroutine) when a row it may take was released while it
// waited: wire it to the member controller's CapacityFreed.
func (p *Pool) Join(onFreed func()) *Member {
	if onFreed == nil {
		onFreed = func() {}
	}
	m := &Member{p: p, onFreed: onFreed}
	p.mu.Lock()
	p.members[m] = struct{}{}
	p.mu.Unlock()
	return m
}

// Leave removes the member once its scheduler stopped; rows it still
// holds are released.
func (m *Member) Leave() {
	p := m.p
	p.mu.Lock()
	p.processing -= m.processing
	m.processing, m.waiting = 0, false
	delete(p.members, m)
	next := p.offerLocked(nil)
	p.mu.Unlock()
	if next != nil {
		next.onFreed()
	}
}

// grantable is what m could be granted of want now; p.mu held. While
// another member waits, m (counted as asking) is held to its fair share.
func (p *Pool) grantable(m *Member, want int) int {
	limit := min(want, p.perMember-m.processing, p.max-p.processing)
	waiting, demand := false, 0
	for o := range p.members {
		if o != m && o.waiting {
			waiting = true
		}
		if o == m || o.processing > 0 || o.waiting {
			demand++
		}
	}
	if waiting {
		limit = min(limit, max(1, p.max/demand)-m.processing)
	}
	return limit
}

// asked records that m asked for want rows and could be given n; a
// member that reached its own cap does not wait for the pool. p.mu held.
func (m *Member) asked(want, n int) {
	m.waiting, m.offered = n < want && m.processing+max(n, 0) < m.p.perMember, false
}

// offerLocked picks the waiting member other than except holding the
// fewest rows to be offered a released row (nil: none), after dropping
// the waits of members that did not ask again within Max releases of an
// offer; p.mu held.
func (p *Pool) offerLocked(except *Member) *Member {
	var best *Member
	for o := range p.members {
		if o.waiting && o.offered && p.releases-o.offeredAt > uint64(p.max) {
			o.waiting, o.offered = false, false
		}
		if o != except && o.waiting && (best == nil || o.processing < best.processing) {
			best = o
		}
	}
	if best != nil && !best.offered {
		best.offered, best.offeredAt = true, p.releases
	}
	return best
}

// Admit grants up to want rows: no more than the pool has free, the member
// may hold, and, while another member waits, its fair share.
func (m *Member) Admit(_ context.Context, want int) (Grant, error) {
	if want < 1 {
		return Grant{}, nil
	}
	p := m.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.grantable(m, want)
	m.asked(want, n)
	if n <= 0 {
		return Grant{}, nil
	}
	m.processing += n
	p.processing += n
	return Grant{Max: n}, nil
}

// Release returns rows; the next waiting member, if any, is offered them.
func (m *Member) Release(rows int) {
	p := m.p
	p.mu.Lock()
	m.processing -= rows
	p.processing -= rows
	p.releases++
	if m.processing < 0 {
		p.mu.Unlock()
		panic(fmt.Sprintf("scheduler: pool member released %d rows more than it was admitted", -m.processing))
	}
	next := p.offerLocked(m)
	p.mu.Unlock()
	if next != nil {
		next.onFreed()
	}
}

// Available is what the member could be granted now (its scheduler asks
// before a claim turn, so it asks for rows): none counts as waiting.
func (m *Member) Available() int {
	p := m.p
	p.mu.Lock()
	defer p.mu.Unlock()
	n := max(0, p.grantable(m, p.max))
	if n == 0 {
		m.asked(1, 0)
	}
	return n
}

// Processing is the rows the member holds.
func (m *Member) Processing() int {
	m.p.mu.Lock()
	defer m.p.mu.Unlock()
	return m.processing
}

// Processing is the rows every member holds together.
func (p *Pool) Processing() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.processing
}
