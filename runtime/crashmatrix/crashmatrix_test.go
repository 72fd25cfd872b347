package crashmatrix_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/crashmatrix"
)

// memStore is a tiny leased queue holding one item, enough to exercise the
// harness without a database.
type memStore struct {
	mu         sync.Mutex
	seeded     bool
	done       bool
	owner      *memWorker
	leaseUntil time.Time
	executions int
}

type memWorker struct {
	store  *memStore
	inj    *crashmatrix.Injector
	killed atomic.Bool
}

const lease = 20 * time.Millisecond

func (s *memStore) claim(w *memWorker) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w.killed.Load() || !s.seeded || s.done || (s.owner != nil && time.Now().Before(s.leaseUntil)) {
		return false
	}
	s.owner, s.leaseUntil = w, time.Now().Add(lease)
	return true
}

func (s *memStore) execute(w *memWorker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.killed.Load() {
		s.executions++
	}
}

func (s *memStore) ack(w *memWorker) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.killed.Load() && s.owner == w {
		s.done = true
	}
}

func (w *memWorker) run(ctx context.Context) error {
	for ctx.Err() == nil {
		if !w.store.claim(w) {
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Millisecond): // a test fake may poll
			}
			continue
		}
		w.inj.Reached(crashmatrix.AfterClaim)
		w.inj.Reached(crashmatrix.MidExecution)
		w.store.execute(w)
		w.inj.Reached(crashmatrix.AfterCompletionBeforeAck)
		w.store.ack(w)
	}
	return nil
}

func memCase(store *memStore) crashmatrix.Case[*memStore, *memWorker] {
	return crashmatrix.Case[*memStore, *memWorker]{
		Store: store,
		Seed: func(_ context.Context, s *memStore) error {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.seeded, s.done, s.owner, s.executions = true, false, nil, 0
			return nil
		},
		NewWorker: func(_ context.Context, s *memStore, inj *crashmatrix.Injector) (*memWorker, error) {
			return &memWorker{store: s, inj: inj}, nil
		},
		Run:  func(ctx context.Context, w *memWorker) error { return w.run(ctx) },
		Kill: func(w *memWorker) { w.killed.Store(true) },
		Recovered: func(ctx context.Context, s *memStore, b crashmatrix.Boundary) error {
			want := 1
			if b == crashmatrix.AfterCompletionBeforeAck {
				want = 2 // at-least-once: the unacknowledged effect runs again
			}
			for ctx.Err() == nil {
				s.mu.Lock()
				done, n := s.done, s.executions
				s.mu.Unlock()
				if done {
					if n != want {
						return fmt.Errorf("executed %d times, want %d", n, want)
					}
					return nil
				}
				time.Sleep(time.Millisecond)
			}
			return ctx.Err()
		},
		Timeout: 5 * time.Second,
	}
}

func TestMemoryStoreRecoversAtEveryBoundary(t *testing.T) {
	crashmatrix.Run(t, memCase(&memStore{}))
}

func TestRejectsFalseFixtures(t *testing.T) {
	ctx := context.Background()
	check := func(name string, err error, want string) {
		t.Helper()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", name, err, want)
		}
	}
	c := memCase(nil)
	check("nil store", crashmatrix.Check(ctx, c, crashmatrix.AfterClaim), "nil")

	valueCase := crashmatrix.Case[string, *memWorker]{Store: "a store described, not built"}
	check("non-pointer store", crashmatrix.Check(ctx, valueCase, crashmatrix.AfterClaim), "non-nil pointer")

	reused := memCase(&memStore{})
	var only *memWorker
	reused.NewWorker = func(_ context.Context, s *memStore, inj *crashmatrix.Injector) (*memWorker, error) {
		if only == nil {
			only = &memWorker{store: s, inj: inj}
		}
		return only, nil
	}
	err := crashmatrix.Check(ctx, reused, crashmatrix.AfterClaim)
	check("reused worker", err, "crashed worker instance")
	if !errors.Is(err, crashmatrix.ErrFixture) {
		t.Errorf("reused worker: %v is not ErrFixture", err)
	}

	// W = any lets a case change the worker's type between builds.
	base := memCase(&memStore{})
	builds := 0
	changing := crashmatrix.Case[*memStore, any]{
		Store: base.Store, Seed: base.Seed, Timeout: time.Second,
		NewWorker: func(ctx context.Context, s *memStore, inj *crashmatrix.Injector) (any, error) {
			builds++
			if builds == 2 {
				return &struct{ memWorker }{}, nil
			}
			return &memWorker{store: s, inj: inj}, nil
		},
		Run: func(ctx context.Context, w any) error {
			if mw, ok := w.(*memWorker); ok {
				return mw.run(ctx)
			}
			<-ctx.Done()
			return nil
		},
		Kill:      func(w any) { w.(*memWorker).killed.Store(true) },
		Recovered: func(context.Context, *memStore, crashmatrix.Boundary) error { return nil },
	}
	check("type change", crashmatrix.Check(ctx, changing, crashmatrix.AfterClaim), "returned")

	nilWorker := memCase(&memStore{})
	nilWorker.NewWorker = func(context.Context, *memStore, *crashmatrix.Injector) (*memWorker, error) { return nil, nil }
	check("nil worker", crashmatrix.Check(ctx, nilWorker, crashmatrix.AfterClaim), "nil")

	deaf := memCase(&memStore{})
	deaf.Timeout = 200 * time.Millisecond
	deaf.Recovered = func(context.Context, *memStore, crashmatrix.Boundary) error {
		time.Sleep(time.Second) // ignores its context
		return nil
	}
	check("deadline ignored", crashmatrix.Check(ctx, deaf, crashmatrix.AfterClaim), "ignored its")

	lazy := memCase(&memStore{})
	lazy.Timeout = 200 * time.Millisecond
	lazy.NewWorker = func(_ context.Context, s *memStore, _ *crashmatrix.Injector) (*memWorker, error) {
		return &memWorker{store: s}, nil // never reports a boundary
	}
	check("boundary never reached", crashmatrix.Check(ctx, lazy, crashmatrix.MidExecution), "did not reach the boundary")

	wrong := memCase(&memStore{})
	wrong.Recovered = func(context.Context, *memStore, crashmatrix.Boundary) error { return errors.New("item lost") }
	check("failed recovery", crashmatrix.Check(ctx, wrong, crashmatrix.AfterClaim), "item lost")
}
