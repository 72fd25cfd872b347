package wake

import (
	"errors"
	"net"
	"time"

	"github.com/laneq/laneq/internal/wakewire"
)

// receiver remembers the nonces of accepted datagrams for twice the
// window, so a replayed datagram is refused while its time is acceptable.
type receiver struct {
	seen      map[[wakewire.NonceSize]byte]time.Time // nonce -> forget after
	lastPrune time.Time
}

func (r *receiver) init() { r.seen = map[[wakewire.NonceSize]byte]time.Time{} }

// maxSeen bounds the nonce memory. Only datagrams with a valid tag enter
// it, and a sender sends each endpoint at most one per CoalesceEvery, so
// it is reached only by a key holder flooding the hub: then new valid
// datagrams are refused until old nonces expire (wakes are never needed
// for correctness).
const maxSeen = 1 << 16

func (h *Hub) receiveLoop() {
	defer h.wg.Done()
	buf := make([]byte, wakewire.MaxDatagram+1)
	for {
		n, _, err := h.conn.ReadFromUDP(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || h.ctx.Err() != nil {
				return
			}
			continue // a transient socket error (an ICMP report): keep reading
		}
		h.accept(buf[:n])
		h.st.received.Add(1) // after its verdict: whoever sees it counted sees that too
	}
}

// accept checks one datagram and queues its wake.
func (h *Hub) accept(b []byte) {
	m, err := wakewire.Parse(b)
	if err != nil {
		h.st.malformed.Add(1)
		return
	}
	h.mu.Lock()
	s := h.subs[m.Endpoint]
	h.mu.Unlock()
	if s == nil || !s.serves(m.Scope) {
		h.st.unknown.Add(1)
		return
	}
	if !wakewire.Verify(b, s.ep.Key) {
		h.st.badTag.Add(1)
		return
	}
	now := time.Now()
	sent := time.UnixMicro(m.SentUs)
	if d := now.Sub(sent); d > h.cfg.Window || d < -h.cfg.Window {
		h.st.outside.Add(1)
		return
	}
	if !h.rx.firstSight(m.Nonce, now, h.cfg.Window) {
		h.st.replayed.Add(1)
		return
	}
	if m.SelfTest {
		h.st.selfTests.Add(1)
		s.setState(func() { s.selfTested = true })
		return
	}
	s.wake(m.Scope, m.LookFar, m.Rewind)
}

// firstSight records nonce and reports whether it was new.
func (r *receiver) firstSight(nonce [wakewire.NonceSize]byte, now time.Time, window time.Duration) bool {
	if now.Sub(r.lastPrune) > window || len(r.seen) >= maxSeen {
		for k, until := range r.seen {
			if now.After(until) {
				delete(r.seen, k)
			}
		}
		r.lastPrune = now
	}
	if _, dup := r.seen[nonce]; dup || len(r.seen) >= maxSeen {
		return false
	}
	r.seen[nonce] = now.Add(2 * window)
	return true
}
