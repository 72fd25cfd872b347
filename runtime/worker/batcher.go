package worker

import (
	"context"
	"sync"

	"github.com/laneq/laneq/runtime/workqueue"
)

// leaseBatcher group-commits one kind of lease-fenced write (completions of
// items in no lane, or lease renewals): while writers writes are in flight,
// the writes that arrive queue up, and the next batch takes them all (up to
// max) in one statement. No timer: a write is sent at once while fewer
// than writers are in flight, so batching adds at most one write's latency
// and only under load. Each caller returns only after its own item's write
// committed (or failed), with its own error.
type leaseBatcher struct {
	write   func(context.Context, []workqueue.Lease) []error // Queue.CompleteMany or Queue.RenewMany
	max     int
	writers int // writes in flight at most

	mu      sync.Mutex
	pending []batchEntry // non-empty only while writers writes are in flight
	writing int
}

type batchEntry struct {
	lease workqueue.Lease
	done  chan batchResult // one message: the result, or the lead
}

type batchResult struct {
	err   error
	batch []batchEntry // with the lead: the batch to write, the receiver's own entry first
}

func newLeaseBatcher(write func(context.Context, []workqueue.Lease) []error, most, writers int) *leaseBatcher {
	return &leaseBatcher{write: write, max: most, writers: max(writers, 1)}
}

// do writes l, alone or in a batch with other executors' items.
func (c *leaseBatcher) do(ctx context.Context, l workqueue.Lease) error {
	own := batchEntry{lease: l, done: make(chan batchResult, 1)}
	c.mu.Lock()
	c.pending = append(c.pending, own)
	if c.writing == c.writers {
		c.mu.Unlock()
		r := <-own.done
		if r.batch == nil {
			return r.err
		}
		return c.lead(ctx, own, r.batch)
	}
	c.writing++
	batch := c.next() // pending held nothing before own: fewer writes were in flight
	c.mu.Unlock()
	return c.lead(ctx, own, batch)
}

// next takes the oldest pending entries, at most max; c.mu is held.
func (c *leaseBatcher) next() []batchEntry {
	n := min(len(c.pending), c.max)
	batch := c.pending[:n:n]
	c.pending = c.pending[n:]
	return batch
}

// lead writes batch (own among it), answers every other caller in it, and
// hands the next batch of pending entries, if any, to its first caller,
// who writes it.
func (c *leaseBatcher) lead(ctx context.Context, own batchEntry, batch []batchEntry) error {
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
		next := c.next()
		next[0].done <- batchResult{batch: next}
	} else {
		c.writing--
	}
	c.mu.Unlock()
	return ownErr
}
