package wake

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/internal/wakewire"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-wake/1"

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEnv is one database with two "processes", each with its own Queue
// on it, as separate processes would have; exec runs SQL on it.
func newEnv(t *testing.T) (context.Context, *workqueue.Queue, *workqueue.Queue, func(q string, args ...any)) {
	t.Helper()
	qa, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	qb, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	return ctx, qa, qb, exec
}

func newHub(t *testing.T, q *workqueue.Queue, cfg Config) *Hub {
	t.Helper()
	cfg.Logger = quiet
	h, err := New(q, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

// listener records a subscription's wakes and health.
type listener struct {
	wakes   atomic.Int64
	lookFar atomic.Int64  // wakes that asked to look far
	woke    chan struct{} // one send per wake, dropped when full
	healthy chan bool
}

func newListener() *listener {
	return &listener{woke: make(chan struct{}, 1<<16), healthy: make(chan bool, 16)}
}

func (l *listener) handlers() Handlers {
	return Handlers{
		Wake: func(lookFar bool) {
			if lookFar {
				l.lookFar.Add(1)
			}
			l.wakes.Add(1)
			select {
			case l.woke <- struct{}{}:
			default:
			}
		},
		Health: func(h bool) { l.healthy <- h },
	}
}

// waitHealth fails unless the next health report is want (within a guard
// time that only bounds a hung test).
func (l *listener) waitHealth(t *testing.T, want bool) {
	t.Helper()
	select {
	case got := <-l.healthy:
		if got != want {
			t.Fatalf("health %t, want %t", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no health report (want %t)", want)
	}
}

func (l *listener) waitWake(t *testing.T) {
	t.Helper()
	select {
	case <-l.woke:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake arrived")
	}
}

func subscribe(t *testing.T, ctx context.Context, h *Hub, l *listener) *Subscription {
	t.Helper()
	s, err := h.Subscribe(ctx, scope, l.handlers())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func enqueue(t *testing.T, ctx context.Context, q *workqueue.Queue, key string) {
	t.Helper()
	_, err := q.Enqueue(ctx, scope, []workqueue.Event{{
		IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key, Payload: []byte("{}"),
		Work: []workqueue.Work{{WorkType: "deliver", QueueClass: "default"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// An enqueue committed through process B's Queue wakes process A's
// subscriber, and B does not send to its own endpoint.
func TestEnqueueInOneProcessWakesAnother(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	ha, hb := newHub(t, qa, Config{}), newHub(t, qb, Config{})
	la, lb := newListener(), newListener()
	subscribe(t, ctx, ha, la)
	la.waitHealth(t, true)
	subscribe(t, ctx, hb, lb)
	lb.waitHealth(t, true)
	enqueue(t, ctx, qb, "e1")
	la.waitWake(t)
	// B's own endpoint is skipped (its in-process worker heard of the
	// commit from the Queue), so B sent exactly one datagram: A's.
	if err := hb.Close(); err != nil {
		t.Fatal(err)
	}
	if st := hb.Stats(); st.Sent != 1 || st.Publishes != 1 || st.EndpointReads != 1 {
		t.Fatalf("sender stats %+v, want one publish, one read, one datagram", st)
	}
	if n := lb.wakes.Load(); n != 0 {
		t.Fatalf("the sender woke itself %d times", n)
	}
	if n := la.lookFar.Load(); n != 0 {
		t.Fatalf("an enqueue due now asked to look far (%d)", n)
	}
}

// A delayed enqueue is announced with the look-far flag, so a quiet
// receiver looks far enough ahead to arm its due timer for it.
func TestDelayedEnqueueAsksToLookFar(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	ha := newHub(t, qa, Config{})
	newHub(t, qb, Config{}) // watches qb: announces its enqueues
	l := newListener()
	subscribe(t, ctx, ha, l)
	l.waitHealth(t, true)
	_, err := qb.Enqueue(ctx, scope, []workqueue.Event{{
		IdempotencyKey: "later", RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: "later", Payload: []byte("{}"),
		Work: []workqueue.Work{{WorkType: "deliver", Delay: time.Hour}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	l.waitWake(t)
	if n := l.lookFar.Load(); n != 1 {
		t.Fatalf("%d look-far wakes, want 1", n)
	}
}

// Datagrams an outsider can make cause no wake: garbage, a wrong key, a
// valid datagram altered, an unknown endpoint, a send time outside the
// window; and a captured valid datagram replayed 200 times wakes once.
func TestForgedAndReplayedWakesAreRefused(t *testing.T) {
	t.Parallel()
	ctx, qa, _, _ := newEnv(t)
	h := newHub(t, qa, Config{})
	l := newListener()
	s := subscribe(t, ctx, h, l)
	l.waitHealth(t, true)
	out, err := net.DialUDP("udp", nil, h.self)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	send := func(b []byte) {
		t.Helper()
		if _, err := out.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	valid := func(at time.Time) wakewire.Message {
		return wakewire.Message{SentUs: at.UnixMicro(), Nonce: wakewire.NewNonce(), Endpoint: s.ep.ID, Scope: scope}
	}
	wrongKey := make([]byte, 32)
	send([]byte("hello"))
	send(make([]byte, wakewire.MaxDatagram+100))
	send(valid(time.Now()).Append(nil, wrongKey))
	tampered := valid(time.Now()).Append(nil, s.ep.Key)
	tampered[len("LQW1")+1] ^= 1 // the send time
	send(tampered)
	unknown := valid(time.Now())
	unknown.Endpoint = "not-an-endpoint"
	send(unknown.Append(nil, s.ep.Key))
	otherScope := valid(time.Now())
	otherScope.Scope = "another-scope"
	send(otherScope.Append(nil, s.ep.Key))
	send(valid(time.Now().Add(-2*DefaultWindow)).Append(nil, s.ep.Key))
	send(valid(time.Now().Add(2*DefaultWindow)).Append(nil, s.ep.Key))
	captured := valid(time.Now()).Append(nil, s.ep.Key)
	for range 200 {
		send(captured)
	}
	const sent = 8 + 200
	// Loopback keeps every datagram; wait for all of them, however slowly
	// a loaded machine runs the receiver.
	waitFor(t, func() bool { return h.Stats().Received >= sent+1 })
	st := h.Stats()
	if st.Received != sent+1 { // +1: the self-test
		t.Fatalf("received %d datagrams, want %d: %+v", st.Received, sent+1, st)
	}
	if st.Malformed != 2 || st.BadTag != 2 || st.UnknownEndpoint != 2 || st.OutsideWindow != 2 || st.Replayed != 199 {
		t.Fatalf("rejections %+v, want 2 malformed, 2 bad tags, 2 unknown, 2 outside the window, 199 replays", st)
	}
	l.waitWake(t)
	// Deliveries happen on the subscription's goroutine: settle by closing.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if n := l.wakes.Load(); n != 1 {
		t.Fatalf("%d wakes, want exactly the replayed datagram's first copy", n)
	}
}

// A storm of 10,000 announcements becomes a handful of datagrams, and a
// key holder's flood of 5,000 distinct valid datagrams becomes at most
// MaxWakesPerSecond wakes a second; the last announcement of each burst
// still arrives after it (nothing is dropped, only folded).
func TestWakeStormIsCoalescedOnBothEnds(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	ha, hb := newHub(t, qa, Config{}), newHub(t, qb, Config{})
	l := newListener()
	s := subscribe(t, ctx, ha, l)
	l.waitHealth(t, true)

	start := time.Now()
	for range 10_000 {
		hb.Publish(scope)
	}
	burst := time.Since(start)
	afterLast := l.wakes.Load()
	l.waitWakeAfter(t, afterLast)
	if err := hb.Close(); err != nil { // flushes what is still marked
		t.Fatal(err)
	}
	elapsed := time.Since(start)
	st := hb.Stats()
	bound := uint64(elapsed/DefaultCoalesceEvery) + 2
	if st.Publishes != 10_000 || st.Sent > bound || st.Sent < 1 {
		t.Fatalf("10,000 announcements in %s sent %d datagrams (bound %d over %s)", burst, st.Sent, bound, elapsed)
	}
	t.Logf("sender: 10,000 announcements in %s -> %d datagrams, %d endpoint reads", burst, st.Sent, st.EndpointReads)

	// Receiver side: valid datagrams with fresh nonces, as fast as the
	// socket takes them.
	out, err := net.DialUDP("udp", nil, ha.self)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	before := ha.Stats().Delivered
	floodStart := time.Now()
	var b []byte
	for range 5_000 {
		b = wakewire.Message{SentUs: time.Now().UnixMicro(), Nonce: wakewire.NewNonce(), Endpoint: s.ep.ID, Scope: scope}.Append(b[:0], s.ep.Key)
		if _, err := out.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	waitQuiet(t, ha)
	flood := time.Since(floodStart)
	delivered := ha.Stats().Delivered - before
	maxWakes := uint64(flood.Seconds()*DefaultMaxWakesPerSecond) + 2
	if delivered > maxWakes || delivered < 1 {
		t.Fatalf("a flood of 5,000 valid datagrams over %s delivered %d wakes (bound %d)", flood, delivered, maxWakes)
	}
	t.Logf("receiver: 5,000 valid datagrams over %s -> %d wakes (received %d; a kernel buffer may drop some)", flood, delivered, ha.Stats().Received)
}

// waitWakeAfter waits until a wake beyond n arrived.
func (l *listener) waitWakeAfter(t *testing.T, n int64) {
	t.Helper()
	waitFor(t, func() bool { return l.wakes.Load() > n })
}

// waitQuiet waits until the hub received nothing for 200ms.
func waitQuiet(t *testing.T, h *Hub) {
	t.Helper()
	last, lastChange := h.Stats().Received, time.Now()
	waitFor(t, func() bool {
		if n := h.Stats().Received; n != last {
			last, lastChange = n, time.Now()
		}
		return time.Since(lastChange) > 200*time.Millisecond
	})
}

// waitFor polls cond; the deadline only bounds a hung test.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	waitfor.Until(t, 30*time.Second, func() (bool, error) { return cond(), nil },
		func() string { return "condition not reached" })
}

// An unreachable peer (nothing listens on its port) and an address that
// does not resolve cost the sender nothing but a counted error: the live
// peer is still woken and Publish never blocks.
func TestUnreachablePeerDoesNotHoldUpOthers(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	closed, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.LocalAddr().String()
	closed.Close()
	key := make([]byte, workqueue.WakeKeySize)
	for id, addr := range map[string]string{"dead-port": deadAddr, "no-such-host": "no-such-host.invalid:9"} {
		if err := qa.RegisterWakeEndpoint(ctx, scope, workqueue.WakeEndpoint{ID: id, Address: addr, Key: key}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	ha, hb := newHub(t, qa, Config{}), newHub(t, qb, Config{EndpointCacheTTL: time.Hour})
	l := newListener()
	subscribe(t, ctx, ha, l)
	l.waitHealth(t, true)
	for range 3 {
		n := l.wakes.Load()
		hb.Publish(scope)
		l.waitWakeAfter(t, n)
	}
	// A wake can arrive before its sender counted the datagram: settle
	// the sender by closing it.
	if err := hb.Close(); err != nil {
		t.Fatal(err)
	}
	st := hb.Stats()
	if st.Sent < 3 || st.EndpointReads != 1 {
		t.Fatalf("sender %+v: want the live peer woken three times from one endpoint read", st)
	}
	t.Logf("sender with two dead endpoints: %+v", st)
}

// A registration that expired is not sent to, and one that expired more
// than a TTL ago is deleted by the next Subscribe of its scope.
func TestStaleRegistrationsAreSkippedAndSwept(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, exec := newEnv(t)
	var got atomic.Int64
	stale, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	go func() {
		buf := make([]byte, 1024)
		for {
			if _, _, err := stale.ReadFromUDP(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	key := make([]byte, workqueue.WakeKeySize)
	for _, id := range []string{"expired-recently", "expired-long-ago"} {
		if err := qa.RegisterWakeEndpoint(ctx, scope, workqueue.WakeEndpoint{ID: id, Address: stale.LocalAddr().String(), Key: key}, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	exec("UPDATE wake_endpoint SET expires_at = NOW(6) - INTERVAL 1 SECOND WHERE endpoint_id = 'expired-recently'")
	exec("UPDATE wake_endpoint SET expires_at = NOW(6) - INTERVAL 1 DAY WHERE endpoint_id = 'expired-long-ago'")
	ha, hb := newHub(t, qa, Config{}), newHub(t, qb, Config{})
	l := newListener()
	subscribe(t, ctx, ha, l)
	l.waitHealth(t, true)
	hb.Publish(scope)
	l.waitWake(t)
	if err := hb.Close(); err != nil {
		t.Fatal(err)
	}
	if st := hb.Stats(); st.Sent != 1 || got.Load() != 0 {
		t.Fatalf("sent %d datagrams, %d to expired endpoints; want one to the live one only", st.Sent, got.Load())
	}
	eps, err := qa.WakeEndpoints(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 {
		t.Fatalf("live endpoints %v, want the subscriber's only", eps)
	}
	ids := listIDs(t, ctx, qa)
	if len(ids) != 2 || ids[0] == "expired-long-ago" || ids[1] == "expired-long-ago" {
		t.Fatalf("rows after the sweep: %v; want the recent expiry kept (within a TTL) and the old one deleted", ids)
	}
}

// listIDs returns every endpoint row's id, live or not: a sweep with no
// grace would delete them all, so it reads through a transaction it
// rolls back.
func listIDs(t *testing.T, ctx context.Context, q *workqueue.Queue) []string {
	t.Helper()
	var ids []string
	err := q.InTx(ctx, func(ctx context.Context, tx *workqueue.Tx) error {
		rows, err := tx.SQL().QueryContext(ctx, "SELECT endpoint_id FROM wake_endpoint WHERE scope_id = ? ORDER BY endpoint_id", scope)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return rows.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A peer that restarts on a new port (a new hub, a new endpoint) is woken
// there once the sender's endpoint cache expires; the old incarnation's
// row is removed by its Close, or, when it was killed, stays until it
// expires and is sent to harmlessly.
func TestPeerRestartingOnANewPortIsWokenThere(t *testing.T) {
	t.Parallel()
	for _, killed := range []bool{false, true} {
		name := map[bool]string{false: "closed", true: "killed"}[killed]
		t.Run(name, func(t *testing.T) {
			ctx, qa, qb, _ := newEnv(t)
			const cacheTTL = 200 * time.Millisecond
			hb := newHub(t, qb, Config{EndpointCacheTTL: cacheTTL})
			first, err := New(qa, Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			l1 := newListener()
			subscribe(t, ctx, first, l1)
			l1.waitHealth(t, true)
			hb.Publish(scope)
			l1.waitWake(t)
			oldAddr := first.Advertised()
			if killed {
				// A killed process removes nothing: stop its socket only.
				first.cancel()
				first.conn.Close()
				first.wg.Wait()
			} else if err := first.Close(); err != nil {
				t.Fatal(err)
			}
			second := newHub(t, qa, Config{})
			if second.Advertised() == oldAddr {
				t.Fatalf("the restarted hub got the same address %s", oldAddr)
			}
			l2 := newListener()
			subscribe(t, ctx, second, l2)
			l2.waitHealth(t, true)
			// Announce until the sender's cache refreshed and the new port
			// is woken (each announcement is harmless to the old port).
			waitFor(t, func() bool {
				hb.Publish(scope)
				return l2.wakes.Load() > 0
			})
			eps, err := qa.WakeEndpoints(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			want := 1
			if killed {
				want = 2 // the killed incarnation's row lives until its TTL
			}
			if len(eps) != want {
				t.Fatalf("%d live endpoints after the restart, want %d", len(eps), want)
			}
		})
	}
}

// The self-test reports unhealthy when the advertised address does not
// reach the hub (a wrong port mapping), and a renewal that finds its row
// gone registers it again.
func TestSelfTestAndRenewal(t *testing.T) {
	t.Parallel()
	ctx, qa, _, exec := newEnv(t)
	t.Run("wrong advertised address", func(t *testing.T) {
		other, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close() // takes the datagrams, as another program would
		h := newHub(t, qa, Config{Advertise: other.LocalAddr().String(), SelfTestTimeout: 100 * time.Millisecond})
		l := newListener()
		s := subscribe(t, ctx, h, l)
		l.waitHealth(t, false)
		if s.Healthy() {
			t.Fatal("healthy without a self-test")
		}
	})
	t.Run("renewal re-registers", func(t *testing.T) {
		fc := clock.NewFake(time.Now())
		start := fc.Now()
		h := newHub(t, qa, Config{TTL: 30 * time.Second, Clock: fc})
		l := newListener()
		s := subscribe(t, ctx, h, l)
		waitFor(t, func() bool { return h.Stats().SelfTests == 1 })
		if s.Healthy() {
			t.Fatal("healthy before every sender's endpoint cache could have read the registration")
		}
		if !fc.WaitArmed(start.Add(DefaultEndpointCacheTTL), 30*time.Second) {
			t.Fatal("the endpoint-known timer was not armed")
		}
		fc.Advance(DefaultEndpointCacheTTL)
		l.waitHealth(t, true)
		exec("DELETE FROM wake_endpoint WHERE endpoint_id = ?", s.EndpointID())
		next := start.Add(10 * time.Second)
		if !fc.WaitArmed(next, 30*time.Second) {
			t.Fatal("the renewal timer was not armed")
		}
		fc.Advance(next.Sub(fc.Now()))
		waitFor(t, func() bool { return h.Stats().Reregistrations == 1 })
		eps, err := qa.WakeEndpoints(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		if len(eps) != 1 || eps[0].ID != s.EndpointID() {
			t.Fatalf("endpoints %v after the renewal", eps)
		}
	})
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	_, qa, _, _ := newEnv(t)
	for _, cfg := range []Config{
		{Listen: "0.0.0.0:0"}, // every interface and no advertised address
		{Listen: "not an address"},
		{TTL: time.Second},
		{MaxWakesPerSecond: -1},
		{Window: time.Millisecond},
	} {
		if h, err := New(qa, cfg); err == nil {
			h.Close()
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// A hub listening on every interface is reached at the address it
// advertises (a host alone gets the bound port), as a process on another
// host would reach it: here the machine's first non-loopback IPv4 address,
// or 127.0.0.2 on a machine without one.
func TestListenOnEveryInterfaceAdvertiseOne(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	host := "127.0.0.2"
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil && !ip.IP.IsLoopback() {
				host = ip.IP.String()
				break
			}
		}
	}
	ha := newHub(t, qa, Config{Listen: "0.0.0.0:0", Advertise: host})
	port := ha.conn.LocalAddr().(*net.UDPAddr).Port
	if want := net.JoinHostPort(host, strconv.Itoa(port)); ha.Advertised() != want {
		t.Fatalf("advertised %s, want %s", ha.Advertised(), want)
	}
	hb := newHub(t, qb, Config{})
	l := newListener()
	subscribe(t, ctx, ha, l)
	l.waitHealth(t, true)
	hb.Publish(scope)
	l.waitWake(t)
	t.Logf("listening on %s, advertised and woken at %s", ha.conn.LocalAddr(), ha.Advertised())
}

// A sender that read the scope's endpoints just before a new endpoint
// registered keeps that list for its EndpointCacheTTL: the new endpoint
// reports healthy (and its worker goes quiet) only once that time has
// passed, so the first commit it is quiet for reaches it. The sender here
// is a Queue without a hub (its own publisher), as in a producer process.
func TestHealthyOnlyOnceSendersCachesHaveIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const cacheTTL = 300 * time.Millisecond
	qa, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	sender, err := workqueue.New(db, workqueue.Config{Announce: workqueue.AnnounceConfig{EndpointCacheTTL: cacheTTL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sender.Close() })
	sender.Announce(scope, false) // reads the endpoints: none yet
	waitFor(t, func() bool { return sender.AnnounceStats().EndpointReads == 1 })
	h := newHub(t, qa, Config{EndpointCacheTTL: cacheTTL})
	l := newListener()
	subscribe(t, ctx, h, l)
	l.waitHealth(t, true)
	sender.Announce(scope, false)
	l.waitWake(t)
	// The sender counts a datagram once its write returned, which can be
	// after the hub received and handled it.
	waitFor(t, func() bool { return sender.AnnounceStats().Sent >= 1 })
	if st := sender.AnnounceStats(); st.EndpointReads != 2 || st.Sent != 1 {
		t.Fatalf("sender %+v, want a second endpoint read and one datagram", st)
	}
}

// An announcement of a late commit asks the receivers to rewind: the flag
// crosses the wire and Handlers.Rewind runs before the wake; an ordinary
// one does not call it.
func TestRewindCrossesTheWire(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, _ := newEnv(t)
	ha, hb := newHub(t, qa, Config{EndpointCacheTTL: time.Millisecond}), newHub(t, qb, Config{})
	var rewinds atomic.Int64
	l := newListener()
	on := l.handlers()
	on.Rewind = func() { rewinds.Add(1) }
	if _, err := ha.Subscribe(ctx, scope, on); err != nil {
		t.Fatal(err)
	}
	l.waitHealth(t, true)
	hb.Announce(workqueue.Announcement{Scope: scope})
	l.waitWake(t)
	if rewinds.Load() != 0 {
		t.Fatal("an ordinary announcement asked for a rewind")
	}
	hb.Announce(workqueue.Announcement{Scope: scope, Rewind: true})
	waitFor(t, func() bool { return rewinds.Load() == 1 })
	l.waitWake(t)
}

// One endpoint for many scopes: one registration statement writes a row
// per listed scope that exists; a commit in any of them wakes the handler
// with its scope; Add serves one more; a datagram naming a scope the
// endpoint does not serve is dropped; Close removes every row, and the
// hub counts the subscription open until then.
func TestOneEndpointForManyScopes(t *testing.T) {
	t.Parallel()
	ctx, qa, qb, exec := newEnv(t)
	for _, s := range []string{"many/a", "many/b", "many/c"} {
		if err := qa.EnsureScope(ctx, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	ha := newHub(t, qa, Config{})
	newHub(t, qb, Config{}) // B's commits are announced through its hub
	woken := make(chan string, 16)
	healthy := make(chan bool, 4)
	sub, err := ha.SubscribeScopes(ctx, []string{"many/a", "many/b", "many/missing"}, Handlers{
		WakeScope: func(scope string, _, _ bool) { woken <- scope },
		Health:    func(h bool) { healthy <- h },
	})
	if err != nil {
		t.Fatal(err)
	}
	if h := <-healthy; !h {
		t.Fatal("the endpoint of many scopes did not pass its self-test")
	}
	rows := func() (n int) { // the subscription's rows, over every scope of the test
		t.Helper()
		for _, s := range []string{scope, "many/a", "many/b", "many/c", "many/missing"} {
			eps, err := qa.WakeEndpoints(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range eps {
				if e.ID == sub.EndpointID() {
					n++
				}
			}
		}
		return n
	}
	if n := rows(); n != 2 {
		t.Fatalf("%d endpoint rows, want one per existing listed scope (2)", n)
	}
	if n := ha.Stats().Subscriptions; n != 1 {
		t.Fatalf("hub counts %d subscriptions open, want 1", n)
	}
	next := func() string {
		t.Helper()
		select {
		case s := <-woken:
			return s
		case <-time.After(30 * time.Second):
			t.Fatal("no wake arrived")
			return ""
		}
	}
	enqueueTo := func(scope, key string) {
		t.Helper()
		if _, err := qb.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k",
			SourceKind: "s", SourceID: key, Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	enqueueTo("many/b", "b1")
	if s := next(); s != "many/b" {
		t.Fatalf("woken for %q, want many/b", s)
	}
	if err := sub.Add(ctx, []string{"many/c"}); err != nil {
		t.Fatal(err)
	}
	enqueueTo("many/c", "c1")
	if s := next(); s != "many/c" {
		t.Fatalf("woken for %q, want many/c", s)
	}
	// A valid endpoint row for a scope the subscription does not serve:
	// a sender reaching it with the endpoint's key is still refused.
	exec("INSERT INTO wake_endpoint (scope_id, endpoint_id, address, wake_key, registered_at, expires_at) SELECT ?, endpoint_id, address, wake_key, NOW(6), expires_at FROM wake_endpoint WHERE endpoint_id = ? AND scope_id = 'many/a'",
		scope, sub.EndpointID())
	unknown := ha.Stats().UnknownEndpoint
	enqueue(t, ctx, qb, "not-served") // into the test's scope, which the subscription does not serve
	waitFor(t, func() bool { return ha.Stats().UnknownEndpoint > unknown })
	select {
	case s := <-woken:
		t.Fatalf("woken for %q, a scope the endpoint does not serve", s)
	default:
	}
	if got := sub.Scopes(); len(got) != 4 || got[0] != "many/a" {
		t.Fatalf("scopes %q", got)
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 1 { // the row inserted above is not one the subscription wrote
		t.Fatalf("%d endpoint rows after Close, want only the forged one left", n)
	}
	if n := ha.Stats().Subscriptions; n != 0 {
		t.Fatalf("hub counts %d subscriptions open after Close, want 0", n)
	}
}
