package workqueue

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/laneq/laneq/internal/backoff"
)

// RetryPolicy turns the consecutive safe-retry count of an item into the delay
// before its next attempt: capped exponential backoff with bounded jitter.
//
// The count is durable (work_item.safe_retry_count), separate from the
// attempt count, and reset by durable forward progress (RecordProgress), so a
// restart neither forgets a failing item's backoff nor punishes an item that
// was making progress. With the defaults a dependency that stays down
// produces at most 10 attempts in its first 6 minutes (seed 003's bound).
//
// Zero fields take their defaults one by one, so RetryPolicy{MaxSafeRetries:
// 5} is the default backoff with a retry limit.
type RetryPolicy struct {
	// Initial is the delay after the first safe retry. Default 1s.
	Initial time.Duration
	// Max caps the delay, jitter included. Default 5m.
	Max time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself, so retries
	// of items that failed together do not stay synchronized. At most 0.5.
	// Zero takes the default 0.1; a negative value turns jitter off.
	Jitter float64
	// MaxSafeRetries moves an item to dead after this many consecutive safe
	// retries without progress (Fail). 0 means no limit besides the queue's
	// attempt budget (Config.MaxAttempts).
	MaxSafeRetries int32
}

// DefaultRetryPolicy holds the defaults of every RetryPolicy field.
var DefaultRetryPolicy = RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.1}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Initial == 0 {
		p.Initial = DefaultRetryPolicy.Initial
	}
	if p.Max == 0 {
		p.Max = max(DefaultRetryPolicy.Max, p.Initial)
	}
	switch {
	case p.Jitter == 0:
		p.Jitter = DefaultRetryPolicy.Jitter
	case p.Jitter < 0:
		p.Jitter = 0
	}
	return p
}

func (p RetryPolicy) validate() error {
	switch {
	case p.Initial <= 0:
		return invalidf("retry policy: Initial must be positive, got %s", p.Initial)
	case p.Max < p.Initial:
		return invalidf("retry policy: Max %s is below Initial %s", p.Max, p.Initial)
	case p.Jitter > 0.5:
		return invalidf("retry policy: Jitter must be at most 0.5, got %v", p.Jitter)
	case p.MaxSafeRetries < 0:
		return invalidf("retry policy: MaxSafeRetries must not be negative, got %d", p.MaxSafeRetries)
	}
	return nil
}

// Delay is the backoff after a failure of an item that had already made
// safeRetries consecutive safe retries. rnd in [0, 1) places the jitter; pass
// rand.Float64() (Queue does) or a fixed value for a deterministic delay.
// The jitter applies before the cap, so no delay exceeds Max.
func (p RetryPolicy) Delay(safeRetries int32, rnd float64) time.Duration {
	p = p.withDefaults()
	return backoff.Policy{Initial: p.Initial, Max: p.Max, Jitter: p.Jitter}.Delay(int(safeRetries)+1, rnd)
}

func (p RetryPolicy) jittered(safeRetries int32) time.Duration {
	return p.Delay(safeRetries, rand.Float64())
}

// writeBackoff paces re-runs of a write that failed transiently: 20ms
// doubling to at most 1s, with full jitter so processes that failed together
// do not retry together.
var writeBackoff = backoff.Policy{Initial: 20 * time.Millisecond, Max: time.Second, Jitter: 1}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
