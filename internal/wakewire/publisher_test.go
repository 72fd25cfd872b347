package wakewire

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/clock"
)

// endpointOn listens on a loopback UDP socket and counts the valid
// datagrams it receives for its endpoint.
type endpointOn struct {
	conn *net.UDPConn
	ep   Endpoint
	got  atomic.Int64
}

func listen(t *testing.T, id string) *endpointOn {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	e := &endpointOn{conn: conn, ep: Endpoint{ID: id, Address: conn.LocalAddr().String(), Key: make([]byte, 32)}}
	go func() {
		buf := make([]byte, MaxDatagram+1)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			if m, err := Parse(buf[:n]); err == nil && Verify(buf[:n], e.ep.Key) && m.Endpoint == id {
				e.got.Add(1)
			}
		}
	}()
	t.Cleanup(func() { conn.Close() })
	return e
}

func waitCount(t *testing.T, what string, get func() int64, want int64) {
	t.Helper()
	waitfor.Until(t, 30*time.Second, func() (bool, error) { return get() >= want, nil },
		func() string { return fmt.Sprintf("%s: %d, want %d", what, get(), want) })
}

// An announcement inside the coalescing gap of the one before is sent when
// the gap ends, never left marked.
func TestMarkInsideTheCoalescingGapIsSentAfterIt(t *testing.T) {
	e := listen(t, "ep-1")
	p := NewPublisher(PublisherConfig{
		List:          func(context.Context, string) ([]Endpoint, error) { return []Endpoint{e.ep}, nil },
		CoalesceEvery: 200 * time.Millisecond,
	})
	defer p.Close()
	for round := int64(1); round <= 5; round++ {
		p.Mark("s", Flags{})
		waitCount(t, "datagrams", e.got.Load, round)
	}
}

// A publisher announcing ever new scopes (tenants) keeps state only for
// the ones announced lately.
func TestPublisherForgetsOldScopes(t *testing.T) {
	e := listen(t, "ep-1")
	fc := clock.NewFake(time.Now())
	p := NewPublisher(PublisherConfig{
		List:  func(context.Context, string) ([]Endpoint, error) { return []Endpoint{e.ep}, nil },
		Clock: fc,
	})
	defer p.Close()
	const scopes = 1000
	for i := range scopes {
		p.Mark(fmt.Sprint("tenant-", i), Flags{})
	}
	sent := func() int64 { return int64(p.Stats().Sent) } // loopback UDP may drop some of a burst
	waitCount(t, "datagrams sent", sent, scopes)
	if st := p.Stats(); st.Scopes != scopes {
		t.Fatalf("state for %d scopes, want %d while they are recent", st.Scopes, scopes)
	}
	fc.Advance(DefaultEndpointCacheTTL)
	p.Mark("tenant-new", Flags{})
	waitCount(t, "datagrams sent", sent, scopes+1)
	p.Flush()
	if st := p.Stats(); st.Scopes != 1 {
		t.Fatalf("state for %d scopes a cache period later, want 1 (the new one)", st.Scopes)
	}
}

// MarkAndWait returns once its scope's datagram was written, and is not
// held back by the coalescing gap of the scope's last datagram (an hour
// here: a wait for the gap would be cut at its minute): a goroutine's
// commits are not paced by it.
func TestMarkAndWaitReturnsOnceSent(t *testing.T) {
	e := listen(t, "ep-1")
	p := NewPublisher(PublisherConfig{
		List:          func(context.Context, string) ([]Endpoint, error) { return []Endpoint{e.ep}, nil },
		CoalesceEvery: time.Hour,
	})
	defer p.Close()
	for round := uint64(1); round <= 3; round++ {
		if !p.MarkAndWait("s", Flags{}, time.Minute) {
			t.Fatalf("round %d: MarkAndWait reports its datagram not sent within a minute (held back by the gap?)", round)
		}
		if st := p.Stats(); st.Sent != round || st.WaitsCut != 0 {
			t.Fatalf("round %d: MarkAndWait returned with %+v, want %d datagrams sent", round, st, round)
		}
	}
	// A plain Mark in the gap still waits for it.
	p.Mark("s", Flags{})
	if st := p.Stats(); st.Sent != 3 {
		t.Fatalf("a plain mark in the gap was sent at once: %+v", st)
	}
}

// A scope nobody listens for is not held back by the coalescing gap: no
// datagram went, so none is coalesced, and a wait for it ends at once.
func TestMarkAndWaitWithoutEndpointsIsNotCoalesced(t *testing.T) {
	var reads atomic.Int64
	p := NewPublisher(PublisherConfig{
		List:          func(context.Context, string) ([]Endpoint, error) { reads.Add(1); return nil, nil },
		CoalesceEvery: time.Hour,
	})
	defer p.Close()
	for i := range 3 {
		if !p.MarkAndWait("s", Flags{}, time.Minute) {
			t.Fatalf("wait %d of a scope without endpoints was cut (an hour's coalescing gap held it)", i)
		}
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d endpoint reads, want 1 (the list is cached)", n)
	}
}

// A wait is bounded: a mark whose send is held up (here the endpoint list
// read does not answer) returns after the bound, counted, and still goes
// out once the read answers (or at Close); after Close, MarkAndWait sends
// nothing and says so at once.
func TestMarkAndWaitIsBounded(t *testing.T) {
	e := listen(t, "ep-1")
	answer := make(chan struct{})
	p := NewPublisher(PublisherConfig{
		List: func(context.Context, string) ([]Endpoint, error) {
			<-answer
			return []Endpoint{e.ep}, nil
		},
		CoalesceEvery: time.Hour,
	})
	if p.MarkAndWait("s", Flags{}, 50*time.Millisecond) {
		t.Fatal("a mark whose endpoint read never answered reported sent within 50ms")
	}
	if st := p.Stats(); st.Sent != 0 || st.WaitsCut != 1 {
		t.Fatalf("after the cut wait: %+v, want none sent, 1 wait cut", st)
	}
	close(answer)
	p.Close()
	if st := p.Stats(); st.Sent != 1 {
		t.Fatalf("after Close: %d sent, want the held-up mark sent", st.Sent)
	}
	if p.MarkAndWait("s", Flags{}, time.Minute) || p.Stats().Publishes != 1 {
		t.Fatalf("MarkAndWait after Close: %+v", p.Stats())
	}
}
