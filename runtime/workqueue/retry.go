package workqueue

import (
	"math/rand/v2"
	"time"
)

// RetryPolicy turns the consecutive safe-retry count of an item into the delay
// before its next attempt: capped exponential backoff with bounded jitter.
//
// The count is durable (work_item.safe_retry_count), separate from the
// attempt count, and reset by durable forward progress (RecordProgress), so a
// restart neither forgets a failing item's backoff nor punishes an item that
// was making progress. With the defaults a dependency that stays down
// produces at most 10 attempts in its first 6 minutes (seed 003's bound).
type RetryPolicy struct {
	// Initial is the delay after the first safe retry. Default 1s.
	Initial time.Duration
	// Max caps the delay. Default 5m.
	Max time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself, so retries
	// of items that failed together do not stay synchronized. 0..0.5,
	// default 0.1.
	Jitter float64
	// MaxSafeRetries moves an item to dead after this many consecutive safe
	// retries without progress (Fail). 0 means never.
	MaxSafeRetries int32
}

// DefaultRetryPolicy is used when Config.Retry is the zero value.
var DefaultRetryPolicy = RetryPolicy{Initial: time.Second, Max: 5 * time.Minute, Jitter: 0.1}

func (p RetryPolicy) validate() error {
	switch {
	case p.Initial <= 0:
		return invalidf("retry policy: Initial must be positive, got %s", p.Initial)
	case p.Max < p.Initial:
		return invalidf("retry policy: Max %s is below Initial %s", p.Max, p.Initial)
	case p.Jitter < 0 || p.Jitter > 0.5:
		return invalidf("retry policy: Jitter must be within [0, 0.5], got %v", p.Jitter)
	case p.MaxSafeRetries < 0:
		return invalidf("retry policy: MaxSafeRetries must not be negative, got %d", p.MaxSafeRetries)
	}
	return nil
}

// Delay is the backoff after a failure of an item that had already made
// safeRetries consecutive safe retries. rnd in [0, 1) places the jitter; pass
// rand.Float64() (Queue does) or a fixed value for a deterministic delay.
func (p RetryPolicy) Delay(safeRetries int32, rnd float64) time.Duration {
	d := p.Initial
	for i := int32(0); i < safeRetries && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + p.Jitter*(2*rnd-1)))
	}
	return d
}

func (p RetryPolicy) jittered(safeRetries int32) time.Duration {
	return p.Delay(safeRetries, rand.Float64())
}
