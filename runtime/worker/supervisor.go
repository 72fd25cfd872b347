package worker

import (
	"context"
	"errors"
	"sync"

	"github.com/laneq/laneq/runtime/workqueue"
)

// Supervisor keeps one Worker for one scope running in this process and
// applies configuration to it. It rebuilds the worker (a new controller,
// scheduler and executors) only when the running one stopped or the
// configuration's fingerprint changed. Queue contents never rebuild it:
// blocked or delayed rows are the controller's business, and Apply with an
// unchanged configuration only wakes the running worker.
type Supervisor struct {
	base     context.Context
	q        *workqueue.Queue
	handlers map[string]Handler

	op     sync.Mutex // serializes Apply and Stop end to end
	mu     sync.Mutex // guards the fields below
	cur    *Worker
	fp     string
	cancel context.CancelFunc
	done   chan struct{}
	err    error // the last worker's Run result
	builds int
}

// NewSupervisor returns a Supervisor whose workers run until base ends.
func NewSupervisor(base context.Context, q *workqueue.Queue, handlers map[string]Handler) *Supervisor {
	return &Supervisor{base: base, q: q, handlers: handlers}
}

// Apply makes cfg the running configuration; rebuilt says whether a new
// worker was started.
func (s *Supervisor) Apply(cfg Config) (rebuilt bool, err error) {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	fp := cfg.Fingerprint(sortedKeys(s.handlers))
	if s.cur != nil && s.cur.Running() && fp == s.fp {
		s.cur.Wake()
		return false, nil
	}
	s.stopLocked()
	w, err := New(s.q, cfg, s.handlers)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithCancel(s.base)
	done := make(chan struct{})
	s.cur, s.fp, s.cancel, s.done = w, fp, cancel, done
	s.builds++
	w.running.Store(true) // running from now on, not from when the goroutine starts
	go func() {
		defer close(done)
		err := w.Run(ctx)
		s.mu.Lock()
		s.err = err
		s.mu.Unlock()
	}()
	return true, nil
}

// Current returns the running worker, if any.
func (s *Supervisor) Current() *Worker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Builds counts the workers built so far.
func (s *Supervisor) Builds() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.builds
}

// Stop stops the running worker and returns the error its Run returned.
func (s *Supervisor) Stop() error {
	s.op.Lock()
	defer s.op.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked()
	return s.err
}

// stopLocked stops the current worker; the caller holds op (so no other
// Apply or Stop interleaves) and mu (released while waiting, so the
// worker's goroutine can record its result).
func (s *Supervisor) stopLocked() {
	if s.cur == nil {
		return
	}
	s.cancel()
	done := s.done
	s.mu.Unlock()
	<-done
	s.mu.Lock()
	s.cur = nil
}

// Err returns the last stopped worker's Run error (nil while running or
// after a clean stop).
func (s *Supervisor) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil && s.cur.Running() {
		return nil
	}
	return errors.Join(s.err)
}
