// Package bench is `laneq bench`: a load and fault run of laneq on a real
// TiDB, verified from the database. A coordinator migrates a fresh
// database, starts N worker processes of M executors (this binary,
// re-executed), enqueues a workload with source and target lanes, bursts,
// projections, dependency waits and designed failures, injects faults on a
// schedule (kill -9 and restart, a worker frozen past its lease, TiDB
// paused past the lease, dropped connections), optionally runs handlers
// that ignore their context and cancels some while they run, waits for the
// queue to drain, and then checks every execution attempt the processes
// recorded in bench_attempt against the work items: nothing lost, nothing
// run twice without a fault that explains it, lane order held, and no
// handler of a lane item or of another attempt of an item running while
// one started, unless its process lost its lease to a fault. With Baseline the
// same counts run again on the naive claim loop, so figures come with a
// ratio.
package bench

import (
	"fmt"
	"time"
)

// Spec is a bench run. The zero value of each field takes its default.
type Spec struct {
	// Items is the number of events enqueued (one work item each, except
	// projection events, which collapse into generations). Default 2,000.
	Items int
	// Scopes the events are spread over. Default 1.
	Scopes int
	// SourceLanes is how many source lanes laned events are spread over
	// (round robin, so each lane's events are spread over the run). Default
	// Items/10.
	SourceLanes int
	// TargetLanes is how many target lanes bursts hit. Default 4.
	TargetLanes int
	// BurstSize is the length of a burst: consecutive events that all take
	// one target lane (a same-target burst) or spread over every target
	// lane (a multi-target burst). One burst in five is same-target and one
	// in five multi-target. Default 50.
	BurstSize int
	// ProjectionEvery makes one source lane in N, chosen by a hash of its
	// number, a projection lane (its events are source projection work). 0 takes the default 10; negative
	// means none.
	ProjectionEvery int
	// DependencyEvery makes every Nth event a consumer waiting for a
	// dependency that a later event's handler satisfies. 0 takes the
	// default 20; negative means none.
	DependencyEvery int
	// FreeEvery makes every Nth event laneless. 0 takes the default 10;
	// negative means none.
	FreeEvery int
	// Classes are the queue classes events rotate over. Default default, bulk.
	Classes []string
	// Processes and Executors: worker processes, executors per worker.
	// Default 3 × 16.
	Processes int
	Executors int
	// NoClaimOnPromote turns off the workers' claim on promote
	// (worker.Config.NoClaimOnPromote): what taking lane followers in the
	// completion batch saves.
	NoClaimOnPromote bool
	// Lease of every claim. Default 3s.
	Lease time.Duration
	// HandlerLatency is each attempt's simulated work (±50%). Default 5ms.
	HandlerLatency time.Duration
	// FailureRate is the share of attempts that fail on purpose (and
	// retry). Default 0.02; negative means none.
	FailureRate float64
	// EnqueueBatch is the events of one Enqueue. Default 200.
	EnqueueBatch int
	// EnqueueRate caps events enqueued per second; 0 means as fast as
	// the enqueuer can.
	EnqueueRate int
	// Periodic makes every worker process run a schedule of one tick per
	// Periodic in each scope (runtime/periodic): the verifier checks each
	// tick was stored once, with one item, and none lost, while processes
	// are killed and frozen and TiDB is paused. 0 means none; at least 1s.
	Periodic time.Duration
	// RateLimit caps the starts of the "limited" work type at RateLimit a
	// second across every process (runtime/ratelimit); every
	// LimitedEvery-th laneless event is of that type (default 5). The
	// verifier checks the limit's budget rows: no window granted more than
	// its share, no second more than RateLimit. 0 means none; at least 10.
	// With RateKeys, the limit is per key (ratelimit.Limit.PerKey): the
	// limited items take RateKeys rate keys in turn, each with a budget of
	// RateLimit a second, and the verifier checks every key's rows.
	RateLimit    int
	LimitedEvery int
	RateKeys     int
	// StubbornEvery makes one event in N (by a hash of its number, so in
	// lanes and in none alike) stubborn: the first attempt of its item
	// ignores its context, running for StubbornFor whatever its context
	// says, and then returns the context's error if it ended, else does
	// its work as usual. A stubborn event never satisfies a dependency (a
	// cancelled producer would leave its consumer waiting for ever). 0
	// means none.
	StubbornEvery int
	// StubbornFor is how long a stubborn handler runs. Default
	// HandlerDeadline + AbandonAfter + 3s: it overruns its deadline, and a
	// worker that gives an abandoned handler's item up (the defect of issue
	// 54) has seconds to start its lane follower or a retry beside it.
	StubbornFor time.Duration
	// HandlerDeadline and AbandonAfter are the workers'
	// (scheduler.Config): a handler's bound, and how long one that ignores
	// its cancelled context keeps its executor slot. Zero takes the
	// worker's defaults (5m, 5s), or, with StubbornEvery, 2s and 1s, so
	// that in a short run a stubborn handler either overruns its deadline
	// or is cancelled first (Cancels), and is abandoned either way.
	HandlerDeadline time.Duration
	AbandonAfter    time.Duration
	// Cancels is how many running items the coordinator cancels
	// (workqueue.Queue.Cancel), one every CancelEvery (default 3s), the
	// first after CancelEvery too: each time the stubborn attempt that
	// started last among those running, so the cancellation lands before
	// its deadline. A cancel that finds none running within a minute is
	// skipped and reported.
	Cancels     int
	CancelEvery time.Duration
	// Faults is the fault schedule.
	Faults FaultPlan
	// Baseline also runs the baseline pair: the same number of events,
	// laneless, without faults or designed failures, once through laneq
	// and once through the naive claim loop, so the claim paths compare on
	// identical work.
	Baseline bool
	// Deadline bounds the wait for the queue to drain after the last
	// fault and cancellation. Default 10m.
	Deadline time.Duration
	// BaselineDeadline bounds each baseline phase after its last enqueue;
	// what is left is reported as unfinished (the naive loop can be very
	// slow). Default 3m.
	BaselineDeadline time.Duration
}

// FaultPlan is when and how often faults hit the run.
type FaultPlan struct {
	Kills      int // kill -9 of a worker process mid-execution, restarted after Restart
	Freezes    int // SIGSTOP of a worker process holding a lease for Freeze (> lease) and until its leases were taken over, then SIGCONT
	TiDBPauses int // TiDB stopped for Pause (> lease): SIGSTOP (embedded) or docker pause
	Drops      int // a worker's connections dropped under its next claims, renewals, finishes
	// Every is the time between faults; the first comes after Every too.
	// Default 4s.
	Every time.Duration
	// Freeze and Pause default to 2 × Lease; Restart defaults to 1s.
	Freeze, Pause, Restart time.Duration
}

// Total is the number of faults planned.
func (p FaultPlan) Total() int { return p.Kills + p.Freezes + p.TiDBPauses + p.Drops }

// SpecError is an invalid setting.
type SpecError struct{ Field, Reason string }

func (e *SpecError) Error() string { return fmt.Sprintf("bench: invalid %s: %s", e.Field, e.Reason) }

// WithDefaults fills zero fields and checks the result.
func (s Spec) WithDefaults() (Spec, error) {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.Items, 2000)
	def(&s.Scopes, 1)
	def(&s.SourceLanes, max(1, s.Items/10))
	def(&s.TargetLanes, 4)
	def(&s.BurstSize, 50)
	def(&s.ProjectionEvery, 10)
	def(&s.DependencyEvery, 20)
	def(&s.FreeEvery, 10)
	def(&s.Processes, 3)
	def(&s.Executors, 16)
	def(&s.EnqueueBatch, 200)
	if s.RateLimit > 0 {
		def(&s.LimitedEvery, 5)
	}
	if len(s.Classes) == 0 {
		s.Classes = []string{"default", "bulk"}
	}
	if s.Lease == 0 {
		s.Lease = 3 * time.Second
	}
	if s.HandlerLatency == 0 {
		s.HandlerLatency = 5 * time.Millisecond
	}
	if s.FailureRate == 0 {
		s.FailureRate = 0.02
	}
	if s.Deadline == 0 {
		s.Deadline = 10 * time.Minute
	}
	if s.StubbornEvery > 0 {
		if s.HandlerDeadline == 0 {
			s.HandlerDeadline = 2 * time.Second
		}
		if s.AbandonAfter == 0 {
			s.AbandonAfter = time.Second
		}
		if s.StubbornFor == 0 {
			s.StubbornFor = s.HandlerDeadline + s.AbandonAfter + 3*time.Second
		}
	}
	if s.CancelEvery == 0 {
		s.CancelEvery = 3 * time.Second
	}
	if s.BaselineDeadline == 0 {
		s.BaselineDeadline = 3 * time.Minute
	}
	f := &s.Faults
	if f.Every == 0 {
		f.Every = 4 * time.Second
	}
	if f.Freeze == 0 {
		f.Freeze = 2 * s.Lease
	}
	if f.Pause == 0 {
		f.Pause = 2 * s.Lease
	}
	if f.Restart == 0 {
		f.Restart = time.Second
	}
	checks := []struct {
		ok            bool
		field, reason string
	}{
		{s.Items >= 1 && s.Items <= 10_000_000, "items", "want 1..10,000,000"},
		{s.Scopes >= 1 && s.Scopes <= 100, "scopes", "want 1..100"},
		{s.SourceLanes >= 1, "source-lanes", "want at least 1"},
		{s.TargetLanes >= 1, "target-lanes", "want at least 1"},
		{s.BurstSize >= 1, "burst", "want at least 1"},
		{s.Processes >= 1 && s.Processes <= 64, "processes", "want 1..64"},
		{s.Executors >= 1 && s.Executors <= 256, "executors", "want 1..256"},
		{s.Lease >= 500*time.Millisecond, "lease", "want at least 500ms"},
		{s.HandlerLatency >= 0, "handler-latency", "want 0 or more"},
		{s.FailureRate < 0.5, "failure-rate", "want below 0.5 (negative for none)"},
		{s.EnqueueBatch >= 1 && s.EnqueueBatch <= 1000, "enqueue-batch", "want 1..1000"},
		{s.EnqueueRate >= 0, "enqueue-rate", "want 0 (unlimited) or more"},
		{s.Periodic == 0 || s.Periodic >= time.Second, "periodic", "want 0 (none) or at least 1s"},
		{s.RateLimit == 0 || s.RateLimit >= 10, "rate-limit", "want 0 (none) or at least 10 a second"},
		{s.LimitedEvery >= 0, "limited-every", "want 0 or more"},
		{s.RateKeys >= 0 && (s.RateKeys == 0 || s.RateLimit > 0), "rate-keys", "want 0 (one budget), or more with --rate-limit"},
		{s.StubbornEvery >= 0, "stubborn-every", "want 0 (none) or more"},
		{s.StubbornFor >= 0, "stubborn-for", "want 0 (the default) or more"},
		{s.HandlerDeadline >= 0, "handler-deadline", "want 0 (the worker's default) or more"},
		{s.AbandonAfter >= 0, "abandon-after", "want 0 (the worker's default) or more"},
		{s.Cancels >= 0, "cancels", "want 0 (none) or more"},
		{s.Cancels == 0 || s.StubbornEvery > 0, "cancels", "the bench cancels running stubborn items: set --stubborn-every too"},
		{s.CancelEvery > 0, "cancel-every", "want a positive duration"},
		{f.Kills >= 0 && f.Freezes >= 0 && f.TiDBPauses >= 0 && f.Drops >= 0, "faults", "counts must not be negative"},
		{f.Every > 0, "fault-every", "want a positive duration"},
		{f.Freeze > s.Lease, "freeze", "must be longer than the lease (the point of the fault)"},
		{f.Pause > s.Lease, "pause", "must be longer than the lease (the point of the fault)"},
		{f.Restart >= 0, "restart", "want 0 or more"},
		{s.Deadline > 0, "deadline", "want a positive duration"},
		{s.BaselineDeadline > 0, "baseline-deadline", "want a positive duration"},
	}
	for _, c := range checks {
		if !c.ok {
			return s, &SpecError{c.field, c.reason}
		}
	}
	for _, c := range s.Classes {
		if c == "" || len(c) > 32 {
			return s, &SpecError{"classes", fmt.Sprintf("%q: want 1..32 characters", c)}
		}
	}
	return s, nil
}
