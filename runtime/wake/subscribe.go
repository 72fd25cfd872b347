package wake

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/internal/wakewire"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Handlers are what a subscription calls. Both run on the hub's
// goroutines: keep them short and non-blocking (a controller's Wake and
// SetQuiet are).
type Handlers struct {
	// Wake: another process says work may be claimable in the scope;
	// lookFar: some of it only later, so look for the next due time as
	// far as the backstop. Subscribe needs it.
	Wake func(lookFar bool)
	// Rewind, when set, is called before a Wake whose announcement came
	// from a commit later than workqueue.LateCommit after its write began:
	// the receiver's claim scans start from the front (Claimer.Rewind).
	Rewind func()
	// WakeScope is Wake and Rewind for a subscription of many scopes
	// (SubscribeScopes, which needs it): the scope the announcement named.
	WakeScope func(scope string, lookFar, rewind bool)
	// Health: whether other processes can wake this one now. True once
	// the self-test datagram came back through the advertised address,
	// the endpoint is registered, and it has been for EndpointCacheTTL
	// (a sender that read the scope's endpoints just before the
	// registration reuses that list that long: until then its commits
	// do not reach this endpoint); false when the self-test timed out or
	// a renewal failed (until a later renewal succeeds). It is called with
	// the subscription's lock held, so it must not call the subscription.
	Health func(healthy bool)
	// Describe, when set, says what the process is, for operators: it is
	// written into the endpoint row at registration and at each renewal
	// (workqueue.ProcessInfo). It must not call the subscription.
	Describe func() workqueue.ProcessInfo
}

// process is what Describe says now (nil without Describe).
func (on Handlers) process() *workqueue.ProcessInfo {
	if on.Describe == nil {
		return nil
	}
	p := on.Describe()
	return &p
}

// Subscription is an endpoint on a hub: one scope's (Subscribe), or one
// endpoint serving many scopes (SubscribeScopes), with a row per scope.
type Subscription struct {
	h     *Hub
	scope string // the scope of Subscribe; "" for SubscribeScopes
	ep    workqueue.WakeEndpoint
	on    Handlers

	kick      chan struct{} // capacity 1: a wake to deliver
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once

	mu         sync.Mutex
	registered bool // the row is known to exist (false after a failed renewal)
	selfTested bool
	known      bool // registered EndpointCacheTTL ago: every sender's endpoint list has it
	healthy    bool
	lookFar    atomic.Bool // a pending wake asked to look far
	rewind     atomic.Bool // a pending wake asked to rewind
	// scopes are the scopes of SubscribeScopes (nil for Subscribe), and
	// pending their wakes not delivered yet; both under mu.
	scopes  map[string]bool
	pending map[string]pendingWake
}

// pendingWake is what the wakes of one scope asked, folded.
type pendingWake struct{ lookFar, rewind bool }

// ScopeSweepLimit bounds the expired endpoints a Subscribe deletes.
const ScopeSweepLimit = 100

// Subscribe registers an endpoint for scope and calls on.Wake when another
// process announces work in it. It first deletes endpoints of the scope
// that expired more than a TTL ago (processes that died), then sends
// itself a self-test datagram; on.Health(true) follows when it arrives.
func (h *Hub) Subscribe(ctx context.Context, scope string, on Handlers) (*Subscription, error) {
	if on.Wake == nil {
		return nil, errors.New("wake: Subscribe needs a Wake handler")
	}
	return h.subscribe(ctx, on, scope, nil)
}

// SubscribeScopes registers one endpoint for every listed scope that
// exists (a row per scope, written by one statement per
// workqueue.MaxScopesPerStatement scopes) and calls on.WakeScope when
// another process announces work in one of them: one socket, key,
// self-test and renewal for all of them, so a process serving a thousand
// scopes renews them with one statement. Expired endpoints of the scopes
// are swept first, as by Subscribe. Add registers more scopes.
func (h *Hub) SubscribeScopes(ctx context.Context, scopes []string, on Handlers) (*Subscription, error) {
	if on.WakeScope == nil {
		return nil, errors.New("wake: SubscribeScopes needs a WakeScope handler")
	}
	if len(scopes) == 0 {
		return nil, errors.New("wake: SubscribeScopes needs at least one scope")
	}
	return h.subscribe(ctx, on, "", slices.Clone(scopes))
}

// subscribe registers one scope's endpoint (scopes nil) or one endpoint of
// many scopes, self-tests it and starts delivering its wakes.
func (h *Hub) subscribe(ctx context.Context, on Handlers, scope string, scopes []string) (*Subscription, error) {
	if on.Health == nil {
		on.Health = func(bool) {}
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, ErrClosed
	}
	h.nextSub++
	id := fmt.Sprintf("%s-%d", h.idPrefix, h.nextSub)
	h.mu.Unlock()
	key := make([]byte, workqueue.WakeKeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("wake: endpoint key: %w", err)
	}
	s := &Subscription{
		h: h, scope: scope, on: on, ep: workqueue.WakeEndpoint{ID: id, Address: h.advertise, Key: key},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	s.ep.Process = on.process()
	if scopes == nil {
		if _, err := h.q.SweepWakeEndpoints(ctx, scope, h.cfg.TTL, ScopeSweepLimit); err != nil {
			return nil, err
		}
		if err := h.q.RegisterWakeEndpoint(ctx, scope, s.ep, h.cfg.TTL); err != nil {
			return nil, err
		}
	} else {
		s.scopes, s.pending = map[string]bool{}, map[string]pendingWake{}
		if err := s.register(ctx, scopes); err != nil {
			return nil, err
		}
	}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		_ = s.remove(ctx)
		return nil, ErrClosed
	}
	h.subs[id] = s
	h.wg.Add(1) // the self-test's timer, counted while Close cannot be waiting yet
	h.mu.Unlock()
	s.mu.Lock()
	s.registered = true
	s.mu.Unlock()
	go s.deliverLoop()
	h.selfTest(s)
	h.wg.Add(1)
	go s.becomeKnown()
	return s, nil
}

// register sweeps the expired endpoints of scopes, registers this endpoint
// for them and adds them to the subscription's scopes (SubscribeScopes).
func (s *Subscription) register(ctx context.Context, scopes []string) error {
	h := s.h
	if _, err := h.q.SweepWakeEndpointsForScopes(ctx, scopes, h.cfg.TTL, ScopeSweepLimit); err != nil {
		return err
	}
	if err := h.q.RegisterWakeEndpointForScopes(ctx, scopes, s.ep, h.cfg.TTL); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sc := range scopes {
		s.scopes[sc] = true
	}
	return nil
}

// Add registers the endpoint of a SubscribeScopes subscription for more
// scopes (scopes it already serves are written again, harmlessly). A
// sender that listed one of them within EndpointCacheTTL before does not
// wake it here until its list expires.
func (s *Subscription) Add(ctx context.Context, scopes []string) error {
	if s.scopes == nil {
		return errors.New("wake: Add is for subscriptions of SubscribeScopes")
	}
	return s.register(ctx, scopes)
}

// Scopes returns the scopes a SubscribeScopes subscription serves, sorted
// (nil for Subscribe's).
func (s *Subscription) Scopes() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scopes == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(s.scopes))
}

// serves reports whether the subscription takes wakes of scope.
func (s *Subscription) serves(scope string) bool {
	if s.scopes == nil {
		return scope == s.scope
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scopes[scope]
}

// remove deletes the endpoint's rows.
func (s *Subscription) remove(ctx context.Context) error {
	if s.scopes == nil {
		return s.h.q.RemoveWakeEndpoint(ctx, s.scope, s.ep.ID)
	}
	return s.h.q.RemoveWakeEndpointForScopes(ctx, s.Scopes(), s.ep.ID)
}

// becomeKnown marks the endpoint known to every sender once their cached
// endpoint lists (EndpointCacheTTL) were all read after its registration.
func (s *Subscription) becomeKnown() {
	defer s.h.wg.Done()
	t := s.h.cfg.Clock.NewTimer()
	defer t.Stop()
	t.Reset(s.h.cfg.EndpointCacheTTL)
	select {
	case <-t.C():
		s.setState(func() { s.known = true })
	case <-s.stop:
	case <-s.h.ctx.Done():
	}
}

// EndpointID is the subscription's wake_endpoint id.
func (s *Subscription) EndpointID() string { return s.ep.ID }

// Healthy reports what the last Health call said.
func (s *Subscription) Healthy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthy
}

// setState updates the registration and self-test facts and calls Health
// when health changed.
// Health is called under s.mu, so reports are never reordered.
func (s *Subscription) setState(update func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was := s.healthy
	update()
	s.healthy = s.registered && s.selfTested && s.known
	if s.healthy != was {
		s.h.log.Info("wake endpoint health changed", "scope", s.scope, "endpoint", s.ep.ID, "healthy", s.healthy)
		s.on.Health(s.healthy)
	}
}

// selfTest sends s a datagram through the advertised address; health
// turns true when it arrives (receiveLoop), and a timer reports false if
// it does not arrive in time. The caller counted the timer in h.wg.
func (h *Hub) selfTest(s *Subscription) {
	b := wakewire.Message{SelfTest: true, SentUs: time.Now().UnixMicro(), Nonce: wakewire.NewNonce(), Endpoint: s.ep.ID, Scope: s.selfTestScope()}.Append(nil, s.ep.Key)
	if _, err := h.conn.WriteToUDP(b, h.self); err != nil {
		h.st.sendErrors.Add(1)
		h.log.Warn("wake self-test could not be sent: other processes cannot wake this one; it keeps probing", "advertise", h.advertise, "err", err)
		s.on.Health(false)
		h.wg.Done()
		return
	}
	go func() {
		defer h.wg.Done()
		t := h.cfg.Clock.NewTimer()
		defer t.Stop()
		t.Reset(h.cfg.SelfTestTimeout)
		select {
		case <-t.C():
		case <-s.stop:
			return
		case <-h.ctx.Done():
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.selfTested {
			h.log.Warn("wake self-test datagram did not come back through the advertised address in time: other processes cannot wake this one; it keeps probing",
				"scope", s.scope, "advertise", h.advertise, "timeout", h.cfg.SelfTestTimeout)
			s.on.Health(false) // a late self-test still reports true
		}
	}()
}

// selfTestScope is the scope the self-test datagram names: one the
// endpoint serves.
func (s *Subscription) selfTestScope() string {
	if s.scopes == nil {
		return s.scope
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := ""
	for sc := range s.scopes {
		if first == "" || sc < first {
			first = sc
		}
	}
	return first
}

// wake queues one delivery; deliveries already queued absorb it.
func (s *Subscription) wake(scope string, lookFar, rewind bool) {
	if s.scopes != nil {
		s.mu.Lock()
		p := s.pending[scope]
		s.pending[scope] = pendingWake{lookFar: p.lookFar || lookFar, rewind: p.rewind || rewind}
		s.mu.Unlock()
	}
	if lookFar {
		s.lookFar.Store(true)
	}
	if rewind {
		s.rewind.Store(true)
	}
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// deliverLoop delivers queued wakes at most MaxWakesPerSecond a second:
// after a delivery it waits out the gap, and every wake that arrived
// meanwhile is folded into the next delivery, never dropped.
func (s *Subscription) deliverLoop() {
	defer close(s.done)
	gap := time.Second / time.Duration(s.h.cfg.MaxWakesPerSecond)
	t := s.h.cfg.Clock.NewTimer()
	defer t.Stop()
	for {
		select {
		case <-s.kick:
		case <-s.stop:
			return
		}
		s.h.st.delivered.Add(1)
		s.deliver()
		t.Reset(gap)
		select {
		case <-t.C():
		case <-s.stop:
			return
		}
	}
}

// deliver calls the handlers for the wakes queued since the last delivery.
func (s *Subscription) deliver() {
	lookFar, rewind := s.lookFar.Swap(false), s.rewind.Swap(false)
	if s.scopes == nil {
		if rewind && s.on.Rewind != nil {
			s.on.Rewind()
		}
		s.on.Wake(lookFar)
		return
	}
	s.mu.Lock()
	pending := s.pending
	s.pending = map[string]pendingWake{}
	s.mu.Unlock()
	for _, sc := range slices.Sorted(maps.Keys(pending)) {
		s.on.WakeScope(sc, pending[sc].lookFar, pending[sc].rewind)
	}
}

// Renew renews the registration now (registering again when the row is
// gone), writing what Handlers.Describe says: a process whose description
// changed (its quiet mode) says so without waiting for the periodic
// renewal. One statement.
func (s *Subscription) Renew(ctx context.Context) error { return s.renew(ctx) }

// renew renews the registration, registering again when the row is gone.
func (s *Subscription) renew(ctx context.Context) error {
	h := s.h
	h.st.renewals.Add(1)
	ep := s.ep
	ep.Process = s.on.process()
	var found bool
	var err error
	if s.scopes == nil {
		found, err = h.q.RenewWakeEndpoint(ctx, s.scope, ep.ID, h.cfg.TTL, ep.Process)
	} else {
		found, err = h.q.RenewWakeEndpointForScopes(ctx, s.Scopes(), ep.ID, h.cfg.TTL, ep.Process)
	}
	if err == nil && !found {
		if s.scopes == nil {
			err = h.q.RegisterWakeEndpoint(ctx, s.scope, ep, h.cfg.TTL)
		} else {
			err = h.q.RegisterWakeEndpointForScopes(ctx, s.Scopes(), ep, h.cfg.TTL)
		}
		if err == nil { // counted once the row is back, not before
			h.st.reregistrations.Add(1)
		}
	}
	if err != nil {
		h.st.renewalErrors.Add(1)
	}
	s.setState(func() { s.registered = err == nil })
	return err
}

// Close removes the endpoint's row and stops deliveries.
func (s *Subscription) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.h.mu.Lock()
		delete(s.h.subs, s.ep.ID)
		s.h.mu.Unlock()
		close(s.stop)
		<-s.done
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		err = s.remove(ctx)
	})
	return err
}

// keepLoop renews every subscription's registration every TTL/3; after a
// failure it tries again every RenewRetry until it succeeds.
func (h *Hub) keepLoop() {
	defer h.wg.Done()
	t := h.cfg.Clock.NewTimer()
	defer t.Stop()
	every := h.cfg.TTL / 3
	for {
		t.Reset(every)
		select {
		case <-t.C():
		case <-h.ctx.Done():
			return
		}
		h.mu.Lock()
		subs := make([]*Subscription, 0, len(h.subs))
		for _, s := range h.subs {
			subs = append(subs, s)
		}
		h.mu.Unlock()
		failed := false
		for _, s := range subs {
			ctx, cancel := context.WithTimeout(h.ctx, dbTimeout)
			if err := s.renew(ctx); err != nil && h.ctx.Err() == nil {
				failed = true
				h.log.Warn("wake endpoint renewal failed: other processes may stop waking this one; it probes meanwhile",
					"scope", s.scope, "endpoint", s.ep.ID, "err", err, "retry_in", RenewRetry)
			}
			cancel()
		}
		every = h.cfg.TTL / 3
		if failed {
			every = min(every, RenewRetry)
		}
	}
}

// RenewRetry is how soon a failed renewal is tried again.
const RenewRetry = 30 * time.Second
