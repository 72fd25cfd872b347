package worker

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Metric names. Attributes are low-cardinality only: executor shape, queue
// class, outcome. Scope, owner and item ids are never attributes.
const (
	MetricClaims              = "laneq.worker.claims"                   // counter; shape
	MetricClaimed             = "laneq.worker.claimed_items"            // counter; shape
	MetricLostCAS             = "laneq.worker.claim_lost_cas"           // counter; shape
	MetricClaimDuration       = "laneq.worker.claim.duration"           // histogram, seconds; shape
	MetricStaleReclaims       = "laneq.worker.stale_reclaims"           // counter; shape
	MetricFinished            = "laneq.worker.finished"                 // counter; queue_class, outcome
	MetricFinishErrors        = "laneq.worker.finish_errors"            // counter; outcome
	MetricProcessingRows      = "laneq.worker.processing_rows"          // gauge
	MetricWakeCoalescings     = "laneq.worker.wake_coalescings"         // observable counter
	MetricOverdueSuppressions = "laneq.worker.overdue_suppressions"     // observable counter
	MetricPanics              = "laneq.worker.panics"                   // observable counter
	MetricExpiredToDead       = "laneq.worker.expired_to_dead"          // counter; shape
	MetricClaimFenced         = "laneq.worker.claim_fenced"             // counter; shape
	MetricWriteRetries        = "laneq.worker.write_retries"            // observable counter
	MetricWritesAbandoned     = "laneq.worker.writes_abandoned"         // observable counter
	MetricUnservedWorkKinds   = "laneq.worker.unserved_work_kinds"      // gauge
	MetricAbandonedHandlers   = "laneq.worker.abandoned_handlers"       // gauge
	MetricSweepWoken          = "laneq.worker.dependency_sweep_woken"   // counter
	MetricSweepSettled        = "laneq.worker.dependency_sweep_settled" // counter
	MetricSweepPasses         = "laneq.worker.dependency_sweep_passes"  // observable counter
	MetricSweepErrors         = "laneq.worker.dependency_sweep_errors"  // observable counter
)

// metrics holds the worker's OpenTelemetry instruments. OpenTelemetry's
// metric API is a small interface-only module, so importing laneq adds no
// exporter or SDK: the application passes its MeterProvider (for example the
// SDK with a Prometheus or OTLP exporter), and without one nothing is
// recorded. Prometheus client_golang would instead pin one exposition
// format and its dependency tree on every importer.
type metrics struct {
	claims, claimedItems, lostCAS, stale, finishedN, finishErrs metric.Int64Counter
	expiredToDead, fenced, sweepWoken, sweepSettled             metric.Int64Counter
	claimDuration                                               metric.Float64Histogram
	reg                                                         metric.Registration
}

func newMetrics(mp metric.MeterProvider, w *Worker) (*metrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	m := mp.Meter("github.com/laneq/laneq/runtime/worker")
	var out metrics
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	out.claims = counter(MetricClaims, "Shape claims: one per executor shape that claimed in a turn (shapes whose eligible work is the same share one claim's statements).")
	out.claimedItems = counter(MetricClaimed, "Items claimed.")
	out.lostCAS = counter(MetricLostCAS, "Claim candidates another claimer won first.")
	out.stale = counter(MetricStaleReclaims, "Items reclaimed from an expired lease.")
	out.finishedN = counter(MetricFinished, "Attempts finished, by outcome.")
	out.finishErrs = counter(MetricFinishErrors, "Finish calls that failed (a lost lease, a database error).")
	out.expiredToDead = counter(MetricExpiredToDead, "Expired leases sent to dead with their attempt budget spent.")
	out.fenced = counter(MetricClaimFenced, "Items won by a claim in flight when the generation moved, released unrun.")
	out.sweepWoken = counter(MetricSweepWoken,
		"Dependency waiters the safety pass woke: each is a wake a producer missed (a writer that bypassed Satisfy).")
	out.sweepSettled = counter(MetricSweepSettled, "Dependency registrations an interrupted wait left, settled by the safety pass.")
	var err error
	out.claimDuration, err = m.Float64Histogram(MetricClaimDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of one claim (scan, CAS and read-back)."))
	errs = append(errs, err)
	processing, err := m.Int64ObservableGauge(MetricProcessingRows, metric.WithDescription("Items this worker is running."))
	errs = append(errs, err)
	wakes, err := m.Int64ObservableCounter(MetricWakeCoalescings, metric.WithDescription("Queued wakes that absorbed at least one more wake before the claim turn took them."))
	errs = append(errs, err)
	overdue, err := m.Int64ObservableCounter(MetricOverdueSuppressions,
		metric.WithDescription("Past next-work times after an empty claim, left disarmed instead of spinning."))
	errs = append(errs, err)
	panics, err := m.Int64ObservableCounter(MetricPanics, metric.WithDescription("Handler panics recovered by executors."))
	errs = append(errs, err)
	retries, err := m.Int64ObservableCounter(MetricWriteRetries,
		metric.WithDescription("Queue writes (claims, finishes, renewals) run again after a transient error."))
	errs = append(errs, err)
	abandoned, err := m.Int64ObservableCounter(MetricWritesAbandoned,
		metric.WithDescription("Queue writes that still failed transiently after every attempt."))
	errs = append(errs, err)
	passes, err := m.Int64ObservableCounter(MetricSweepPasses, metric.WithDescription("Dependency safety passes run."))
	errs = append(errs, err)
	passErrs, err := m.Int64ObservableCounter(MetricSweepErrors,
		metric.WithDescription("Dependency safety passes that stopped on an error (run again after a backoff)."))
	errs = append(errs, err)
	abandonedHandlers, err := m.Int64ObservableGauge(MetricAbandonedHandlers,
		metric.WithDescription("Handlers that ignored their cancelled context past AbandonAfter and still run: each holds its item's lease and lanes until it returns."))
	errs = append(errs, err)
	unserved, err := m.Int64ObservableGauge(MetricUnservedWorkKinds,
		metric.WithDescription("Work kinds (queue class, work type) this worker has a handler for but no executor shape claims."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	out.reg, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		st := w.Stats()
		o.ObserveInt64(processing, int64(w.processing()))
		o.ObserveInt64(wakes, int64(st.Controller.WakeCoalescings))
		o.ObserveInt64(overdue, int64(st.Controller.OverdueSuppressions))
		o.ObserveInt64(panics, int64(st.Scheduler.Panics))
		o.ObserveInt64(retries, int64(st.Queue.WriteRetries))
		o.ObserveInt64(abandoned, int64(st.Queue.WritesAbandoned))
		o.ObserveInt64(unserved, int64(len(w.UnservedWorkKinds())))
		o.ObserveInt64(abandonedHandlers, st.Scheduler.AbandonedRunning)
		o.ObserveInt64(passes, int64(st.Controller.Maintenances))
		o.ObserveInt64(passErrs, int64(st.Controller.MaintenanceErrors))
		return nil
	}, processing, wakes, overdue, panics, retries, abandoned, abandonedHandlers, unserved, passes, passErrs)
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// close unregisters the observable callbacks, so a stopped worker is
// neither observed nor kept alive by its MeterProvider.
func (m *metrics) close() { _ = m.reg.Unregister() }

func (m *metrics) claimed(ctx context.Context, req scheduler.Request, items []workqueue.Claimed, st workqueue.ClaimStats, took time.Duration) {
	shape := metric.WithAttributes(attribute.String("shape", req.Shape))
	m.claims.Add(ctx, 1, shape)
	m.claimedItems.Add(ctx, int64(len(items)), shape)
	m.lostCAS.Add(ctx, int64(st.LostCAS), shape)
	m.claimDuration.Record(ctx, took.Seconds(), shape)
	if st.ExpiredToDead > 0 {
		m.expiredToDead.Add(ctx, int64(st.ExpiredToDead), shape)
	}
	if st.Fenced > 0 {
		m.fenced.Add(ctx, int64(st.Fenced), shape)
	}
	var stale int64
	for _, c := range items {
		if c.Reclaimed {
			stale++
		}
	}
	if stale > 0 {
		m.stale.Add(ctx, stale, shape)
	}
}

// taken counts followers a completion batch claimed for a shape (claim
// on promote): items claimed, not a claim.
func (m *metrics) taken(ctx context.Context, shape string, n int) {
	if n > 0 {
		m.claimedItems.Add(ctx, int64(n), metric.WithAttributes(attribute.String("shape", shape)))
	}
}

func (m *metrics) swept(ctx context.Context, st workqueue.SweepStats) {
	if st.Woken > 0 {
		m.sweepWoken.Add(ctx, int64(st.Woken))
	}
	if st.Settled > 0 {
		m.sweepSettled.Add(ctx, int64(st.Settled))
	}
}

func (m *metrics) finished(ctx context.Context, c workqueue.Claimed, outcome Outcome, err error) {
	if err != nil {
		m.finishErrs.Add(ctx, 1, metric.WithAttributes(attribute.String("outcome", string(outcome))))
		return
	}
	m.finishedN.Add(ctx, 1, metric.WithAttributes(attribute.String("queue_class", c.QueueClass), attribute.String("outcome", string(outcome))))
}

// processing is the number of items claimed and not yet finished.
func (w *Worker) processing() int {
	busy := 0
	free := w.sched.FreeSlots()
	for _, sh := range w.sched.Shapes() {
		busy += sh.Executors - free[sh.Name]
	}
	return busy
}
