package workqueue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/laneq/laneq/internal/wakewire"
)

// The one rule: whoever makes work runnable makes it visible. Every
// Queue method whose commit can make an item claimable (enqueue, a Tx's
// commit, replay, satisfy, the dependency safety pass, a finish that
// promotes lane followers or a projection successor, a release, a retry,
// a dependency wait that found its key, lane recovery, expiring a lease to
// dead, a new generation) announces the scope itself, after the commit,
// through announce: no caller can forget, and a process that holds only a
// Queue announces too. announce tells this process's listeners (OnAnnounce:
// a worker on the Queue claims at once) and sends other processes a wake
// datagram through the attached announcer (a runtime/wake Hub), or, when
// none is attached, through the Queue's own publisher. A lost announcement
// costs at most the receivers' probe period (see runtime/worker).
//
// A process may end right after a commit: a CLI command, a script, a cron
// job, a request handler of a serverless platform. So when nothing in the
// process listens on the Queue (no worker runs on it, no hub is attached),
// the committing call waits until the Queue's own publisher has written
// the commit's datagrams, at most AnnounceConfig.DeliveryWait: delivery
// does not depend on the process calling Close before it exits. A commit
// waits for an endpoint list read (cached for EndpointCacheTTL) and the
// sends, not for the coalescing gap (a waiting commit's scope goes at
// once; commits that came together share a datagram), so one goroutine's
// commits are not paced by it. A process with a worker on the Queue does
// not wait: it lives on, and its Close (laneq.Client.Close) sends what is
// left.

// Announcement says work may have become claimable in Scope.
type Announcement struct {
	Scope string
	// LookFar: some of it is due later (a delay, a retry's backoff), so a
	// listener that arms timers must look further ahead than now.
	LookFar bool
	// Rewind: the write committed more than LateCommit after it began, so
	// the due times it set may lie behind a claimer's floor by more than
	// its straggler window: a listener's claimer scans from the front
	// (Claimer.Rewind) before it claims.
	Rewind bool
}

// LateCommit is how long after it began a write may commit before its
// announcement asks for a rewind. A transition sets its rows' due time to
// the database time of its statement; a claimer scanning from its floor
// finds a row whose commit came at most its StragglerWindow (default 2s)
// after that time. Keep StragglerWindow above LateCommit.
const LateCommit = time.Second

// Announcer carries a Queue's announcements to other processes; a
// runtime/wake Hub is one (Hub.Watch attaches it).
type Announcer interface {
	Announce(Announcement)
}

// AnnounceConfig tunes the datagrams a Queue sends other processes while
// no Announcer is attached. Zero fields take the defaults.
type AnnounceConfig struct {
	// Off: the Queue sends no datagrams of its own; an attached Announcer
	// still announces, and in-process listeners still hear everything.
	// Other processes then learn of this Queue's commits only on their
	// probes.
	Off bool
	// EndpointCacheTTL is how long a scope's wake endpoint list is reused
	// before it is read again (only while the scope is announced): a
	// process that starts listening is woken by this one within it.
	// Default 5s.
	EndpointCacheTTL time.Duration
	// CoalesceEvery is the least time between two datagrams to one
	// endpoint for one scope; the first of a burst goes at once. Default
	// 10ms.
	CoalesceEvery time.Duration
	// DeliveryWait bounds how long a commit waits for its datagrams while
	// nothing in this process listens on the Queue (see Announcement):
	// the wait ends once they were written, so it costs the sends (not the
	// coalescing gap: a waiting commit's scope goes at once). Default 1s;
	// negative: commits do not wait, and the process must Close the Queue
	// before it exits or lose the announcements still coalescing.
	DeliveryWait time.Duration
	// Drop, when set, is asked before each datagram; true drops it. For
	// fault tests of lost wakes.
	Drop func() bool
	// Logger receives failed endpoint reads. Default slog.Default().
	Logger *slog.Logger
}

// DefaultDeliveryWait is AnnounceConfig.DeliveryWait when zero.
const DefaultDeliveryWait = time.Second

// announcer state of a Queue (see the rule above).
type announcing struct {
	mu           sync.Mutex
	nextID       uint64
	listeners    map[uint64]func(Announcement)
	announcers   map[uint64]Announcer
	pub          *wakewire.Publisher // nil when AnnounceConfig.Off
	deliveryWait time.Duration       // AnnounceConfig.DeliveryWait with its default; negative: none
}

func (qu *Queue) initAnnouncing() {
	a := &qu.ann
	a.listeners, a.announcers = map[uint64]func(Announcement){}, map[uint64]Announcer{}
	if qu.cfg.Announce.Off {
		return
	}
	a.deliveryWait = qu.cfg.Announce.DeliveryWait
	if a.deliveryWait == 0 {
		a.deliveryWait = DefaultDeliveryWait
	}
	a.pub = wakewire.NewPublisher(wakewire.PublisherConfig{
		List: func(ctx context.Context, scope string) ([]wakewire.Endpoint, error) {
			eps, err := qu.WakeEndpoints(ctx, scope)
			return WireEndpoints(eps), err
		},
		EndpointCacheTTL: qu.cfg.Announce.EndpointCacheTTL, CoalesceEvery: qu.cfg.Announce.CoalesceEvery,
		Drop: qu.cfg.Announce.Drop, Logger: qu.cfg.Announce.Logger,
	})
}

// WireEndpoints converts endpoints for a wakewire.Publisher.
func WireEndpoints(eps []WakeEndpoint) []wakewire.Endpoint {
	out := make([]wakewire.Endpoint, len(eps))
	for i, e := range eps {
		out[i] = wakewire.Endpoint{ID: e.ID, Address: e.Address, Key: e.Key}
	}
	return out
}

// OnAnnounce calls fn after every commit through this Queue that may have
// made work claimable, in any scope, on the committing goroutine: keep it
// short and non-blocking (a worker's Wake is). The returned function stops
// the calls. A worker listens while it runs, so work made claimable in its
// process starts without a Wake call of the caller's.
func (qu *Queue) OnAnnounce(fn func(Announcement)) (stop func()) {
	return register(&qu.ann.mu, &qu.ann.nextID, qu.ann.listeners, fn)
}

// register adds v to m under mu with a fresh id and returns the function
// that removes it (once).
func register[V any](mu *sync.Mutex, nextID *uint64, m map[uint64]V, v V) (remove func()) {
	mu.Lock()
	defer mu.Unlock()
	*nextID++
	id := *nextID
	m[id] = v
	var once sync.Once
	return func() {
		once.Do(func() {
			mu.Lock()
			defer mu.Unlock()
			delete(m, id)
		})
	}
}

// AttachAnnouncer makes an carry this Queue's announcements to other
// processes instead of the Queue's own publisher, until detach is called.
// With several attached, each hears every announcement.
func (qu *Queue) AttachAnnouncer(an Announcer) (detach func()) {
	return register(&qu.ann.mu, &qu.ann.nextID, qu.ann.announcers, an)
}

// Announce says work may have become claimable in scope by a commit the
// Queue did not make (rows written by other means). Every Queue method
// that makes work claimable announces by itself.
func (qu *Queue) Announce(scope string, lookFar bool) { qu.announce(scope, lookFar) }

func (qu *Queue) announce(scope string, lookFar bool) {
	qu.send(Announcement{Scope: scope, LookFar: lookFar})
}

// announceSince announces a write that began at began: one that committed
// LateCommit or more after it asks for a rewind.
func (qu *Queue) announceSince(scope string, lookFar bool, began time.Time) {
	qu.send(Announcement{Scope: scope, LookFar: lookFar, Rewind: time.Since(began) >= LateCommit})
}

func (qu *Queue) send(n Announcement) {
	a := &qu.ann
	a.mu.Lock()
	fns := make([]func(Announcement), 0, len(a.listeners))
	for _, fn := range a.listeners {
		fns = append(fns, fn)
	}
	ans := make([]Announcer, 0, len(a.announcers))
	for _, an := range a.announcers {
		ans = append(ans, an)
	}
	a.mu.Unlock()
	for _, fn := range fns {
		fn(n)
	}
	for _, an := range ans {
		an.Announce(n)
	}
	if len(ans) > 0 || a.pub == nil {
		return
	}
	f := wakewire.Flags{LookFar: n.LookFar, Rewind: n.Rewind}
	if len(fns) == 0 && a.deliveryWait > 0 {
		// Nothing here runs on this Queue: the process may exit as soon
		// as this call returns, and the publisher's goroutine with it.
		a.pub.MarkAndWait(n.Scope, f, a.deliveryWait)
		return
	}
	a.pub.Mark(n.Scope, f)
}

// AnnounceStats counts the datagrams the Queue's own publisher sent (an
// attached Announcer keeps its own counts).
func (qu *Queue) AnnounceStats() wakewire.PublisherStats {
	if qu.ann.pub == nil {
		return wakewire.PublisherStats{}
	}
	return qu.ann.pub.Stats()
}

// Close sends the announcements still coalescing and stops the Queue's
// publisher (its goroutine and socket). A process that holds only a
// Queue has sent its commits' announcements before Close already (see
// AnnounceConfig.DeliveryWait); one with a worker on the Queue, or with
// DeliveryWait negative, must Close before it exits, or the announcements
// still coalescing are lost (other processes then find that work on their
// probes only). The Queue stays usable for everything else; later
// announcements reach in-process listeners and attached announcers only.
// It does not close the database.
func (qu *Queue) Close() error {
	if qu.ann.pub != nil {
		qu.ann.pub.Close()
	}
	return nil
}
