package laneq

import (
	"fmt"
	"time"

	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/workqueue"
)

// PeriodicJob enqueues Args(tick) on a schedule (Config.Periodic): every
// tick once into Config.Scope, however many processes run the Client with
// the same job, with no leader (runtime/periodic: the tick's instant is
// part of its idempotency key, and which ticks are due is read from the
// database's clock).
type PeriodicJob struct {
	// Name identifies the job in the scope (printable ASCII without
	// spaces, at most 64 bytes).
	Name string
	// Cron is a cron expression (five fields, an optional leading seconds
	// field, or a descriptor such as @daily; "CRON_TZ=Zone " picks a time
	// zone), or Every a fixed interval of at least 1s: exactly one.
	Cron  string
	Every time.Duration
	// Location is Cron's time zone without CRON_TZ (UTC when nil).
	Location *time.Location
	// Missed: periodic.MissedRunOnce (the default) runs the latest tick
	// missed while every process was down once at start;
	// periodic.MissedSkip drops it.
	Missed periodic.Missed
	// Args builds the job's arguments for one tick. A tick whose Args are
	// nil, do not encode or panic (recovered) is logged and retried after a
	// backoff while it is due; it holds up only this job's later ticks.
	Args func(tick time.Time) Args
	// Opts shape each enqueue (a class, a lane, a delay, a unique key);
	// WithIdempotencyKey and WithScope are ignored: the tick decides the
	// key, and the job's scope is Config.Scope.
	Opts []EnqueueOption
}

// schedules turns Config.Periodic into the worker's schedules, checking
// each job's arguments for a sample tick so a bad job fails Start, not
// every tick. A tick whose Args fail (or panic) later is logged and
// retried by its schedule alone (runtime/periodic); the other jobs tick on.
func schedules(jobs []PeriodicJob) ([]periodic.Schedule, error) {
	var out []periodic.Schedule
	for _, j := range jobs {
		if j.Args == nil {
			return nil, fmt.Errorf("%w: periodic job %q has no Args", workqueue.ErrInvalid, j.Name)
		}
		s := periodic.Schedule{Name: j.Name, Cron: j.Cron, Every: j.Every, Location: j.Location, Missed: j.Missed,
			Event: func(tick time.Time) (workqueue.Event, error) {
				ev, err := NewEvent(j.Args(tick), j.Opts...)
				if err != nil {
					return ev, fmt.Errorf("its Args or Opts: %w", err)
				}
				return ev, nil
			}}
		if _, err := s.TickEvent(time.Unix(0, 0).UTC()); err != nil {
			return nil, fmt.Errorf("laneq: a periodic job fails for a sample tick (fix its Args or Opts): %w", err)
		}
		out = append(out, s)
	}
	return out, nil
}
