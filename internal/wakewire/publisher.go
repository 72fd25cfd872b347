package wakewire

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/runtime/clock"
)

// Endpoint is where one process listens for a scope's wakes: a
// wake_endpoint row.
type Endpoint struct {
	ID      string
	Address string
	Key     []byte
}

// Defaults of PublisherConfig.
const (
	DefaultEndpointCacheTTL = 5 * time.Second
	DefaultCoalesceEvery    = 10 * time.Millisecond
	// listTimeout bounds one endpoint list read.
	listTimeout = 10 * time.Second
)

// PublisherConfig configures a Publisher. Zero fields take the defaults.
type PublisherConfig struct {
	// List reads a scope's live endpoints. Required.
	List func(ctx context.Context, scope string) ([]Endpoint, error)
	// Conn sends the datagrams. Nil: the publisher opens a UDP socket of
	// its own (any local address) on its first send.
	Conn *net.UDPConn
	// Skip reports the endpoints not to send to: the sending process's
	// own, whose workers heard of the commit in-process. Nil: none.
	Skip func(endpointID string) bool
	// EndpointCacheTTL is how long a scope's endpoint list is reused
	// before it is read again (only while the scope is announced).
	EndpointCacheTTL time.Duration
	// CoalesceEvery is the least time between two datagrams to one
	// endpoint for one scope; the first of a burst goes at once.
	CoalesceEvery time.Duration
	// Drop, when set, is asked before each datagram; true drops it
	// (counted as Dropped). For fault tests of lost wakes.
	Drop func() bool
	// Clock times coalescing and the endpoint cache. Default clock.Real().
	Clock clock.Clock
	// Logger receives failed endpoint reads. Default slog.Default().
	Logger *slog.Logger
}

// PublisherStats counts what a Publisher did.
type PublisherStats struct {
	Publishes      uint64 // Mark calls (commits announced)
	Sent           uint64 // datagrams sent
	SendErrors     uint64 // datagrams the socket refused (unreachable, bad address)
	Dropped        uint64 // datagrams PublisherConfig.Drop dropped
	EndpointReads  uint64 // endpoint list reads done (the list is cached by then)
	EndpointErrors uint64 // failed endpoint list reads (that burst was not announced)
	// WaitsCut counts MarkAndWait calls that returned at their bound,
	// before their scope was sent (it was sent later, or at Close).
	WaitsCut uint64
	// Scopes is how many scopes the publisher keeps state for (marked,
	// recently sent or cached): it follows the scopes announced lately,
	// not every scope ever announced.
	Scopes int
}

// Publisher sends announcements. Mark only marks a scope; one goroutine
// sends, so a commit never waits for the network or for the endpoint list,
// and a burst of announcements of one scope becomes one datagram per
// endpoint per CoalesceEvery. The goroutine starts with the first Mark and
// ends at Close. MarkAndWait also waits for the send, for a caller whose
// process may exit before the goroutine got to it.
type Publisher struct {
	cfg   PublisherConfig
	start sync.Once
	kick  chan struct{} // capacity 1
	flush chan chan struct{}
	stop  chan struct{}
	done  chan struct{}

	mu    sync.Mutex
	dirty map[string]Flags // scope -> what its receivers are asked to do
	// waiters are the MarkAndWait calls of each dirty scope: closed once
	// the scope's send that took their mark is done.
	waiters map[string][]chan struct{}
	closed  bool
	started bool

	// Touched only by the sending goroutine.
	conn      *net.UDPConn
	ownConn   bool
	lastSent  map[string]time.Time
	cache     map[string]cachedEndpoints
	lastPrune time.Time
	scopes    atomic.Int64

	publishes, sent, sendErrors, dropped, endpointReads, endpointErrors, waitsCut atomic.Uint64
}

type cachedEndpoints struct {
	read      time.Time
	endpoints []resolvedEndpoint
}

type resolvedEndpoint struct {
	Endpoint
	addr *net.UDPAddr // nil when the address did not resolve
}

// NewPublisher returns a Publisher; nothing runs until the first Mark.
func NewPublisher(cfg PublisherConfig) *Publisher {
	if cfg.EndpointCacheTTL <= 0 {
		cfg.EndpointCacheTTL = DefaultEndpointCacheTTL
	}
	if cfg.CoalesceEvery <= 0 {
		cfg.CoalesceEvery = DefaultCoalesceEvery
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Publisher{cfg: cfg, kick: make(chan struct{}, 1), flush: make(chan chan struct{}), stop: make(chan struct{}), done: make(chan struct{}),
		dirty: map[string]Flags{}, waiters: map[string][]chan struct{}{}, lastSent: map[string]time.Time{}, cache: map[string]cachedEndpoints{}, conn: cfg.Conn}
}

// Flags are what an announcement asks its receivers beyond a look.
type Flags struct {
	// LookFar: some of the work is due later, so receivers look for the
	// next due time as far as their backstop.
	LookFar bool
	// Rewind: the commit came later than a claimer's straggler window
	// after the due times it set, so receivers scan from the front.
	Rewind bool
}

// Mark announces that work may be claimable in scope. It never blocks.
// After Close it does nothing.
func (p *Publisher) Mark(scope string, f Flags) { p.mark(scope, f, nil) }

// MarkAndWait is Mark, then waits until the scope was sent: its
// datagrams written, or found to have no endpoint to go to (or none that
// could be read). A scope with a waiter goes at once, coalescing gap or
// not: a waiter's process may end as soon as it returns, and holding it
// for the gap would pace a goroutine's commits to one per CoalesceEvery.
// Marks that came together still share one datagram per endpoint, and
// receivers fold wakes beyond their rate (runtime/wake). It waits at most
// bound and reports whether the send came within it (a mark still waiting
// then goes out later, or at Close). After Close it does nothing and
// reports false.
func (p *Publisher) MarkAndWait(scope string, f Flags, bound time.Duration) (sent bool) {
	done := make(chan struct{})
	if !p.mark(scope, f, done) {
		return false
	}
	t := p.cfg.Clock.NewTimer()
	defer t.Stop()
	t.Reset(bound)
	select {
	case <-done:
		return true
	case <-t.C():
		p.waitsCut.Add(1)
		return false
	}
}

// mark marks scope and, when done is not nil, has the send that takes the
// mark close it. It reports false after Close.
func (p *Publisher) mark(scope string, f Flags, done chan struct{}) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.publishes.Add(1)
	was := p.dirty[scope]
	p.dirty[scope] = Flags{LookFar: was.LookFar || f.LookFar, Rewind: was.Rewind || f.Rewind}
	if done != nil {
		p.waiters[scope] = append(p.waiters[scope], done)
	}
	if !p.started {
		p.started = true
		go p.loop()
	}
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
	return true
}

// Flush sends every marked scope now, coalescing waived, and returns
// when they were sent.
func (p *Publisher) Flush() {
	p.mu.Lock()
	running := p.started && !p.closed
	p.mu.Unlock()
	if !running {
		return
	}
	ack := make(chan struct{})
	select {
	case p.flush <- ack:
		<-ack
	case <-p.done:
	}
}

// Close sends what was marked before it (coalescing waived), stops the
// goroutine and closes a socket the publisher opened itself.
func (p *Publisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	started := p.started
	p.mu.Unlock()
	if !started {
		return
	}
	close(p.stop)
	<-p.done
}

// Stats returns the counters.
func (p *Publisher) Stats() PublisherStats {
	return PublisherStats{
		Publishes: p.publishes.Load(), Sent: p.sent.Load(), SendErrors: p.sendErrors.Load(), Dropped: p.dropped.Load(),
		EndpointReads: p.endpointReads.Load(), EndpointErrors: p.endpointErrors.Load(), WaitsCut: p.waitsCut.Load(), Scopes: int(p.scopes.Load()),
	}
}

func (p *Publisher) loop() {
	defer close(p.done)
	defer func() {
		if p.ownConn && p.conn != nil {
			_ = p.conn.Close()
		}
	}()
	t := p.cfg.Clock.NewTimer()
	defer t.Stop()
	for {
		select {
		case <-p.kick:
		case <-t.C():
		case ack := <-p.flush:
			p.sendDue(true)
			close(ack)
			continue
		case <-p.stop:
			p.sendDue(true)
			return
		}
		if wait := p.sendDue(false); wait > 0 {
			t.Reset(wait)
		}
	}
}

// sendDue sends every marked scope whose last datagram is CoalesceEvery
// old (every marked scope when flushing), releases the scope's waiters,
// and returns how long until the next marked one may go (0: none waits).
func (p *Publisher) sendDue(flush bool) time.Duration {
	now := p.cfg.Clock.Now()
	p.mu.Lock()
	due := map[string]Flags{}
	waiters := map[string][]chan struct{}{}
	var wait time.Duration
	for scope, f := range p.dirty {
		left := p.cfg.CoalesceEvery - now.Sub(p.lastSent[scope])
		if left > 0 && !flush && len(p.waiters[scope]) == 0 { // a waiter's scope goes at once (MarkAndWait)
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		delete(p.dirty, scope)
		due[scope] = f
		if w, ok := p.waiters[scope]; ok {
			waiters[scope] = w
			delete(p.waiters, scope)
		}
	}
	dirty := len(p.dirty)
	p.mu.Unlock()
	for scope, f := range due {
		// Coalescing bounds the datagrams an endpoint gets: a send that
		// had no endpoint to go to starts no gap, so the next mark of a
		// scope nobody listens for (and its waiter) is not held back.
		if p.send(scope, f, now) {
			p.lastSent[scope] = now
		}
		for _, done := range waiters[scope] {
			close(done)
		}
	}
	p.prune(now, dirty)
	return wait
}

// prune forgets the scopes whose state no longer matters: a last send
// older than CoalesceEvery delays nothing, an endpoint list older than
// EndpointCacheTTL is read again anyway. A long-lived producer announcing
// ever new scopes (tenants) so keeps state for the recent ones only. It
// walks the maps at most once per EndpointCacheTTL.
func (p *Publisher) prune(now time.Time, dirty int) {
	if now.Sub(p.lastPrune) >= p.cfg.EndpointCacheTTL {
		p.lastPrune = now
		for scope, at := range p.lastSent {
			if now.Sub(at) >= p.cfg.CoalesceEvery {
				delete(p.lastSent, scope)
			}
		}
		for scope, c := range p.cache {
			if now.Sub(c.read) >= p.cfg.EndpointCacheTTL {
				delete(p.cache, scope)
			}
		}
	}
	p.scopes.Store(int64(max(len(p.lastSent), len(p.cache), dirty)))
}

// send sends scope's live endpoints, other than the skipped ones, one
// datagram each; it reports whether it addressed any (a datagram sent,
// refused or dropped).
func (p *Publisher) send(scope string, f Flags, now time.Time) (addressed bool) {
	eps, ok := p.endpoints(scope, now)
	if !ok {
		return false
	}
	var b []byte
	for _, ep := range eps {
		if ep.addr == nil || (p.cfg.Skip != nil && p.cfg.Skip(ep.ID)) {
			continue
		}
		addressed = true
		if p.cfg.Drop != nil && p.cfg.Drop() {
			p.dropped.Add(1)
			continue
		}
		if p.conn == nil {
			conn, err := net.ListenUDP("udp", nil)
			if err != nil {
				p.sendErrors.Add(1)
				p.cfg.Logger.Warn("wake: could not open a socket to send wakes; this burst is not announced", "err", err)
				return addressed
			}
			p.conn, p.ownConn = conn, true
		}
		b = Message{LookFar: f.LookFar, Rewind: f.Rewind, SentUs: time.Now().UnixMicro(), Nonce: NewNonce(), Endpoint: ep.ID, Scope: scope}.Append(b[:0], ep.Key)
		if _, err := p.conn.WriteToUDP(b, ep.addr); err != nil {
			// Unreachable now (ICMP refused, no route): that process
			// probes; the next burst tries again.
			p.sendErrors.Add(1)
			continue
		}
		p.sent.Add(1)
	}
	return addressed
}

// endpoints returns scope's endpoints from the cache, or reads them when
// the cached list is EndpointCacheTTL old. A failed read announces
// nothing (the receivers' probes cover it) and is cached for a period, so
// a database outage costs one read per period, not one per burst.
func (p *Publisher) endpoints(scope string, now time.Time) ([]resolvedEndpoint, bool) {
	if c, ok := p.cache[scope]; ok && now.Sub(c.read) < p.cfg.EndpointCacheTTL {
		return c.endpoints, c.endpoints != nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	list, err := p.cfg.List(ctx, scope)
	p.endpointReads.Add(1) // counted once done: a reader of the stats knows the list it saw is cached
	if err != nil {
		p.endpointErrors.Add(1)
		p.cfg.Logger.Warn("wake: could not read the scope's endpoints; this burst is not announced", "scope", scope, "err", err)
		p.cache[scope] = cachedEndpoints{read: now}
		return nil, false
	}
	eps := make([]resolvedEndpoint, len(list))
	for i, e := range list {
		eps[i].Endpoint = e
		if addr, err := net.ResolveUDPAddr("udp", e.Address); err == nil {
			eps[i].addr = addr
		} else {
			p.sendErrors.Add(1)
		}
	}
	p.cache[scope] = cachedEndpoints{read: now, endpoints: eps}
	return eps, true
}
