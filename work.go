package laneq

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Args is the typed input of one kind of work: Kind names its work type
// (1..64 printable ASCII characters without spaces, stable across
// releases: stored rows carry it), and the value is stored as its JSON
// encoding. Use a value type (a struct), as AddWorker calls Kind on T's
// zero value.
type Args interface {
	Kind() string
}

// Job is one claimed item of kind T, its decoded Args, and the worker's
// job underneath (Item: work id, attempt, lease; Event: the stored event;
// Input for a projection generation; RecordProgress).
type Job[T Args] struct {
	*worker.Job
	Args T
}

// AddWorker registers handle for T's kind. The handler's result decides
// the item: nil completes it, worker.ErrSkip skips it, an error wrapping
// workqueue.ErrPermanent sends it to dead, worker.WaitForDependency parks
// it, and any other error (and a panic) retries it with the queue's
// backoff. Args that do not decode as T are dead at once, failure class
// "undecodable_args" (see DecodeError): no retry can fix them. Register
// before Start.
func AddWorker[T Args](c *Client, handle func(ctx context.Context, job *Job[T]) error) error {
	kind, err := kindOf[T]()
	if err != nil {
		return err
	}
	return c.addHandler(kind, func(ctx context.Context, job *worker.Job) error {
		var args T
		if err := json.Unmarshal(job.Event.Payload, &args); err != nil {
			return &DecodeError{Kind: kind, Err: err}
		}
		return handle(ctx, &Job[T]{Job: job, Args: args})
	})
}

// AddWorkerRaw registers a handler of raw payloads for kind, for work
// enqueued with bytes of your own encoding (workqueue.Event.Payload).
func AddWorkerRaw(c *Client, kind string, handle worker.Handler) error {
	if err := workqueue.ValidWorkType(kind); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidKind, kind, err)
	}
	if handle == nil {
		return &ConfigError{Setting: "handler of " + kind, Reason: "nil"}
	}
	return c.addHandler(kind, handle)
}

func (c *Client) addHandler(kind string, h worker.Handler) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch c.state {
	case stateRunning:
		return fmt.Errorf("%w: register %q before Start", ErrStarted, kind)
	case stateStopped:
		return ErrStopped
	}
	if _, dup := c.handlers[kind]; dup {
		return fmt.Errorf("%w: %q", ErrDuplicateKind, kind)
	}
	c.handlers[kind] = h
	return nil
}

// kindOf returns T's kind, checked. A Kind method that panics on the zero
// value (a pointer receiver's nil) is reported, not propagated.
func kindOf[T Args]() (kind string, err error) {
	var zero T
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %T.Kind panicked on the zero value (use a value type): %v", ErrInvalidKind, zero, r)
		}
	}()
	kind = zero.Kind()
	if err := workqueue.ValidWorkType(kind); err != nil {
		return "", fmt.Errorf("%w %q of %T: %w", ErrInvalidKind, kind, zero, err)
	}
	return kind, nil
}

// DecodeError is the outcome of an item whose stored args do not decode
// as its kind's type (a kind reused for another type, bytes enqueued by
// hand). It is permanent: the item goes to dead with failure class
// "undecodable_args", and a replay after a fix runs it again.
type DecodeError struct {
	Kind string
	Err  error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("laneq: args of kind %q do not decode: %v", e.Kind, e.Err)
}

// Unwrap makes a DecodeError match workqueue.ErrPermanent and its cause.
func (e *DecodeError) Unwrap() []error { return []error{workqueue.ErrPermanent, e.Err} }

// FailureClass names the failure on the item row.
func (e *DecodeError) FailureClass() string { return "undecodable_args" }
