package workqueue_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// A backlog of registrations crashed workers left (issue 35): one pass
// settles them all, reading them from the front and then a span of wait
// times at a time, back to the front when a span runs dry, until a read
// from the front comes back short. Once they are settled, only a pass's
// first statement reads registrations; its pages over waiters
// (DependencyWaitingPage) read none.
func TestDependencySweepSettlesARegistrationBacklog(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	qu, counter := queuetest.Counted(t, f.dsn, workqueue.Config{})
	c := f.claimer("w")
	for i := range 5 {
		f.waiting(c, slotDep(fmt.Sprint("W", i)), workqueue.Work{})
	}
	// Two hours ago, 40 registrations within four seconds (more than a
	// read's worth in one span), then 34 an hour later, a second apart.
	dense := workqueue.RegistrationPage + 8
	var regs []int64
	for i := range dense + 34 {
		id := f.one(workqueue.Work{})
		offset := time.Duration(i) * 100 * time.Millisecond
		if i >= dense {
			offset = time.Hour + time.Duration(i)*time.Second
		}
		f.exec(`UPDATE work_item SET state = 'dependency_registration', dependency_wake_key = 'crash',
			dependency_keys = JSON_ARRAY(CONCAT('crash:', work_id)),
			run_after = DATE_ADD(DATE_SUB(NOW(6), INTERVAL 2 HOUR), INTERVAL ? MICROSECOND)
			WHERE work_id = ?`, offset.Microseconds(), id)
		regs = append(regs, id)
	}
	// One sweep with pages wider than the waiters (its first page ends the
	// waiters while registrations remain), one with pages of 4.
	wide, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{TimeBudget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	narrow, err := qu.NewDependencySweep(scope, workqueue.DependencySweepConfig{PageSize: 4, TimeBudget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pass := func(sweep *workqueue.DependencySweep) (workqueue.SweepStats, map[string]int64) {
		t.Helper()
		before := counter.ByStatement()
		st, err := sweep.Pass(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		sent := map[string]int64{}
		for name, n := range counter.ByStatement() {
			if d := n - before[name]; d > 0 && (name == "DependencySafetyPage" || name == "DependencyWaitingPage") {
				sent[name] = d
			}
		}
		return st, sent
	}
	// The front (32 of the dense ones) beside the 5 waiters; past the last
	// waiter, the span after the 32nd (the other 8); the span runs dry, so
	// the front again (32 of the later 34), the span after those (2), and
	// the front (none left).
	st, sent := pass(wide)
	if st.Settled != len(regs) || !st.Wrapped || sent["DependencySafetyPage"] != 5 || sent["DependencyWaitingPage"] != 0 {
		t.Fatalf("first pass: %+v, page statements %v; want the %d registrations settled in five reads", st, sent, len(regs))
	}
	for _, id := range regs {
		if s := f.facts(id).State; s != "waiting_dependency" {
			t.Fatalf("registration %d is %s after the passes", id, s)
		}
	}
	// Settled, a pass reads registrations once (none), beside its first page
	// of waiters; its other pages read waiters only.
	st, sent = pass(narrow)
	if st.Settled != 0 || st.Probed != 5+len(regs) || !st.Wrapped || sent["DependencySafetyPage"] != 1 || sent["DependencyWaitingPage"] == 0 {
		t.Fatalf("second pass: %+v, page statements %v; want one registration read (empty), then waiting pages, every waiter probed", st, sent)
	}
}
