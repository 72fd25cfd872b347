// Package wake lets a commit in one laneq process start work in another
// within milliseconds, with nothing beyond TiDB and the processes
// themselves, and without polling.
//
// A Hub is one process's UDP socket. A worker Subscribes its scope: the
// hub registers a wake endpoint (a wake_endpoint row: address, a fresh
// HMAC key, an expiry renewed every TTL/3) and checks with a self-test
// datagram that its advertised address reaches it. After every commit
// that made work claimable through a Queue it watches (the Queue announces
// each one itself: see workqueue.Announcement) the hub sends one small
// tagged datagram to each live endpoint of the scope, other than its own.
// A Queue no hub watches sends the same datagrams itself. Bursts coalesce on both ends: a sender sends a scope's
// endpoints at most one datagram per CoalesceEvery, a receiver delivers at
// most MaxWakesPerSecond wakes per subscription, folding the rest into one
// trailing wake, so nothing is lost and nothing piles up.
//
// A wake only makes the receiver look at its queue: it names no work.
// Lost, late, duplicated or never-sent wakes are harmless, because the
// worker's generation probe and reconciliation backstop stay on as the
// safety net (with longer periods while wakes are healthy; see
// controller.Config.QuietProbeEvery).
//
// Security: the hub listens on Config.Listen (loopback by default). A
// datagram is accepted only with a valid HMAC-SHA256 tag made with the
// receiving endpoint's key, a send time within Config.Window of the
// receiver's clock, and a nonce not seen within that window. So whoever
// can reach the port but cannot read the wake_endpoint table cannot cause
// a single claim turn; replaying a captured datagram causes none either;
// and even a holder of the key (who can already write the queue) causes at
// most MaxWakesPerSecond claim turns per second per subscription. Forged
// and malformed datagrams are counted (Stats) and dropped without a reply.
package wake

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/internal/wakewire"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Defaults of Config.
const (
	DefaultListen            = "127.0.0.1:0"
	DefaultTTL               = 6 * time.Hour
	DefaultWindow            = time.Minute
	DefaultEndpointCacheTTL  = wakewire.DefaultEndpointCacheTTL
	DefaultCoalesceEvery     = wakewire.DefaultCoalesceEvery
	DefaultMaxWakesPerSecond = 100
	DefaultSelfTestTimeout   = 2 * time.Second
)

// Config configures a Hub. Zero fields take the defaults.
type Config struct {
	// Listen is the UDP address the hub binds. Default 127.0.0.1:0 (a free
	// loopback port): processes on this host only. Across hosts or
	// containers, listen on an address others can reach and set Advertise.
	Listen string
	// Advertise is the host:port other processes send to, or a host alone
	// (the bound port is added). Default: the bound address; required
	// when Listen's host is unspecified (0.0.0.0, ::) or behind a port
	// mapping.
	Advertise string
	// TTL is how long an endpoint registration lives without renewal; it
	// is renewed every TTL/3. A process that dies without removing its
	// row is sent datagrams (harmlessly) until then. Default 6h.
	TTL time.Duration
	// Window is the accepted difference between a datagram's send time and
	// the receiver's clock (hosts' clock skew plus delivery). Default 1m.
	Window time.Duration
	// EndpointCacheTTL is how long a sender reuses a scope's endpoint list
	// before reading it again (only while it sends). A process that
	// starts listening is woken by others within this time. Default 5s.
	EndpointCacheTTL time.Duration
	// CoalesceEvery is the least time between two datagrams a sender
	// sends one endpoint for one scope; the first of a burst goes at once.
	// Default 10ms.
	CoalesceEvery time.Duration
	// MaxWakesPerSecond bounds the wakes one subscription delivers; more
	// fold into one trailing wake. Default 100.
	MaxWakesPerSecond int
	// SelfTestTimeout bounds the wait for the self-test datagram before a
	// subscription is reported unhealthy. Default 2s.
	SelfTestTimeout time.Duration
	// Clock times coalescing, rate limits and renewals. Default clock.Real().
	Clock clock.Clock
	// Logger receives lifecycle records. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() (Config, error) {
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.EndpointCacheTTL == 0 {
		c.EndpointCacheTTL = DefaultEndpointCacheTTL
	}
	if c.CoalesceEvery == 0 {
		c.CoalesceEvery = DefaultCoalesceEvery
	}
	if c.MaxWakesPerSecond == 0 {
		c.MaxWakesPerSecond = DefaultMaxWakesPerSecond
	}
	if c.SelfTestTimeout == 0 {
		c.SelfTestTimeout = DefaultSelfTestTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	switch {
	case c.TTL < 3*time.Second:
		return c, &ConfigError{"TTL", c.TTL.String(), "want at least 3s"}
	case c.Window < time.Second:
		return c, &ConfigError{"Window", c.Window.String(), "want at least 1s"}
	case c.EndpointCacheTTL < 0:
		return c, &ConfigError{"EndpointCacheTTL", c.EndpointCacheTTL.String(), "want a positive duration"}
	case c.CoalesceEvery < 0:
		return c, &ConfigError{"CoalesceEvery", c.CoalesceEvery.String(), "want a positive duration"}
	case c.MaxWakesPerSecond < 1:
		return c, &ConfigError{"MaxWakesPerSecond", fmt.Sprint(c.MaxWakesPerSecond), "want a positive number"}
	case c.SelfTestTimeout < 0:
		return c, &ConfigError{"SelfTestTimeout", c.SelfTestTimeout.String(), "want a positive duration"}
	}
	return c, nil
}

// ConfigError reports an invalid setting.
type ConfigError struct{ Setting, Value, Reason string }

func (e *ConfigError) Error() string {
	return fmt.Sprintf("wake: invalid %s=%q: %s", e.Setting, e.Value, e.Reason)
}

// ErrClosed reports a Hub used after Close.
var ErrClosed = errors.New("wake: hub closed")

// Stats counts what a hub did since it was built.
type Stats struct {
	Publishes      uint64 // announcements (commits announced, Publish calls)
	Sent           uint64 // datagrams sent
	SendErrors     uint64 // datagrams the socket refused (unreachable, bad address)
	EndpointReads  uint64 // endpoint list reads from the database
	EndpointErrors uint64 // failed endpoint list reads (that burst was not announced)
	Received       uint64 // datagrams read from the socket
	Delivered      uint64 // wakes handed to subscribers
	SelfTests      uint64 // self-test datagrams received back
	// Rejected datagrams, by reason.
	Malformed, UnknownEndpoint, BadTag, OutsideWindow, Replayed uint64
	Renewals, RenewalErrors, Reregistrations                    uint64
	// Scopes is how many scopes the sender keeps state for: the ones
	// announced lately, not every scope ever announced.
	Scopes int
	// Subscriptions is how many subscriptions are open now: each keeps an
	// endpoint row per scope, renewed, until it is closed. A count that
	// grows as workers or groups come and go on a shared hub means one of
	// them did not close its own.
	Subscriptions int
}

// Hub is one process's wake socket: it publishes and receives wakes for
// any number of scopes. It is safe for concurrent use.
type Hub struct {
	q         *workqueue.Queue
	cfg       Config
	log       *slog.Logger
	conn      *net.UDPConn
	advertise string
	self      *net.UDPAddr // the advertised address, resolved
	idPrefix  string

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	nextSub uint64
	subs    map[string]*Subscription // endpoint id -> subscription
	watched map[*workqueue.Queue]func()

	pub *wakewire.Publisher // the one sender implementation (a Queue's own is another instance)
	rx  receiver
	st  stats
}

type stats struct {
	sendErrors                                    atomic.Uint64 // self-tests the socket refused
	received, delivered, selfTests                atomic.Uint64
	malformed, unknown, badTag, outside, replayed atomic.Uint64
	renewals, renewalErrors, reregistrations      atomic.Uint64
}

// New binds the hub's socket and starts it. It announces enqueues that
// commit through q (see Watch) and keeps its endpoints in q's database.
func New(q *workqueue.Queue, cfg Config) (*Hub, error) {
	if q == nil {
		return nil, errors.New("wake: nil queue")
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	laddr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, &ConfigError{"Listen", cfg.Listen, err.Error()}
	}
	conn, err := net.ListenUDP("udp", laddr)
	if err != nil {
		return nil, fmt.Errorf("wake: listen on %s: %w", cfg.Listen, err)
	}
	h := &Hub{q: q, cfg: cfg, log: cfg.Logger, conn: conn, subs: map[string]*Subscription{}, watched: map[*workqueue.Queue]func(){}}
	bound := conn.LocalAddr().(*net.UDPAddr)
	h.advertise = cfg.Advertise
	if h.advertise == "" {
		if bound.IP.IsUnspecified() {
			conn.Close()
			return nil, &ConfigError{"Advertise", "", fmt.Sprintf("listening on %s (every interface): say which address other processes reach this one at", bound)}
		}
		h.advertise = bound.String()
	} else if _, _, err := net.SplitHostPort(h.advertise); err != nil {
		h.advertise = net.JoinHostPort(h.advertise, strconv.Itoa(bound.Port)) // a host alone
	}
	if h.self, err = net.ResolveUDPAddr("udp", h.advertise); err != nil {
		conn.Close()
		return nil, &ConfigError{"Advertise", h.advertise, err.Error()}
	}
	if len(h.advertise) > workqueue.MaxWakeEndpointAddress {
		conn.Close()
		return nil, &ConfigError{"Advertise", h.advertise, "longer than 255 bytes"}
	}
	var id [6]byte
	if _, err := rand.Read(id[:]); err != nil {
		conn.Close()
		return nil, fmt.Errorf("wake: endpoint id: %w", err)
	}
	h.idPrefix = hex.EncodeToString(id[:])
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.pub = wakewire.NewPublisher(wakewire.PublisherConfig{
		List: func(ctx context.Context, scope string) ([]wakewire.Endpoint, error) {
			eps, err := q.WakeEndpoints(ctx, scope)
			return workqueue.WireEndpoints(eps), err
		},
		Conn: conn, Skip: h.owns, EndpointCacheTTL: cfg.EndpointCacheTTL, CoalesceEvery: cfg.CoalesceEvery,
		Clock: cfg.Clock, Logger: cfg.Logger,
	})
	h.rx.init()
	h.wg.Add(2)
	go h.receiveLoop()
	go h.keepLoop()
	h.Watch(q)
	h.log.Info("wake hub listening", "listen", bound.String(), "advertise", h.advertise)
	return h, nil
}

// Advertised is the address other processes send this hub's wakes to.
func (h *Hub) Advertised() string { return h.advertise }

// Watch makes the hub carry every announcement of q (see
// workqueue.Announcement: enqueues, satisfied dependencies, promotions,
// releases, retries, replays, ...) to the scope's other processes, in
// place of q's own publisher, until Close; the hub's own endpoints are
// skipped, since its workers hear q's announcements in-process. Watching
// a Queue twice changes nothing. New watches its own Queue.
func (h *Hub) Watch(q *workqueue.Queue) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.watched[q] != nil {
		return
	}
	h.watched[q] = q.AttachAnnouncer(h)
}

// Announce is workqueue.Announcer: Publish, or PublishLookFar.
func (h *Hub) Announce(a workqueue.Announcement) {
	h.pub.Mark(a.Scope, wakewire.Flags{LookFar: a.LookFar, Rewind: a.Rewind})
}

// Publish announces that work may be claimable in scope now (after the
// commit that made it so). It never blocks: the datagrams go out from the
// hub's sender, coalesced with other announcements of the scope. A
// watched Queue publishes by itself; call it for rows written by other
// means.
func (h *Hub) Publish(scope string) { h.pub.Mark(scope, wakewire.Flags{}) }

// PublishLookFar is Publish for work that becomes claimable later: the
// receivers also look for the scope's next due time as far as their
// backstop (a quiet worker otherwise looks only as far as the normal
// backstop period after a claim turn).
func (h *Hub) PublishLookFar(scope string) { h.pub.Mark(scope, wakewire.Flags{LookFar: true}) }

// Stats returns the counters.
func (h *Hub) Stats() Stats {
	s, p := &h.st, h.pub.Stats()
	h.mu.Lock()
	subs := len(h.subs)
	h.mu.Unlock()
	return Stats{
		Publishes: p.Publishes, Sent: p.Sent, SendErrors: p.SendErrors + s.sendErrors.Load(),
		EndpointReads: p.EndpointReads, EndpointErrors: p.EndpointErrors, Scopes: p.Scopes,
		Received: s.received.Load(), Delivered: s.delivered.Load(), SelfTests: s.selfTests.Load(),
		Malformed: s.malformed.Load(), UnknownEndpoint: s.unknown.Load(), BadTag: s.badTag.Load(),
		OutsideWindow: s.outside.Load(), Replayed: s.replayed.Load(),
		Renewals: s.renewals.Load(), RenewalErrors: s.renewalErrors.Load(), Reregistrations: s.reregistrations.Load(),
		Subscriptions: subs,
	}
}

// dbTimeout bounds each of the hub's own statements.
const dbTimeout = 10 * time.Second

// Close removes the hub's endpoints (so nobody wakes a port that may soon
// belong to another program), stops watching, sends what was published
// before it (coalescing waived), and closes the socket.
func (h *Hub) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	subs := make([]*Subscription, 0, len(h.subs))
	for _, s := range h.subs {
		subs = append(subs, s)
	}
	for _, stop := range h.watched {
		stop()
	}
	h.mu.Unlock()
	var errs []error
	for _, s := range subs {
		errs = append(errs, s.Close())
	}
	h.pub.Close() // announcements made before Close still go out
	h.cancel()
	errs = append(errs, h.conn.Close())
	h.wg.Wait()
	return errors.Join(errs...)
}

// owns reports whether id is one of this hub's endpoints, live or already
// closed (a sender skips them: the in-process worker heard of the commit
// already). It goes by the id's prefix, not by h.subs, so a subscription
// closed while a send is under way is not mistaken for another process.
func (h *Hub) owns(id string) bool {
	return strings.HasPrefix(id, h.idPrefix+"-")
}

func (h *Hub) now() time.Time { return h.cfg.Clock.Now() }
