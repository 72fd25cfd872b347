package controller

import (
	"context"
	"time"

	"github.com/laneq/laneq/internal/backoff"
)

// Restart paces RunRestarting: the wait after the n-th consecutive failed
// run doubles from Min up to Max. A run that lasted longer than Max was
// healthy, and the count starts again.
type Restart struct {
	Min, Max time.Duration
	// Jitter spreads each wait by up to ± this fraction (0: none).
	Jitter float64
	// Restarted, when set, hears each restart: the error that ended the
	// run and the wait before the next one.
	Restarted func(err error, after time.Duration)
}

// RunRestarting runs the controller until ctx ends (it returns nil) or a
// run leaves it unusable (it returns that run's error). After an error
// that left it usable (a failed read, an operation proven not to have
// committed, or one that only leased), it waits on the controller's clock
// and runs again; start-up then reconciles before claiming, as on the
// first run.
func (c *Controller) RunRestarting(ctx context.Context, r Restart) error {
	policy := backoff.Policy{Initial: r.Min, Max: r.Max, Jitter: r.Jitter}
	clk := c.cfg.Clock
	timer := clk.NewTimer()
	defer timer.Stop()
	failures := 0
	for {
		started := clk.Now()
		err := c.Run(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if !c.Usable() {
			return err
		}
		if clk.Now().Sub(started) > r.Max {
			failures = 0 // it ran healthily for a while
		}
		failures++
		wait := policy.Next(failures)
		if r.Restarted != nil {
			r.Restarted(err, wait)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		}
	}
}
