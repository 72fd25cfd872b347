package wake

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// publisher sends the hub's wakes. Publish only marks a scope; one
// goroutine sends, so an enqueue never waits for the network or for the
// endpoint list, and a burst of announcements of one scope becomes one
// datagram per endpoint per CoalesceEvery.
type publisher struct {
	h    *Hub
	kick chan struct{} // capacity 1
	stop chan struct{} // closed by Close: flush and return
	done chan struct{}

	mu    sync.Mutex
	dirty map[string]bool // scope -> look far

	// Touched only by loop.
	lastSent map[string]time.Time
	cache    map[string]cachedEndpoints
}

type cachedEndpoints struct {
	read      time.Time
	endpoints []resolvedEndpoint
}

type resolvedEndpoint struct {
	workqueue.WakeEndpoint
	addr *net.UDPAddr // nil when the address did not resolve
}

func (p *publisher) init(h *Hub) {
	*p = publisher{h: h, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), dirty: map[string]bool{},
		lastSent: map[string]time.Time{}, cache: map[string]cachedEndpoints{}}
}

func (p *publisher) mark(scope string, lookFar bool) {
	p.mu.Lock()
	p.dirty[scope] = p.dirty[scope] || lookFar
	p.mu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *publisher) loop() {
	defer close(p.done)
	t := p.h.cfg.Clock.NewTimer()
	defer t.Stop()
	for {
		select {
		case <-p.kick:
		case <-t.C():
		case <-p.stop:
			p.sendDue(true)
			return
		}
		if wait := p.sendDue(false); wait > 0 {
			t.Reset(wait)
		}
	}
}

// sendDue sends every marked scope whose last send is CoalesceEvery old
// (every marked scope when flushing) and returns how long until the next
// marked one may go (0: none waits).
func (p *publisher) sendDue(flush bool) time.Duration {
	h := p.h
	p.mu.Lock()
	due := map[string]bool{}
	var wait time.Duration
	now := h.now()
	for scope, lookFar := range p.dirty {
		left := h.cfg.CoalesceEvery - now.Sub(p.lastSent[scope])
		if left > 0 && !flush {
			if wait == 0 || left < wait {
				wait = left
			}
			continue
		}
		delete(p.dirty, scope)
		due[scope] = lookFar
	}
	p.mu.Unlock()
	for scope, lookFar := range due {
		p.lastSent[scope] = now
		p.send(scope, lookFar, now)
	}
	return wait
}

// send sends scope's live endpoints, other than the hub's own, one
// datagram each.
func (p *publisher) send(scope string, lookFar bool, now time.Time) {
	h := p.h
	eps, ok := p.endpoints(scope, now)
	if !ok {
		return
	}
	var b []byte
	for _, ep := range eps {
		if ep.addr == nil || h.owns(ep.ID) {
			continue
		}
		b = message{lookFar: lookFar, sentUs: time.Now().UnixMicro(), nonce: newNonce(), endpoint: ep.ID, scope: scope}.append(b[:0], ep.Key)
		if _, err := h.conn.WriteToUDP(b, ep.addr); err != nil {
			// Unreachable now (ICMP refused, no route): that process
			// probes; the next burst tries again.
			h.st.sendErrors.Add(1)
			continue
		}
		h.st.sent.Add(1)
	}
}

// endpoints returns scope's endpoints from the cache, or reads them when
// the cached list is EndpointCacheTTL old. A failed read announces
// nothing (the receivers' probes cover it) and is logged at most once per
// cache period.
func (p *publisher) endpoints(scope string, now time.Time) ([]resolvedEndpoint, bool) {
	h := p.h
	if c, ok := p.cache[scope]; ok && now.Sub(c.read) < h.cfg.EndpointCacheTTL {
		return c.endpoints, true
	}
	ctx, cancel := context.WithTimeout(h.ctx, dbTimeout)
	defer cancel()
	h.st.endpointReads.Add(1)
	list, err := h.q.WakeEndpoints(ctx, scope)
	if err != nil {
		h.st.endpointErrors.Add(1)
		if h.ctx.Err() == nil {
			h.log.Warn("wake: could not read the scope's endpoints; this burst is not announced", "scope", scope, "err", err)
		}
		// Cache the failure for a period, so a database outage costs one
		// read per period, not one per burst.
		p.cache[scope] = cachedEndpoints{read: now}
		return nil, false
	}
	eps := make([]resolvedEndpoint, len(list))
	for i, e := range list {
		eps[i].WakeEndpoint = e
		if addr, err := net.ResolveUDPAddr("udp", e.Address); err == nil {
			eps[i].addr = addr
		} else {
			h.st.sendErrors.Add(1)
		}
	}
	p.cache[scope] = cachedEndpoints{read: now, endpoints: eps}
	return eps, true
}
