// Package backoff is laneq's one backoff curve: a delay that starts at
// Initial, doubles with each consecutive failure up to Max, and is spread by
// bounded jitter so that parties that failed together do not retry
// together. Every retry in laneq paces itself with it: an item's safe
// retries (workqueue.RetryPolicy), re-runs of a write that failed
// transiently (workqueue), receipt retries and the receipt router's pauses
// after a failed turn (runtime/ingress), controller restarts
// (runtime/worker) and retries of failed maintenance (runtime/controller).
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy is one backoff curve.
type Policy struct {
	// Initial is the delay after the first failure.
	Initial time.Duration
	// Max caps every delay, jitter included.
	Max time.Duration
	// Jitter spreads each delay uniformly over ±Jitter of itself (0..1):
	// 0 is none, 1 anything from nothing to twice the delay.
	Jitter float64
}

// Delay is the wait after failures consecutive failures (1 or more; fewer
// count as 1): Initial doubled failures-1 times, spread by the jitter that
// rnd in [0, 1) places, capped at Max, at least a nanosecond. A fixed rnd
// makes it deterministic (0.5 is the unjittered delay).
func (p Policy) Delay(failures int, rnd float64) time.Duration {
	d := p.Initial
	for i := 1; i < failures && d < p.Max; i++ {
		d *= 2
	}
	if p.Jitter > 0 {
		d = time.Duration(float64(d) * (1 + p.Jitter*(2*rnd-1)))
	}
	return max(min(d, p.Max), time.Nanosecond)
}

// Next is Delay with random jitter.
func (p Policy) Next(failures int) time.Duration {
	return p.Delay(failures, rand.Float64())
}
