package plancheck

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"regexp"
	"slices"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// DefaultChurnRatio is how much slower a hot statement may run on the churned
// fixture than on the fresh one when its case states no ratio.
const DefaultChurnRatio = 3.0

// churnNoiseFloor: below this, timings on a shared 2-core machine are noise.
const churnNoiseFloor = 2 * time.Millisecond

// churnWorkType marks the items Churn pushes through the claim path; no case
// selects it, so the fixture rows the cases name are untouched.
const churnWorkType = "churn"

// Churn pushes items work items through the target scope's claim path
// (enqueue, claim, complete), in the queue class the cases scan: every claim
// and completion leaves MVCC delete markers in the claim, due and lease
// indexes until GC (10 minutes by default), which is what a busy queue's
// statements must step over.
func Churn(ctx context.Context, db *sql.DB, items int, progress io.Writer) error {
	started := time.Now()
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		return fmt.Errorf("plancheck: churn: %w", err)
	}
	c, err := qu.NewClaimer(TargetScope, "plancheck-churn", workqueue.ClaimerConfig{})
	if err != nil {
		return fmt.Errorf("plancheck: churn: %w", err)
	}
	req := workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{churnWorkType}, Max: 50}
	for done := 0; done < items; {
		batch := min(500, items-done)
		events := make([]workqueue.Event, batch)
		for i := range events {
			events[i] = workqueue.Event{
				IdempotencyKey: fmt.Sprintf("churn:%d", done+i),
				Work:           []workqueue.Work{{WorkType: churnWorkType}},
			}
		}
		if _, err := qu.Enqueue(ctx, TargetScope, events); err != nil {
			return fmt.Errorf("plancheck: churn enqueue: %w", err)
		}
		for left := batch; left > 0; {
			got, _, err := c.Claim(ctx, req)
			if err != nil {
				return fmt.Errorf("plancheck: churn claim: %w", err)
			}
			if len(got) == 0 {
				return fmt.Errorf("plancheck: churn: %d enqueued items not claimable", left)
			}
			for _, it := range got {
				if _, err := qu.Complete(ctx, it.Lease); err != nil {
					return fmt.Errorf("plancheck: churn complete: %w", err)
				}
			}
			left -= len(got)
		}
		done += batch
	}
	fmt.Fprintf(progress, "plancheck: churned %d items through the claim path in %s\n", items, time.Since(started).Round(time.Millisecond))
	return nil
}

var execTime = regexp.MustCompile(`(?:^|, )time:([0-9.]+(?:ns|µs|us|ms|s))`)

// ExecTime is the execution time TiDB reports for the plan's root operator.
func ExecTime(ops []Operator) (time.Duration, bool) {
	if len(ops) == 0 {
		return 0, false
	}
	m := execTime.FindStringSubmatch(ops[0].ExecInfo)
	if m == nil {
		return 0, false
	}
	d, err := time.ParseDuration(m[1])
	return d, err == nil
}

// medianTime explains stmt runs times and returns the median execution time.
func medianTime(ctx context.Context, db *sql.DB, stmt string, args map[string]any, runs int) (time.Duration, error) {
	var ds []time.Duration
	for range runs {
		o, err := Explain(ctx, db, stmt, args)
		if err != nil {
			return 0, err
		}
		d, ok := ExecTime(o.Ops)
		if !ok {
			return 0, fmt.Errorf("no execution time in the plan's root operator")
		}
		ds = append(ds, d)
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// judgeChurn compares a hot case's time on the churned fixture with the fresh one.
func judgeChurn(c Case, fresh, churned time.Duration) []string {
	ratio := DefaultChurnRatio
	if c.ChurnRatio > 0 {
		ratio = c.ChurnRatio
	}
	if churned < churnNoiseFloor || float64(churned) <= ratio*float64(fresh) || c.ChurnAllow != "" {
		return nil
	}
	return []string{fmt.Sprintf("%s: %.1fx slower on the churned fixture (%s) than fresh (%s), over its ratio of %.1f: its range starts before the MVCC delete markers the claim path leaves",
		c.Query, float64(churned)/float64(fresh), churned.Round(10*time.Microsecond), fresh.Round(10*time.Microsecond), ratio)}
}
