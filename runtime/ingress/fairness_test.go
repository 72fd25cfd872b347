package ingress_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ingress"
)

// fairnessRun is what one run of the SC400 shape measured.
type fairnessRun struct {
	interactive []time.Duration // accepted -> materialized, per interactive receipt
	bulkDrain   time.Duration   // first acceptance -> last bulk receipt materialized
	// bulkTxWaited is, per interactive receipt, how many bulk
	// materializing transactions committed while it waited; bulkTxAhead
	// how many of them committed after both its acceptance and the
	// interactive transaction before its own: the bulk work that delayed
	// it beyond the interactive work ahead of it.
	bulkTxWaited, bulkTxAhead []int
	accepting                 time.Duration
}

// runSC400 accepts seed 004's SC400 shape, 400 bulk receipts of 10 events
// each and 400 interactive receipts of one event, and reads back, on the
// database clock, when each receipt materialized. live: from two clients
// at once into a router already running; otherwise as a backlog (the bulk
// burst first, then the interactive receipts) that a router starting
// afterwards drains: SC400's shape, a burst ahead of the actions.
func runSC400(t *testing.T, live bool, bulkClass, interactiveClass string, classes []string) fairnessRun {
	f := newFixture(t)
	// BatchTime also bounds how long a later class's transaction is held
	// back (priority.maxHold): the default 2s is a window a loaded machine
	// overruns, letting a second bulk transaction through for a reason
	// that is not the router's. A minute is only a guard against a hang;
	// the routes here take microseconds, so batches stay bounded by size.
	r := f.router(ingress.RouterConfig{Classes: classes, Backstop: time.Hour, BatchTime: time.Minute})
	if live {
		f.run(r)
	}
	const receipts, bulkEvents = 400, 10
	start := make(chan struct{})
	var wg sync.WaitGroup
	accept := func(prefix, class string, events int) {
		defer wg.Done()
		<-start
		for i := range receipts {
			facts := make([]string, events)
			for k := range facts {
				facts[k] = fmt.Sprintf("%s-%d-%d", prefix, i, k)
			}
			if _, err := f.in.Accept(f.ctx, delivery(fmt.Sprintf("%s-%d", prefix, i), class, facts...)); err != nil {
				t.Errorf("accept %s %d: %v", prefix, i, err)
				return
			}
		}
	}
	began := time.Now()
	close(start)
	if live {
		wg.Add(2)
		go accept("bulk", bulkClass, bulkEvents)
		go accept("action", interactiveClass, 1)
	} else {
		wg.Add(2)
		accept("bulk", bulkClass, bulkEvents)
		accept("action", interactiveClass, 1)
	}
	wg.Wait()
	accepting := time.Since(began)
	if !live {
		f.run(r)
	}

	waitfor.Until(t, 5*time.Minute, func() (bool, error) {
		return f.count("SELECT COUNT(*) FROM ingress_receipt WHERE router_status = 'materialized'") >= 2*receipts, nil
	}, func() string { return fmt.Sprintf("not materialized: %+v", r.Stats()) })
	if n := f.count("SELECT COUNT(*) FROM event"); n != receipts*(bulkEvents+1) {
		t.Fatalf("%d events, want %d", n, receipts*(bulkEvents+1))
	}

	rows, err := f.db.QueryContext(f.ctx, "SELECT delivery_id, accepted_at, materialized_at FROM ingress_receipt")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type span struct{ accepted, materialized time.Time }
	var bulk, actions []span
	for rows.Next() {
		var id string
		var s span
		if err := rows.Scan(&id, &s.accepted, &s.materialized); err != nil {
			t.Fatal(err)
		}
		if id[:4] == "bulk" {
			bulk = append(bulk, s)
		} else {
			actions = append(actions, s)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var out fairnessRun
	out.accepting = accepting
	first, lastBulk := bulk[0].accepted, bulk[0].materialized
	bulkCommits := map[time.Time]bool{} // one materialized_at per transaction (its marking statement's NOW(6))
	for _, s := range append(slices.Clone(bulk), actions...) {
		if s.accepted.Before(first) {
			first = s.accepted
		}
	}
	for _, s := range bulk {
		bulkCommits[s.materialized] = true
		if s.materialized.After(lastBulk) {
			lastBulk = s.materialized
		}
	}
	out.bulkDrain = lastBulk.Sub(first)
	for _, s := range actions {
		out.interactive = append(out.interactive, s.materialized.Sub(s.accepted))
		from := s.accepted
		for _, o := range actions {
			if o.materialized.Before(s.materialized) && o.materialized.After(from) {
				from = o.materialized
			}
		}
		waited, ahead := 0, 0
		for c := range bulkCommits {
			if c.After(s.accepted) && c.Before(s.materialized) {
				waited++
			}
			if c.After(from) && c.Before(s.materialized) {
				ahead++
			}
		}
		out.bulkTxWaited = append(out.bulkTxWaited, waited)
		out.bulkTxAhead = append(out.bulkTxAhead, ahead)
	}
	slices.Sort(out.interactive)
	slices.Sort(out.bulkTxWaited)
	slices.Sort(out.bulkTxAhead)
	t.Logf("router stats: %+v", r.Stats())
	return out
}

func pct(d []time.Duration, p float64) time.Duration {
	return d[min(len(d)-1, int(float64(len(d))*p))].Round(time.Millisecond)
}

// TestReceiptFairness: seed 004's SC400 shape (its baseline on a remote
// cluster: interactive receipt-to-event p50 787 s, max 841 s, behind one
// ordered router's bulk transaction). With interactive and bulk traffic in
// their own route classes, interactive first, an interactive receipt waits
// for the interactive work ahead of it and for at most the one bulk
// transaction in flight (two with slack), however large the bulk backlog:
// accepted live beside a running router, or as a backlog with the whole
// bulk burst ahead of it. The same workloads in one class (a FIFO router,
// batches still bounded) run beside it for the ratio.
func TestReceiptFairness(t *testing.T) {
	t.Parallel()
	for _, live := range []bool{true, false} {
		name := map[bool]string{true: "live", false: "backlog"}[live]
		t.Run(name, func(t *testing.T) {
			classed := runSC400(t, live, "bulk", "interactive", []string{"interactive", "bulk"})
			fifo := runSC400(t, live, ingress.DefaultClass, ingress.DefaultClass, nil)
			for _, run := range []struct {
				name string
				r    fairnessRun
			}{{"classes", classed}, {"one class", fifo}} {
				r := run.r
				t.Logf("%s, %-9s interactive receipt -> events: p50 %s, p95 %s, max %s; bulk transactions committed while one waited: p50 %d, max %d (beyond the interactive work ahead of it: max %d); bulk drain %s (accepting took %s)",
					name, run.name, pct(r.interactive, 0.5), pct(r.interactive, 0.95), pct(r.interactive, 1),
					r.bulkTxWaited[len(r.bulkTxWaited)/2], r.bulkTxWaited[len(r.bulkTxWaited)-1], r.bulkTxAhead[len(r.bulkTxAhead)-1],
					r.bulkDrain.Round(time.Millisecond), r.accepting.Round(time.Millisecond))
			}
			t.Logf("%s: interactive max ratio one class / classes: %.1f", name, float64(pct(fifo.interactive, 1))/float64(pct(classed.interactive, 1)))
			// One bulk transaction in flight when the interactive one was
			// ready; a second that passed its hold while the interactive
			// loop was still claiming (a loop is in its turn, holding later
			// classes back, from the end of its claim on).
			if worst := classed.bulkTxAhead[len(classed.bulkTxAhead)-1]; worst > 2 {
				t.Fatalf("an interactive receipt waited for %d bulk transactions beyond the interactive work ahead of it, want at most 2", worst)
			}
		})
	}
}
