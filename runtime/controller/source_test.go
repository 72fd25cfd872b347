package controller_test

import (
	"context"
	"sync"
	"time"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/controller"
)

// countingSource is an in-memory Source that counts every call and lets a
// test script each call's result.
type countingSource struct {
	clock *clock.Fake

	mu       sync.Mutex
	calls    []string // call log, in order
	counts   map[string]int
	gen      uint64
	capacity int
	// Scripted results; nil functions mean "nothing to do".
	claim      func(n int, turn controller.Turn) (controller.ClaimBatch, error)
	reconcile  func(n int) error
	nextWorkAt func(n int) (time.Time, bool, error)
	// onClaim runs inside Claim before its result (n is the claim's number).
	onClaim func(ctx context.Context, n int)
	// afterGeneration runs after Generation read its value (n is the
	// read's number): a change it makes lands between two reads.
	afterGeneration func(n int)
}

func newCountingSource(c *clock.Fake) *countingSource {
	return &countingSource{clock: c, counts: map[string]int{}, capacity: 16}
}

func (s *countingSource) record(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, name)
	s.counts[name]++
	return s.counts[name]
}

func (s *countingSource) Count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[name]
}

func (s *countingSource) Counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.counts {
		out[k] = v
	}
	return out
}

func (s *countingSource) Calls() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

func (s *countingSource) SetGeneration(g uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen = g
}

func (s *countingSource) SetCapacity(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.capacity = n
}

func (s *countingSource) Ready(context.Context) error { s.record("ready"); return nil }

func (s *countingSource) Reconcile(context.Context) error {
	n := s.record("reconcile")
	if s.reconcile != nil {
		return s.reconcile(n)
	}
	return nil
}

func (s *countingSource) Claim(ctx context.Context, turn controller.Turn) (controller.ClaimBatch, error) {
	n := s.record("claim")
	if s.onClaim != nil {
		s.onClaim(ctx, n)
	}
	if s.claim != nil {
		return s.claim(n, turn)
	}
	return controller.ClaimBatch{}, nil
}

func (s *countingSource) NextWorkAt(context.Context) (time.Time, bool, error) {
	n := s.record("next_work_at")
	if s.nextWorkAt != nil {
		return s.nextWorkAt(n)
	}
	return time.Time{}, false, nil
}

func (s *countingSource) Generation(context.Context) (uint64, error) {
	n := s.record("generation")
	s.mu.Lock()
	g, after := s.gen, s.afterGeneration
	s.mu.Unlock()
	if after != nil {
		after(n)
	}
	return g, nil
}

func (s *countingSource) Capacity(bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capacity
}
