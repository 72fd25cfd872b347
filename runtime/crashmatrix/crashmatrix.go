// Package crashmatrix proves that a durable queue's worker recovers from a
// crash at each lifecycle boundary: it builds a worker on a concrete store,
// kills it when it reaches the boundary, builds a fresh worker on the very
// same store and lets the case assert durable recovery.
//
// The harness owns construction: it calls NewWorker itself, before the
// crash and again before recovery, with the same store value; it rejects a
// nil or non-pointer store, a nil worker, a worker instance handed out
// twice and a worker whose type changed; and it gives every callback a
// deadline and fails a case whose callback ignores it. So a case cannot
// pass by describing a store or a worker instead of building one.
package crashmatrix

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"
)

// Boundary is a point in an attempt's life where a worker can die.
type Boundary int

const (
	// AfterClaim: the claim committed; the handler has not started.
	AfterClaim Boundary = iota
	// MidExecution: the handler is running and has not finished its effect.
	MidExecution
	// AfterCompletionBeforeAck: the handler finished its effect; the
	// completion has not been made durable.
	AfterCompletionBeforeAck
)

// Boundaries lists every boundary, in lifecycle order.
var Boundaries = []Boundary{AfterClaim, MidExecution, AfterCompletionBeforeAck}

func (b Boundary) String() string {
	switch b {
	case AfterClaim:
		return "after-claim"
	case MidExecution:
		return "mid-execution"
	case AfterCompletionBeforeAck:
		return "after-completion-before-ack"
	}
	return fmt.Sprintf("boundary(%d)", int(b))
}

// Injector is handed to every worker the harness builds. The worker calls
// Reached at each boundary; at the armed boundary of a worker that is to
// crash, Reached never returns: the goroutine that reached it is the
// crashed process's, and a crashed process does nothing more. (Its other
// goroutines are cut off by Kill.) Recovery workers get an unarmed
// injector whose Reached always returns.
type Injector struct {
	armed   Boundary
	crash   bool
	once    sync.Once
	reached chan struct{}
}

func newInjector(b Boundary, crash bool) *Injector {
	return &Injector{armed: b, crash: crash, reached: make(chan struct{})}
}

// Reached marks boundary b.
func (in *Injector) Reached(b Boundary) {
	if in == nil || !in.crash || b != in.armed {
		return
	}
	first := false
	in.once.Do(func() { first = true; close(in.reached) })
	if first {
		select {} // the crash: this goroutine never proceeds
	}
}

// Case is one store and worker type under test. S and W must be pointer
// types.
type Case[S, W any] struct {
	// Store is the one concrete durable store every worker of the case uses.
	Store S
	// Seed puts one unit of work into the store.
	Seed func(ctx context.Context, store S) error
	// NewWorker builds a fresh worker on store; it must call inj.Reached at
	// each boundary.
	NewWorker func(ctx context.Context, store S, inj *Injector) (W, error)
	// Run runs the worker until ctx ends.
	Run func(ctx context.Context, w W) error
	// Kill cuts the worker off from the store at once, without any cleanup,
	// as a process crash would: nothing it does afterwards may become
	// durable.
	Kill func(w W)
	// Recovered waits (within ctx) until the store shows that the work
	// seeded before the crash at b finished correctly, and says why not.
	Recovered func(ctx context.Context, store S, b Boundary) error
	// Timeout bounds each step. Default 2 minutes.
	Timeout time.Duration
}

// ErrFixture reports a case that did not supply real instances.
var ErrFixture = errors.New("crashmatrix: invalid fixture")

// Run runs Check for every boundary as a subtest.
func Run[S, W any](t *testing.T, c Case[S, W]) {
	t.Helper()
	for _, b := range Boundaries {
		t.Run(b.String(), func(t *testing.T) {
			if err := Check(context.Background(), c, b); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Check seeds work, builds a worker, kills it at boundary b, builds a fresh
// worker on the same store and asserts recovery.
func Check[S, W any](ctx context.Context, c Case[S, W], b Boundary) error {
	if err := checkPointer("store", c.Store); err != nil {
		return err
	}
	if c.Seed == nil || c.NewWorker == nil || c.Run == nil || c.Kill == nil || c.Recovered == nil {
		return fmt.Errorf("%w: every callback is required", ErrFixture)
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	if err := bounded(ctx, timeout, "Seed", func(ctx context.Context) error { return c.Seed(ctx, c.Store) }); err != nil {
		return err
	}

	// The worker that crashes.
	inj := newInjector(b, true)
	first, err := build(ctx, c, timeout, inj)
	if err != nil {
		return err
	}
	runCtx, stopFirst := context.WithCancel(ctx)
	defer stopFirst()
	firstDone := make(chan error, 1)
	go func() { firstDone <- c.Run(runCtx, first) }()
	select {
	case <-inj.reached:
	case err := <-firstDone:
		return fmt.Errorf("crashmatrix: %s: the worker stopped before reaching the boundary: %v", b, err)
	case <-time.After(timeout):
		return fmt.Errorf("crashmatrix: %s: the worker did not reach the boundary within %s", b, timeout)
	}
	if err := bounded(ctx, timeout, "Kill", func(context.Context) error { c.Kill(first); return nil }); err != nil {
		return err
	}
	stopFirst() // the crashed worker's Run may never return; it is abandoned

	// A fresh worker on the same store.
	second, err := build(ctx, c, timeout, newInjector(b, false))
	if err != nil {
		return err
	}
	if any(second) == any(first) {
		return fmt.Errorf("%w: NewWorker returned the crashed worker instance again", ErrFixture)
	}
	if reflect.TypeOf(second) != reflect.TypeOf(first) {
		return fmt.Errorf("%w: NewWorker returned %T after %T", ErrFixture, second, first)
	}
	recCtx, stopSecond := context.WithCancel(ctx)
	secondDone := make(chan error, 1)
	go func() { secondDone <- c.Run(recCtx, second) }()
	err = bounded(ctx, timeout, "Recovered", func(ctx context.Context) error { return c.Recovered(ctx, c.Store, b) })
	stopSecond()
	select {
	case runErr := <-secondDone:
		if err == nil && runErr != nil && !errors.Is(runErr, context.Canceled) {
			err = fmt.Errorf("crashmatrix: %s: recovery worker: %w", b, runErr)
		}
	case <-time.After(timeout):
		return fmt.Errorf("crashmatrix: %s: the recovery worker did not stop within %s", b, timeout)
	}
	if err != nil {
		return fmt.Errorf("crashmatrix: %s: %w", b, err)
	}
	return nil
}

func build[S, W any](ctx context.Context, c Case[S, W], timeout time.Duration, inj *Injector) (W, error) {
	var w W
	err := bounded(ctx, timeout, "NewWorker", func(ctx context.Context) error {
		var err error
		w, err = c.NewWorker(ctx, c.Store, inj)
		return err
	})
	if err != nil {
		return w, err
	}
	return w, checkPointer("worker", w)
}

func checkPointer(what string, v any) error {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Kind() != reflect.Pointer {
		return fmt.Errorf("%w: the %s must be a non-nil pointer, got %T", ErrFixture, what, v)
	}
	if rv.IsNil() {
		return fmt.Errorf("%w: the %s is a nil %T", ErrFixture, what, v)
	}
	return nil
}

// bounded runs fn with a deadline and fails when fn does not return within
// it (a callback that ignores its context).
func bounded(ctx context.Context, timeout time.Duration, name string, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- fn(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("crashmatrix: %s: %w", name, err)
		}
		return nil
	case <-ctx.Done():
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("crashmatrix: %s: %w", name, err)
			}
			return nil
		case <-time.After(timeout / 10):
			return fmt.Errorf("crashmatrix: %s ignored its %s deadline", name, timeout)
		}
	}
}
