package laneq

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/laneq/laneq/runtime/worker"
)

// EventKind names what became of an item.
type EventKind string

// Event kinds. Each is published once its write committed.
const (
	EventCompleted EventKind = "completed" // the handler returned nil
	EventSkipped   EventKind = "skipped"   // the handler returned worker.ErrSkip
	EventRetried   EventKind = "retried"   // failed with retries left; due again after RetryIn
	EventDead      EventKind = "dead"      // failed for good (permanent, or a budget spent)
	EventWaiting   EventKind = "waiting"   // parked until its dependency is satisfied
	EventReleased  EventKind = "released"  // given back unrun on shutdown, due at once
	EventCancelled EventKind = "cancelled" // cancelled while running (Client.Cancel): ended skipped when its handler stopped
	EventDeferred  EventKind = "deferred"  // its rate limit had no start left: given back unrun until the next window
	EventReplayed  EventKind = "replayed"  // a dead item replayed through this Client (WorkID is the new item)
)

// Event says what became of one item in this process: the outcomes this
// Client's worker wrote, and its replays. An item finished by another
// process is reported there.
type Event struct {
	Kind       EventKind
	WorkID     int64
	WorkType   string
	QueueClass string
	Attempt    int32 // the attempt that ended (attempts so far, this one included)
	// Err is the handler's error (retried, dead, waiting); nil otherwise.
	Err error
	// RetryIn is how long after the write the next attempt is due
	// (EventRetried).
	RetryIn time.Duration
	// ReplayOf is the dead item an EventReplayed replays.
	ReplayOf int64
	// At is this process's clock when the event was published.
	At time.Time
}

func eventOf(f worker.Finished) Event {
	kind := EventKind(f.Outcome)
	var err error
	switch f.Outcome {
	case worker.OutcomeRetried, worker.OutcomeDead, worker.OutcomeWaiting, worker.OutcomeCancelled:
		err = f.Err
	}
	return Event{
		Kind: kind, WorkID: f.Item.WorkID, WorkType: f.Item.WorkType, QueueClass: f.Item.QueueClass,
		Attempt: f.Item.Attempt, Err: err, RetryIn: f.RetryIn,
	}
}

// Subscribe returns a channel of this Client's events of the given kinds
// (every kind when none is given) and a function that ends the
// subscription and closes the channel. Close ends every subscription.
//
// Publishing never blocks a worker: each subscription has a buffer of
// Config.SubscribeBuffer events, and an event that finds it full is dropped
// for that subscription and counted (DroppedEvents). Read promptly, or
// confirm outcomes from the database (Item).
func (c *Client) Subscribe(kinds ...EventKind) (<-chan Event, func()) {
	return c.events.subscribe(kinds)
}

// DroppedEvents counts events dropped because a subscription's buffer was
// full, over all subscriptions.
func (c *Client) DroppedEvents() uint64 { return c.events.dropped.Load() }

// broker fans events out to subscriptions without blocking the publisher.
type broker struct {
	buffer  int
	dropped atomic.Uint64

	mu     sync.RWMutex
	subs   map[*subscription]struct{}
	closed bool
}

type subscription struct {
	ch    chan Event
	kinds map[EventKind]bool // nil: all
}

func newBroker(buffer int) *broker {
	return &broker{buffer: buffer, subs: map[*subscription]struct{}{}}
}

func (b *broker) subscribe(kinds []EventKind) (<-chan Event, func()) {
	s := &subscription{ch: make(chan Event, b.buffer)}
	if len(kinds) > 0 {
		s.kinds = map[EventKind]bool{}
		for _, k := range kinds {
			s.kinds[k] = true
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	b.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			if _, ok := b.subs[s]; ok {
				delete(b.subs, s)
				close(s.ch)
			}
		})
	}
}

func (b *broker) publish(e Event) {
	e.At = time.Now()
	b.mu.RLock()
	defer b.mu.RUnlock()
	for s := range b.subs {
		if s.kinds != nil && !s.kinds[e.Kind] {
			continue
		}
		select {
		case s.ch <- e:
		default:
			b.dropped.Add(1)
		}
	}
}

func (b *broker) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	for s := range b.subs {
		close(s.ch)
		delete(b.subs, s)
	}
}
