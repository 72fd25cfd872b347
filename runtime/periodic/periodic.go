// Package periodic enqueues work on a schedule (cron expressions or fixed
// intervals) from every process that runs it, with no leader: each tick
// of a schedule is one event whose idempotency key names the schedule and
// the tick's instant, so however many processes enqueue it, the schedule's
// ticks are stored once each (the event table's unique key refuses the
// rest) and each becomes one work item.
//
// Which ticks are due is decided by the database's clock
// (workqueue.Queue.DatabaseNow), never a host's: a process whose clock is
// off by seconds wakes at the wrong moment, reads the database's time,
// and neither enqueues a tick before it is due nor counts one as missed.
// Between ticks a Runner waits on a timer; it sends no statement.
//
// A schedule's failures stay in it: each schedule's due ticks are
// enqueued apart from the others' (in batches of the Queue's
// MaxEnqueueBatch), so a tick whose event cannot be built (Event fails or
// panics, or names no work) or is refused (an invalid event) holds up only
// its own schedule. It is logged and retried with a backoff while the
// other schedules tick on. A panic in Event or Config.OnTick is recovered
// and logged: it never ends the process.
//
// Cron expressions are parsed by github.com/robfig/cron/v3 (standard five
// fields, an optional leading seconds field, descriptors such as @daily,
// and a CRON_TZ=Zone prefix for a time zone): the parser most Go schedulers
// use, stable since 2019, with no dependencies of its own, and with time
// zone and daylight-saving handling (a tick skipped or repeated by a
// clock change follows its rules).
package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/laneq/laneq/internal/backoff"
	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Missed says what a schedule does with ticks that fell due while no
// process ran it (every process was down, or frozen), older than
// Config.OnTimeWithin when a process first looks at them.
type Missed int

const (
	// MissedRunOnce enqueues the latest missed tick, once, however many
	// were missed (the default): a daily report missed for three days runs
	// once when a process starts.
	MissedRunOnce Missed = iota
	// MissedSkip enqueues none of them: the schedule resumes with its next
	// tick.
	MissedSkip
)

// Schedule is one periodic job of a scope.
type Schedule struct {
	// Name identifies the schedule in its scope (printable ASCII without
	// spaces, at most 64 bytes). It is part of every tick's idempotency
	// key: renaming a schedule starts its ticks afresh.
	Name string
	// Cron is a cron expression (minute hour day-of-month month
	// day-of-week, an optional leading seconds field, or a descriptor such
	// as @hourly), evaluated in Location unless it starts with
	// "CRON_TZ=Zone ". Exactly one of Cron and Every is set.
	Cron string
	// Every is a fixed interval of at least a second: ticks fall on the
	// multiples of Every since the Unix epoch (a minute's ticks on the
	// minute).
	Every time.Duration
	// Location is the time zone of Cron (UTC when nil).
	Location *time.Location
	// Missed is the policy for ticks that fell due while no process ran
	// the schedule.
	Missed Missed
	// Event builds the event of one tick (its instant, in Location). Its
	// IdempotencyKey is set by the Runner ("periodic/<name>/<tick>");
	// empty fields default to RouteID "periodic", RouteVersion 1,
	// EventKind "tick", SourceKind "periodic", SourceID the name and a
	// JSON payload {"schedule": name, "tick": RFC 3339}. Work must name
	// at least one work item. An error (or a panic) leaves the tick due:
	// the Runner logs it and tries again after a backoff (see TickEvent).
	Event func(tick time.Time) (workqueue.Event, error)

	spec cron.Schedule
}

// parser reads standard cron expressions, with an optional seconds field
// and descriptors.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// compile checks s and parses its expression.
func (s *Schedule) compile() error {
	if n := len(s.Name); n < 1 || n > 64 {
		return fmt.Errorf("%w: schedule name must be 1..64 bytes, got %d", workqueue.ErrInvalid, n)
	}
	for k := 0; k < len(s.Name); k++ {
		if s.Name[k] < 0x21 || s.Name[k] > 0x7e {
			return fmt.Errorf("%w: schedule name %q must be printable ASCII without spaces", workqueue.ErrInvalid, s.Name)
		}
	}
	if s.Event == nil {
		return fmt.Errorf("%w: schedule %q has no Event", workqueue.ErrInvalid, s.Name)
	}
	switch {
	case (s.Cron == "") == (s.Every == 0):
		return fmt.Errorf("%w: schedule %q needs exactly one of Cron and Every", workqueue.ErrInvalid, s.Name)
	case s.Every != 0 && (s.Every < time.Second || s.Every%time.Microsecond != 0):
		return fmt.Errorf("%w: schedule %q: Every must be at least 1s, in whole microseconds, got %s", workqueue.ErrInvalid, s.Name, s.Every)
	case s.Cron != "":
		if strings.HasPrefix(strings.TrimSpace(s.Cron), "@every") {
			return fmt.Errorf("%w: schedule %q: use Every instead of @every (its ticks would depend on when each process started)", workqueue.ErrInvalid, s.Name)
		}
		spec, err := parser.Parse(s.Cron)
		if err != nil {
			return fmt.Errorf("%w: schedule %q: cron expression %q: %v", workqueue.ErrInvalid, s.Name, s.Cron, err)
		}
		if spec.Next(time.Now()).IsZero() {
			// robfig/cron gives up after five years without a match.
			return fmt.Errorf("%w: schedule %q: cron expression %q never fires", workqueue.ErrInvalid, s.Name, s.Cron)
		}
		s.spec = spec
	}
	if s.Location == nil {
		s.Location = time.UTC
	}
	if s.Missed != MissedRunOnce && s.Missed != MissedSkip {
		return fmt.Errorf("%w: schedule %q: unknown Missed policy %d", workqueue.ErrInvalid, s.Name, s.Missed)
	}
	return nil
}

// next is the schedule's first tick after t.
func (s *Schedule) next(t time.Time) time.Time {
	if s.Every > 0 {
		return s.latest(t).Add(s.Every)
	}
	return s.spec.Next(t.In(s.Location))
}

// latest is the schedule's last tick at or before t (zero when there is
// none in the 5 years before t): for a cron expression, found by looking
// in windows of doubling width back from t.
func (s *Schedule) latest(t time.Time) time.Time {
	if s.Every > 0 {
		e := s.Every.Microseconds()
		us := t.UnixMicro()
		return time.UnixMicro(us - ((us%e)+e)%e).In(s.Location)
	}
	for window := time.Minute; window <= 5*366*24*time.Hour; window *= 2 {
		tick := s.next(t.Add(-window))
		if tick.After(t) {
			continue
		}
		for n := s.next(tick); !n.After(t); n = s.next(n) {
			tick = n
		}
		return tick
	}
	return time.Time{}
}

// key is a tick's idempotency key: the schedule and the tick's instant in
// UTC to the microsecond.
func (s *Schedule) key(tick time.Time) string {
	return "periodic/" + s.Name + "/" + stamp(tick)
}

// TickEvent is the event a Runner enqueues for tick: Event's, with the
// tick's idempotency key and the empty fields defaulted. It fails when
// Event fails, when it panics (recovered: the error holds the panic
// value; the Runner logs it with its stack), or when the event names no work
// (workqueue.ErrInvalid). A caller can check a schedule with a sample
// tick before running it (the laneq Client does at Start).
func (s *Schedule) TickEvent(tick time.Time) (ev workqueue.Event, err error) {
	defer func() {
		if v := recover(); v != nil {
			ev, err = workqueue.Event{}, &panicError{what: fmt.Sprintf("schedule %q: Event for tick %s", s.Name, stamp(tick)), value: v, stack: debug.Stack()}
		}
	}()
	ev, err = s.Event(tick)
	if err != nil {
		return workqueue.Event{}, fmt.Errorf("periodic: schedule %q: the event of tick %s: %w", s.Name, stamp(tick), err)
	}
	if len(ev.Work) == 0 {
		return workqueue.Event{}, fmt.Errorf("%w: periodic: schedule %q: the event of tick %s names no work: Event must return at least one work item",
			workqueue.ErrInvalid, s.Name, stamp(tick))
	}
	ev.IdempotencyKey = s.key(tick)
	if ev.RouteID == "" {
		ev.RouteID = "periodic"
	}
	if ev.RouteVersion == 0 {
		ev.RouteVersion = 1
	}
	if ev.EventKind == "" {
		ev.EventKind = "tick"
	}
	if ev.SourceKind == "" {
		ev.SourceKind = "periodic"
	}
	if ev.SourceID == "" {
		ev.SourceID = s.Name
	}
	if ev.Payload == nil {
		ev.Payload, _ = json.Marshal(map[string]string{"schedule": s.Name, "tick": tick.Format(time.RFC3339Nano)}) // strings always marshal
	}
	return ev, nil
}

// stamp is a tick's instant as its idempotency key spells it.
func stamp(tick time.Time) string { return tick.UTC().Format("2006-01-02T15:04:05.000000Z") }

// panicError is a recovered panic of a user callback (Schedule.Event).
type panicError struct {
	what  string
	value any
	stack []byte
}

func (e *panicError) Error() string {
	return fmt.Sprintf("periodic: %s panicked: %v (fix the callback)", e.what, e.value)
}

// due lists the ticks of s due at now, in order: those after seen (every
// tick at or before it is enqueued; zero on the first pass, when only the
// latest tick is due). Ticks at or before now-onTimeWithin were missed:
// MissedRunOnce keeps the latest of them, unless a later tick is due and
// on time (it runs, and stands for the missed ones).
func (s *Schedule) due(seen, now time.Time, onTimeWithin time.Duration) []time.Time {
	onTimeFrom := now.Add(-onTimeWithin)
	from := seen
	if from.IsZero() {
		from = s.latest(now).Add(-time.Microsecond)
	}
	var ticks []time.Time
	if from.Before(onTimeFrom) {
		if last := s.latest(onTimeFrom); !last.IsZero() && last.After(from) && s.Missed == MissedRunOnce && s.next(last).After(now) {
			ticks = append(ticks, last)
		}
		from = onTimeFrom
	}
	for t := s.next(from); !t.After(now); t = s.next(t) {
		ticks = append(ticks, t)
	}
	return ticks
}

// DefaultOnTimeWithin is Config.OnTimeWithin's default.
const DefaultOnTimeWithin = time.Minute

// Config configures a Runner.
type Config struct {
	// Scope is the scope every schedule enqueues into (required).
	Scope     string
	Schedules []Schedule
	// OnTimeWithin is how late a tick may be enqueued and still count as
	// on time (DefaultOnTimeWithin): a process that wakes late (a busy
	// machine, a pause, a clock running slow) enqueues every tick of the
	// last OnTimeWithin it has not seen, and the Missed policy decides
	// about older ones.
	OnTimeWithin time.Duration
	// Clock runs the timers between ticks (clock.Real when nil). Only
	// when to look is taken from it; what is due comes from the database.
	Clock clock.Clock
	// Logger receives failures (slog.Default when nil).
	Logger *slog.Logger
	// OnTick, when set, is called after each enqueue of a tick: created
	// is false when another process (or an earlier run) stored it first.
	// A panic in it is recovered and logged (the tick is stored).
	OnTick func(schedule string, tick time.Time, created bool)
}

// Runner enqueues the ticks of its schedules.
type Runner struct {
	qu        *workqueue.Queue
	cfg       Config
	schedules []*Schedule
	retry     backoff.Policy

	passes, created, duplicates, failures atomic.Uint64
}

// Stats counts what a Runner did.
type Stats struct {
	Passes     uint64 // reads of the database clock after which every schedule's due ticks were tried
	Created    uint64 // ticks this Runner stored first
	Duplicates uint64 // ticks another process (or an earlier run) had stored
	// Failures counts failed reads of the database clock, and failed
	// tries at one schedule's due ticks; each is logged and retried.
	Failures uint64
}

// Stats returns the counters.
func (r *Runner) Stats() Stats {
	return Stats{Passes: r.passes.Load(), Created: r.created.Load(), Duplicates: r.duplicates.Load(), Failures: r.failures.Load()}
}

// New checks cfg and returns a Runner; Run runs it.
func New(qu *workqueue.Queue, cfg Config) (*Runner, error) {
	if qu == nil {
		return nil, errors.New("periodic: nil queue")
	}
	if cfg.Scope == "" {
		return nil, fmt.Errorf("%w: periodic: no scope", workqueue.ErrInvalid)
	}
	if cfg.OnTimeWithin == 0 {
		cfg.OnTimeWithin = DefaultOnTimeWithin
	}
	if cfg.OnTimeWithin < 0 {
		return nil, fmt.Errorf("%w: periodic: OnTimeWithin must be positive, got %s", workqueue.ErrInvalid, cfg.OnTimeWithin)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	r := &Runner{qu: qu, cfg: cfg, retry: backoff.Policy{Initial: time.Second, Max: 30 * time.Second, Jitter: 0.2}}
	names := map[string]bool{}
	for i := range cfg.Schedules {
		s := cfg.Schedules[i] // a copy: compile fills it in
		if err := s.compile(); err != nil {
			return nil, err
		}
		if names[s.Name] {
			return nil, fmt.Errorf("%w: periodic: schedule %q named twice", workqueue.ErrInvalid, s.Name)
		}
		names[s.Name] = true
		r.schedules = append(r.schedules, &s)
	}
	return r, nil
}

// Run enqueues due ticks until ctx ends, and returns nil then. At start
// each schedule's latest tick is enqueued if it is on time, or, with
// MissedRunOnce, however old it is; from then on every tick as it falls
// due. A failed read of the database's clock is retried (1s doubling to
// 30s, ±20%). A schedule whose due ticks fail (see TickEvent; or their
// enqueue fails) is retried on the same curve, on its own: the ticks it
// covered stay due until one succeeds, and the other schedules go on.
func (r *Runner) Run(ctx context.Context) error {
	if len(r.schedules) == 0 {
		<-ctx.Done()
		return nil
	}
	timer := r.cfg.Clock.NewTimer()
	defer timer.Stop()
	states := make([]dueState, len(r.schedules))
	clockFailures := 0
	for {
		now, err := r.qu.DatabaseNow(ctx)
		var wait time.Duration
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			r.failures.Add(1)
			clockFailures++
			wait = r.retry.Next(clockFailures)
			r.cfg.Logger.Warn("periodic: reading the database's clock failed; retrying", "scope", r.cfg.Scope, "err", err, "in", wait)
		default:
			clockFailures = 0
			for i, s := range r.schedules {
				if st := &states[i]; st.failures == 0 || !now.Before(st.retryAt) {
					r.enqueueDue(ctx, s, st, now)
				}
			}
			if ctx.Err() != nil {
				return nil
			}
			r.passes.Add(1)
			// A duration of the database's clock, waited on this process's
			// timer: a clock that is off only moves when it looks again.
			wait = r.nextDue(states).Sub(now)
		}
		timer.Reset(max(wait, time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-timer.C():
		}
	}
}

// dueState is what Run knows of one schedule between passes.
type dueState struct {
	seen     time.Time // every tick at or before it is enqueued; zero before the first success
	failures int       // consecutive failed tries at the schedule's due ticks
	retryAt  time.Time // with failures: when, by the database's clock, to try them again
}

// nextDue is when, by the database's clock, some schedule next has work:
// its next tick, or its retry after a failure.
func (r *Runner) nextDue(states []dueState) time.Time {
	var next time.Time
	for i, s := range r.schedules {
		at := s.next(states[i].seen)
		if states[i].failures > 0 {
			at = states[i].retryAt
		}
		if i == 0 || at.Before(next) {
			next = at
		}
	}
	return next
}

// enqueueDue enqueues the due ticks of one schedule, in order, in batches
// of the Queue's MaxEnqueueBatch, moving st.seen past each batch stored.
// The first tick that fails (its event cannot be built, or its batch is
// refused) stops it there: that tick and the later ones stay due, and the
// schedule is retried after a backoff (st.retryAt).
func (r *Runner) enqueueDue(ctx context.Context, s *Schedule, st *dueState, now time.Time) {
	ticks := s.due(st.seen, now, r.cfg.OnTimeWithin)
	events := make([]workqueue.Event, 0, len(ticks))
	var buildErr error
	for _, tick := range ticks {
		ev, err := s.TickEvent(tick)
		if err != nil {
			buildErr = err
			break
		}
		events = append(events, ev)
	}
	batch := r.qu.MaxEnqueueBatch()
	for from := 0; from < len(events); from += batch {
		to := min(from+batch, len(events))
		res, err := r.qu.Enqueue(ctx, r.cfg.Scope, events[from:to])
		if err != nil {
			if ctx.Err() == nil {
				r.failed(s, st, now, fmt.Errorf("periodic: schedule %q: enqueue %d ticks from %s: %w", s.Name, to-from, stamp(ticks[from]), err))
			}
			return
		}
		for k, tick := range ticks[from:to] {
			created := !res[k].Duplicate
			if created {
				r.created.Add(1)
			} else {
				r.duplicates.Add(1)
			}
			r.onTick(s.Name, tick, created)
		}
		st.seen = ticks[to-1]
	}
	if buildErr != nil {
		r.failed(s, st, now, buildErr)
		return
	}
	st.seen, st.failures = now, 0
}

// failed counts and logs a failed try at a schedule's due ticks and sets
// when to retry them.
func (r *Runner) failed(s *Schedule, st *dueState, now time.Time, err error) {
	r.failures.Add(1)
	st.failures++
	wait := r.retry.Next(st.failures)
	st.retryAt = now.Add(wait)
	attrs := []any{"scope", r.cfg.Scope, "schedule", s.Name, "err", err, "in", wait}
	if p := (*panicError)(nil); errors.As(err, &p) {
		r.cfg.Logger.Error("periodic: a schedule's Event panicked; its due ticks are retried, the other schedules go on", append(attrs, "stack", string(p.stack))...)
		return
	}
	r.cfg.Logger.Warn("periodic: a schedule's due ticks could not be enqueued; they are retried, the other schedules go on", attrs...)
}

// onTick calls Config.OnTick, recovering a panic: the tick is stored
// already, and a panicking callback must not end the process.
func (r *Runner) onTick(schedule string, tick time.Time, created bool) {
	if r.cfg.OnTick == nil {
		return
	}
	defer func() {
		if v := recover(); v != nil {
			r.cfg.Logger.Error("periodic: OnTick panicked; the tick is stored and the runner goes on", "scope", r.cfg.Scope,
				"schedule", schedule, "tick", stamp(tick), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	r.cfg.OnTick(schedule, tick, created)
}
