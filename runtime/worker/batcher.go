package worker

import (
	"context"
	"sync"

	"github.com/laneq/laneq/runtime/workqueue"
)

// leaseBatcher group-commits one kind of lease-fenced write (completions of
// items in no lane, or lease renewals): while one executor writes a batch,
// the writes that arrive queue up, and the next batch takes them all (up to
// max) in one statement. No timer: a lone write is sent at once, so
// batching adds at most one write's latency and only under load. Each
// caller returns only after its own item's write committed (or failed),
// with its own error.
type leaseBatcher struct {
	write func(context.Context, []workqueue.Lease) []error // Queue.CompleteMany or Queue.RenewMany
	max   int

	mu      sync.Mutex
	pending []batchEntry
	writing bool // a leader is writing; pending waits for it
}

type batchEntry struct {
	lease workqueue.Lease
	done  chan batchResult // one message: the result, or lead
}

type batchResult struct {
	err  error
	lead bool // write the next batch: the caller's own item is in it
}

func newLeaseBatcher(write func(context.Context, []workqueue.Lease) []error, max int) *leaseBatcher {
	return &leaseBatcher{write: write, max: max}
}

// do writes l, alone or in a batch with other executors' items.
func (c *leaseBatcher) do(ctx context.Context, l workqueue.Lease) error {
	own := batchEntry{lease: l, done: make(chan batchResult, 1)}
	c.mu.Lock()
	c.pending = append(c.pending, own)
	if c.writing {
		c.mu.Unlock()
		if r := <-own.done; !r.lead {
			return r.err
		}
	} else {
		c.writing = true
		c.mu.Unlock()
	}
	return c.lead(ctx, own)
}

// lead writes the oldest pending completions (own among them: a leader is
// the first pending entry), answers every other caller in the batch, and
// hands the lead to the next pending caller, if any.
func (c *leaseBatcher) lead(ctx context.Context, own batchEntry) error {
	c.mu.Lock()
	n := min(len(c.pending), c.max)
	batch := c.pending[:n:n]
	c.pending = c.pending[n:]
	c.mu.Unlock()

	leases := make([]workqueue.Lease, len(batch))
	for i, b := range batch {
		leases[i] = b.lease
	}
	errs := c.write(ctx, leases)
	var ownErr error
	for i, b := range batch {
		if b.done == own.done {
			ownErr = errs[i]
			continue
		}
		b.done <- batchResult{err: errs[i]}
	}

	c.mu.Lock()
	if len(c.pending) > 0 {
		c.pending[0].done <- batchResult{lead: true}
	} else {
		c.writing = false
	}
	c.mu.Unlock()
	return ownErr
}
