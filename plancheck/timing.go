package plancheck

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"slices"
	"time"
)

// Timing defaults. On the embedded engine (unistore) rows read stay capped
// by 64-entry batches while time grows with every live entry of a range, so
// a hot statement is also timed: rows cannot hide a range that grows.
const (
	// DefaultTimeRatio bounds how much slower a hot case may run at the
	// largest fixture than at the smallest when its case states no ratio.
	DefaultTimeRatio = 3.0
	// DefaultChurnRatio bounds how much slower a hot case may run on the
	// churned fixture than on the fresh one when its case states no ratio.
	DefaultChurnRatio = 3.0
	// TimeFloor: medians below it are noise on a shared 2-core machine and
	// pass every time rule.
	TimeFloor = 2 * time.Millisecond
	// DefaultRuns is how many timed runs a median takes (after one
	// warm-up run that is not counted).
	DefaultRuns = 5
)

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

// MedianTime explains a bound statement (see Bind) runs times after one
// warm-up run and returns the median execution time TiDB reports.
func MedianTime(ctx context.Context, db *sql.DB, query string, args []any, runs int) (time.Duration, error) {
	if runs < 1 {
		runs = DefaultRuns
	}
	var ds []time.Duration
	for i := range runs + 1 {
		o, err := explainBound(ctx, db, query, args)
		if err != nil {
			return 0, err
		}
		d, ok := ExecTime(o.Ops)
		if !ok {
			return 0, fmt.Errorf("no execution time in the plan's root operator")
		}
		if i > 0 { // the first run warms caches and plans
			ds = append(ds, d)
		}
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

// interleavedMedians times two sides alternately (one warm-up round, then
// runs rounds) and stores each side's median in medians.
func interleavedMedians(runs int, time1 func(side int) (time.Duration, error), medians *[2]time.Duration) error {
	if runs < 1 {
		runs = DefaultRuns
	}
	var ds [2][]time.Duration
	for i := range runs + 1 {
		for side := range 2 {
			d, err := time1(side)
			if err != nil {
				return err
			}
			if i > 0 {
				ds[side] = append(ds[side], d)
			}
		}
	}
	for side := range 2 {
		slices.Sort(ds[side])
		medians[side] = ds[side][len(ds[side])/2]
	}
	return nil
}

// overRatio reports whether slow is over ratio × fast, noise-aware: a slow
// median under TimeFloor never is.
func overRatio(fast, slow time.Duration, ratio float64) bool {
	return slow >= TimeFloor && float64(slow) > ratio*float64(fast)
}

// judgeTime compares a hot case's median at the largest fixture with the
// smallest one's.
func judgeTime(c Case, small, large Observation) []string {
	ratio := c.TimeRatio
	if ratio <= 0 {
		ratio = DefaultTimeRatio
	}
	if c.TimeAllow != "" || !overRatio(small.Median, large.Median, ratio) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %.1fx slower at %s (%s) than at %s (%s), over its ratio of %.1f: rows read can stay capped by the engine's 64-entry batches while its range grows with the backlog (%s)",
		c.Name(), float64(large.Median)/float64(small.Median), large.Fixture, round(large.Median), small.Fixture, round(small.Median), ratio, Brief(large.Ops))}
}

// judgeChurn compares a hot case's time on the churned fixture with the fresh one.
func judgeChurn(c Case, fresh, churned time.Duration) []string {
	ratio := c.ChurnRatio
	if ratio <= 0 {
		ratio = DefaultChurnRatio
	}
	if c.ChurnAllow != "" || !overRatio(fresh, churned, ratio) {
		return nil
	}
	return []string{fmt.Sprintf("%s: %.1fx slower on the churned fixture (%s) than fresh (%s), over its ratio of %.1f: its range starts before the MVCC delete markers the claim path leaves",
		c.Name(), float64(churned)/float64(fresh), round(churned), round(fresh), ratio)}
}

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
