package workqueue_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// stressReps is how often TestConcurrentClaimsExactlyOnceInLaneOrder repeats;
// LANEQ_STRESS_REPS overrides it.
func stressReps(t *testing.T) int {
	if v := os.Getenv("LANEQ_STRESS_REPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("LANEQ_STRESS_REPS=%q: want a positive integer", v)
		}
		return n
	}
	return 20
}

// laneItem is the shape of one enqueued item of the stress workload.
type laneItem struct{ source, target string }

// stressWorkload spreads n items over shared source lanes, with every third
// item also in one of a few hot target lanes.
func stressWorkload(n int) []laneItem {
	items := make([]laneItem, n)
	for i := range items {
		items[i].source = fmt.Sprintf("src:%d", i%50)
		if i%3 == 0 {
			items[i].target = fmt.Sprintf("tgt:%d", i%10)
		}
	}
	return items
}

func enqueueWorkload(t *testing.T, ctx context.Context, qu *workqueue.Queue, scopeID string, items []laneItem) {
	t.Helper()
	const batch = 250
	for start := 0; start < len(items); start += batch {
		var events []workqueue.Event
		for i := start; i < min(start+batch, len(items)); i++ {
			events = append(events, workqueue.Event{
				IdempotencyKey: fmt.Sprintf("item-%d", i),
				Payload:        []byte(strconv.Itoa(i)),
				Work:           []workqueue.Work{{WorkType: "deliver", SourceLane: items[i].source, TargetLane: items[i].target}},
			})
		}
		if _, err := qu.Enqueue(ctx, scopeID, events); err != nil {
			t.Fatalf("enqueue: %v", err)
		}
	}
}

// laneLedger records executions and fails on any double execution, any two
// items of one lane running at once, or any lane running out of order.
type laneLedger struct {
	mu       sync.Mutex
	executed map[int64]int
	running  map[string]int64 // lane -> work id running in it
	last     map[string]int64 // lane -> last lane ordinal executed
	problems []string
}

func newLaneLedger() *laneLedger {
	return &laneLedger{executed: map[int64]int{}, running: map[string]int64{}, last: map[string]int64{}}
}

func (l *laneLedger) lanes(it laneItem) []string {
	out := []string{"s/" + it.source}
	if it.target != "" {
		out = append(out, "t/"+it.target)
	}
	return out
}

func (l *laneLedger) start(c workqueue.Claimed, it laneItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.executed[c.WorkID]++
	if l.executed[c.WorkID] > 1 {
		l.problems = append(l.problems, fmt.Sprintf("work %d executed %d times", c.WorkID, l.executed[c.WorkID]))
	}
	for _, lane := range l.lanes(it) {
		if other, busy := l.running[lane]; busy {
			l.problems = append(l.problems, fmt.Sprintf("lane %s: work %d started while %d runs", lane, c.WorkID, other))
		}
		if c.LaneOrdinal <= l.last[lane] {
			l.problems = append(l.problems, fmt.Sprintf("lane %s: ordinal %d ran after %d", lane, c.LaneOrdinal, l.last[lane]))
		}
		l.running[lane] = c.WorkID
		l.last[lane] = c.LaneOrdinal
	}
}

func (l *laneLedger) finish(it laneItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, lane := range l.lanes(it) {
		delete(l.running, lane)
	}
}

// TestConcurrentClaimsExactlyOnceInLaneOrder: 8 workers, each with its own
// connection pool, Queue and Claimer (as separate processes would have),
// drain 2,000 items from shared source and target lanes. Every item runs
// exactly once, no two items of a lane overlap, and lanes run in order.
// Repeated (default 20 times) so rare interleavings get their chance.
func TestConcurrentClaimsExactlyOnceInLaneOrder(t *testing.T) {
	t.Parallel()
	const workers, items = 8, 2000
	f := newFixture(t, workqueue.Config{})
	workload := stressWorkload(items)
	for rep := range stressReps(t) {
		scopeID := fmt.Sprintf("stress-%d", rep)
		if err := f.qu.EnsureScope(f.ctx, scopeID, 1); err != nil {
			t.Fatal(err)
		}
		enqueueWorkload(t, f.ctx, f.qu, scopeID, workload)
		itemOf := map[int64]laneItem{}
		rows, err := f.db.Query("SELECT w.work_id, CAST(e.payload AS CHAR) FROM work_item w JOIN event e ON e.event_id = w.event_id WHERE w.scope_id = ?", scopeID)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var idx string
			if err := rows.Scan(&id, &idx); err != nil {
				t.Fatal(err)
			}
			i, _ := strconv.Atoi(idx)
			itemOf[id] = workload[i]
		}
		rows.Close()

		ledger := newLaneLedger()
		var done atomic.Int64
		progress := make(chan struct{}, workers)
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		began := time.Now()
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- runStressWorker(f.ctx, f.dsn, scopeID, fmt.Sprintf("worker-%d", w), itemOf, ledger, &done, items, progress)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("rep %d: %v", rep, err)
			}
		}
		if len(ledger.problems) > 0 {
			t.Fatalf("rep %d: %d violations, first: %v", rep, len(ledger.problems), ledger.problems[:min(5, len(ledger.problems))])
		}
		var completed, attempts, notTerminal int
		if err := f.db.QueryRow(`SELECT
			COALESCE(SUM(state = 'completed'), 0), COALESCE(SUM(attempt_count), 0), COALESCE(SUM(state <> 'completed'), 0)
			FROM work_item WHERE scope_id = ?`, scopeID).Scan(&completed, &attempts, &notTerminal); err != nil {
			t.Fatal(err)
		}
		if completed != items || attempts != items || notTerminal != 0 || len(ledger.executed) != items {
			t.Fatalf("rep %d: completed %d, claims %d, left %d, executed %d; want %d each and 0 left", rep, completed, attempts, notTerminal, len(ledger.executed), items)
		}
		t.Logf("rep %d: %d items by %d workers in %s", rep, items, workers, time.Since(began).Round(time.Millisecond))
	}
}

func runStressWorker(ctx context.Context, dsn, scopeID, owner string, itemOf map[int64]laneItem, ledger *laneLedger,
	done *atomic.Int64, total int, progress chan struct{}) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		return err
	}
	// Another worker's promotions become claimable after this worker's
	// floor: no rescan is needed to find them.
	c, err := qu.NewClaimer(scopeID, owner, workqueue.ClaimerConfig{})
	if err != nil {
		return err
	}
	req := workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver"}, Max: 4}
	deadline := time.Now().Add(5 * time.Minute)
	for done.Load() < int64(total) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: gave up with %d of %d done", owner, done.Load(), total)
		}
		got, _, err := c.Claim(ctx, req)
		if err != nil {
			return err
		}
		if len(got) == 0 {
			// Idle: wait for another worker's completion (which may promote
			// a follower) or a short pause; correctness does not depend on it.
			select {
			case <-progress:
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		for _, cl := range got {
			it := itemOf[cl.WorkID]
			ledger.start(cl, it)
			ledger.finish(it) // the execution is the ledger check itself
			if _, err := qu.Complete(ctx, cl.Lease); err != nil {
				return fmt.Errorf("%s: complete %d: %w", owner, cl.WorkID, err)
			}
			done.Add(1)
			select {
			case progress <- struct{}{}:
			default:
			}
		}
	}
	return nil
}
