package worker

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/laneq/laneq/runtime/controller"
	"github.com/laneq/laneq/runtime/periodic"
	"github.com/laneq/laneq/runtime/ratelimit"
	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Environment variables read by Config.FromEnv. Each overrides the field
// named beside it; unset variables leave the field as it is.
const (
	EnvExecutors             = "LANEQ_EXECUTORS"               // Scheduler.Executors
	EnvMaxProcessingRows     = "LANEQ_MAX_PROCESSING_ROWS"     // Scheduler.MaxProcessingRows
	EnvQueueProfile          = "LANEQ_QUEUE_PROFILE"           // Scheduler.Profile: reserved | default-heavy
	EnvStageTiming           = "LANEQ_STAGE_TIMING"            // StageTiming: true | false
	EnvHandlerDeadline       = "LANEQ_HANDLER_DEADLINE"        // Scheduler.HandlerDeadline, a Go duration
	EnvGenerationProbeEvery  = "LANEQ_GENERATION_PROBE_EVERY"  // Controller.GenerationProbeEvery
	EnvReconcileEvery        = "LANEQ_RECONCILE_EVERY"         // Controller.ReconcileEvery
	EnvDependencySafetyEvery = "LANEQ_DEPENDENCY_SAFETY_EVERY" // Controller.MaintainEvery
	EnvCompleteBatch         = "LANEQ_COMPLETE_BATCH"          // CompleteBatch
	EnvClaimOnPromote        = "LANEQ_CLAIM_ON_PROMOTE"        // NoClaimOnPromote: on | off
	EnvClaimGather           = "LANEQ_CLAIM_GATHER"            // Scheduler.ClaimGather, a Go duration
	EnvClaimAhead            = "LANEQ_CLAIM_AHEAD"             // Scheduler.ClaimAhead, an integer (negative disables)
	EnvClaimAheadWait        = "LANEQ_CLAIM_AHEAD_WAIT"        // Scheduler.ClaimAheadWait, a Go duration
	EnvQuietProbeEvery       = "LANEQ_QUIET_PROBE_EVERY"       // Controller.QuietProbeEvery
	EnvQuietBackstopEvery    = "LANEQ_QUIET_BACKSTOP_EVERY"    // Controller.QuietBackstopEvery
	EnvWake                  = "LANEQ_WAKE"                    // Wake.Off: on | off
	EnvWakeListen            = "LANEQ_WAKE_LISTEN"             // Wake.Hub.Listen, host:port
	EnvWakeAdvertise         = "LANEQ_WAKE_ADVERTISE"          // Wake.Hub.Advertise, host:port or host
)

// DefaultCompleteBatch is Config.CompleteBatch's default.
const DefaultCompleteBatch = 64

// ConservativeExecutors is the executor count above which New logs the
// configuration as unsafe: every executor holds a lease and a connection.
const ConservativeExecutors = 16

// Config configures a Worker for one scope.
type Config struct {
	// Scope to work on (it must exist; see workqueue.Queue.EnsureScope).
	Scope string
	// Owner names this process in lease rows. Default "<hostname>:<pid>".
	Owner string
	// Scheduler: executors, queue profile, processing budget, deadlines.
	Scheduler scheduler.Config
	// Controller: generation probe, reconciliation and dependency safety
	// pass periods (MaintainEvery, default 2m), clock.
	Controller controller.Config
	// Wake: how other processes wake this worker within milliseconds of a
	// commit (runtime/wake). On by default, on loopback.
	Wake WakeConfig
	// Claimer: scan windows and rescans (see workqueue.ClaimerConfig).
	Claimer workqueue.ClaimerConfig
	// DependencySweep bounds each dependency safety pass (time and probe
	// budgets, page size; see workqueue.DependencySweep). The pass runs
	// every Controller.MaintainEvery.
	DependencySweep workqueue.DependencySweepConfig
	// CompleteBatch is the most completions one write takes: items in no
	// lane by one statement, items in lanes by one transaction that
	// promotes their followers (workqueue.Queue.CompleteMany). Executors
	// that finish while a completion write is in flight (two for items in
	// lanes) are written together by the next one (group commit, no timer:
	// a completion is written at once while fewer are in flight). An executor takes its next
	// item as soon as its handler returns; the item keeps its processing
	// budget row (Scheduler.MaxProcessingRows) until its own write
	// committed. Lease renewals are batched the same way, up to the same
	// bound. 1 writes each alone.
	// Default 64, at most workqueue.MaxCompleteBatch.
	CompleteBatch int
	// NoClaimOnPromote turns off claim on promote: by default a batch of
	// completions in lanes (CompleteBatch above 1) also claims, in its own
	// transaction, up to one lane follower per item in lanes it completed,
	// for this process (workqueue.Claimer.CompleteManyTaking), and the
	// follower runs on an executor of its class holding its predecessor's
	// processing-budget row (scheduler.Scheduler.Adopt). A sequential lane
	// then costs no claim turn, scan or wake per item. At most
	// workqueue.MaxTakenInARow in a row: the next is promoted and waits its
	// turn. Followers it does not take are announced as before.
	NoClaimOnPromote bool
	// StageTiming logs each attempt's stage durations (no payloads).
	StageTiming bool
	// History: the per-minute counts this worker writes for the dashboard's
	// charts (queue_history).
	History HistoryConfig
	// Logger for the worker and its parts. Default slog.Default().
	Logger *slog.Logger
	// MeterProvider receives the worker's metrics (OpenTelemetry). Default:
	// none recorded.
	MeterProvider metric.MeterProvider
	// OnFinished, when set, is called once an attempt's outcome is durable
	// (see Finished), on the executor's goroutine: keep it short and
	// non-blocking. An outcome whose write failed is not reported: the
	// lease decides that item, and another attempt reports it. A panic in
	// it is recovered and logged; the worker goes on.
	OnFinished func(Finished)
	// Schedules are periodic jobs this worker enqueues into its scope
	// (runtime/periodic): each tick once, however many processes run the
	// same schedules, with no leader. Their timers run on
	// Controller.Clock; what is due is read from the database's clock.
	Schedules []periodic.Schedule
	// PeriodicOnTimeWithin is periodic.Config.OnTimeWithin (default 1m).
	PeriodicOnTimeWithin time.Duration
	// Limits cap the starts of work types of the scope across every
	// process (runtime/ratelimit; each process must set the same limits):
	// one work type's, or a Key's budget shared by several work types.
	// With limits, claim on promote is off (NoClaimOnPromote): a follower
	// taken by a finish would start outside its limit.
	Limits []ratelimit.Limit
	// RateWindowsKept is how long a rate-limit window's row stays after
	// the window ended before a taker deletes it
	// (ratelimit.Options.KeepEnded): at least and by default 1s. Keep
	// more to read recent windows' grants back.
	RateWindowsKept time.Duration
	// Hooks are fault-injection points for crash tests; leave nil.
	Hooks *Hooks
}

// HistoryConfig tunes the throughput history a worker writes: per minute,
// queue class and work type, the attempts it finished (completed or
// skipped, failed and due again, dead) and the longest an item it claimed
// had been due, counted in memory and written at the next maintenance
// (Controller.MaintainEvery), one upsert per minute and work kind on rows
// only this process writes. A minute in which it did nothing costs no
// statement. After a write it deletes, at most once an hour, up to 1,000
// of the scope's rows older than Retention.
type HistoryConfig struct {
	// Off: write no history (the dashboard's charts stay empty for this
	// process's work).
	Off bool
	// Retention is how long rows are kept. Default 24h; at least 1h.
	Retention time.Duration
}

// DefaultHistoryRetention is HistoryConfig.Retention's default.
const DefaultHistoryRetention = 24 * time.Hour

// WakeConfig says how the worker hears of other processes' commits.
//
// By default the worker runs its own wake hub on 127.0.0.1 (a free port),
// registers an endpoint for its scope, and announces its own enqueues,
// promotions, releases and dependency wakes to the scope's other
// processes. Once its self-test datagram came back, its controller runs in
// quiet mode (probe every Controller.QuietProbeEvery, backstop every
// Controller.QuietBackstopEvery). Processes on other hosts or in other
// containers reach it only when Hub.Listen and Hub.Advertise say how.
type WakeConfig struct {
	// Off disables wakes: the worker neither listens nor announces and
	// probes on the normal periods.
	Off bool
	// Shared is a process-wide hub to use instead of the worker's own
	// (several workers, or an enqueuing API in the same process). The
	// worker subscribes its scope and watches its Queue on it; it does not
	// close it.
	Shared *wake.Hub
	// Hub configures the worker's own hub (ignored with Shared).
	Hub wake.Config
}

// Hooks are called at the lifecycle boundaries the crash matrix kills a
// worker at (see runtime/crashmatrix). Nil fields are skipped.
type Hooks struct {
	// AfterClaim runs once the claim committed, before the item is handed
	// to an executor.
	AfterClaim func(workqueue.Claimed)
	// AfterClaimTurn runs once per claim result that took items, with how
	// long the claim turn (scope read, scans, CAS, read-back) took, and once
	// per shape a completion batch took followers for (claim on promote),
	// with how long that batch's write and read-back took; load and fault
	// runs (laneq bench) record claim latency with it.
	AfterClaimTurn func(took time.Duration, claimed []workqueue.Claimed)
	// BeforeFinish runs after the handler returned, before its outcome is
	// made durable.
	BeforeFinish func(c workqueue.Claimed, outcome error)
	// AfterFinish runs once the outcome's write returned (err nil: it is
	// durable); with BeforeFinish it times handler return to commit.
	AfterFinish func(c workqueue.Claimed, outcome, err error)
}

// ConfigError reports an invalid setting.
type ConfigError struct {
	Setting string // field or environment variable
	Value   string
	Reason  string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("worker: invalid %s=%q: %s", e.Setting, e.Value, e.Reason)
}

// ErrConfig is matched (errors.Is) by every *ConfigError.
var ErrConfig = errors.New("worker: invalid configuration")

func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// FromEnv returns c with the LANEQ_* environment variables applied.
func (c Config) FromEnv() (Config, error) { return c.fromLookup(os.LookupEnv) }

func (c Config) fromLookup(lookup func(string) (string, bool)) (Config, error) {
	positive := func(name string, dst *int) error {
		v, ok := lookup(name)
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return &ConfigError{name, v, "want a positive integer"}
		}
		*dst = n
		return nil
	}
	nonZero := func(name string, dst *int) error {
		v, ok := lookup(name)
		if !ok {
			return nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n == 0 {
			return &ConfigError{name, v, "want a non-zero integer (negative disables)"}
		}
		*dst = n
		return nil
	}
	duration := func(name string, dst *time.Duration, allowNegative bool) error {
		v, ok := lookup(name)
		if !ok {
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d == 0 || (d < 0 && !allowNegative) {
			reason := "want a positive Go duration such as 30s or 5m"
			if allowNegative {
				reason = "want a Go duration such as 15s (negative disables)"
			}
			return &ConfigError{name, v, reason}
		}
		*dst = d
		return nil
	}
	errs := []error{
		positive(EnvExecutors, &c.Scheduler.Executors),
		positive(EnvMaxProcessingRows, &c.Scheduler.MaxProcessingRows),
		positive(EnvCompleteBatch, &c.CompleteBatch),
		duration(EnvHandlerDeadline, &c.Scheduler.HandlerDeadline, false),
		duration(EnvClaimGather, &c.Scheduler.ClaimGather, true),
		nonZero(EnvClaimAhead, &c.Scheduler.ClaimAhead),
		duration(EnvClaimAheadWait, &c.Scheduler.ClaimAheadWait, false),
		duration(EnvGenerationProbeEvery, &c.Controller.GenerationProbeEvery, true),
		duration(EnvReconcileEvery, &c.Controller.ReconcileEvery, true),
		duration(EnvDependencySafetyEvery, &c.Controller.MaintainEvery, true),
		duration(EnvQuietProbeEvery, &c.Controller.QuietProbeEvery, true),
		duration(EnvQuietBackstopEvery, &c.Controller.QuietBackstopEvery, false),
	}
	if v, ok := lookup(EnvWake); ok {
		switch v {
		case "on":
			c.Wake.Off = false
		case "off":
			c.Wake.Off = true
		default:
			errs = append(errs, &ConfigError{EnvWake, v, "want on or off"})
		}
	}
	if v, ok := lookup(EnvClaimOnPromote); ok {
		switch v {
		case "on":
			c.NoClaimOnPromote = false
		case "off":
			c.NoClaimOnPromote = true
		default:
			errs = append(errs, &ConfigError{EnvClaimOnPromote, v, "want on or off"})
		}
	}
	if v, ok := lookup(EnvWakeListen); ok {
		if _, _, err := net.SplitHostPort(v); err != nil {
			errs = append(errs, &ConfigError{EnvWakeListen, v, "want host:port (port 0: any free port)"})
		} else {
			c.Wake.Hub.Listen = v
		}
	}
	if v, ok := lookup(EnvWakeAdvertise); ok {
		if _, _, err := net.SplitHostPort(v); err != nil && (v == "" || strings.ContainsAny(v, " /")) {
			errs = append(errs, &ConfigError{EnvWakeAdvertise, v, "want host:port, or a host (the bound port is added)"})
		} else {
			c.Wake.Hub.Advertise = v
		}
	}
	if v, ok := lookup(EnvQueueProfile); ok {
		switch p := scheduler.Profile(v); p {
		case scheduler.ProfileReserved, scheduler.ProfileDefaultHeavy:
			c.Scheduler.Profile = p
		default:
			errs = append(errs, &ConfigError{EnvQueueProfile, v, "want reserved or default-heavy"})
		}
	}
	if v, ok := lookup(EnvStageTiming); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			errs = append(errs, &ConfigError{EnvStageTiming, v, "want true or false"})
		}
		c.StageTiming = b
	}
	return c, errors.Join(errs...)
}

// Unsafe lists settings that are valid but risky; New logs each one.
func (c Config) Unsafe(lease time.Duration) []string {
	var out []string
	s := c.Scheduler
	executors := s.Executors
	if executors == 0 {
		executors = scheduler.DefaultExecutors
	}
	if executors > ConservativeExecutors {
		out = append(out, fmt.Sprintf("%d executors is above the conservative %d: each holds a lease and a connection while it runs", executors, ConservativeExecutors))
	}
	if s.MaxProcessingRows > 0 && s.MaxProcessingRows < executors {
		out = append(out, fmt.Sprintf("max processing rows %d is below the executor count %d: some executors can never run", s.MaxProcessingRows, executors))
	}
	hb := s.HeartbeatEvery
	if hb == 0 {
		hb = lease / 3
	}
	if hb >= lease {
		out = append(out, fmt.Sprintf("heartbeat every %s does not renew a %s lease in time: items will be reclaimed while running", hb, lease))
	}
	if p := c.Controller.ReconcileEvery; p < 0 {
		out = append(out, "the reconciliation backstop is disabled: work no event announces waits for a restart")
	}
	if p := c.Controller.MaintainEvery; p < 0 {
		out = append(out, "the dependency safety pass is disabled: a waiter whose producer missed its wake waits forever")
	}
	return out
}
