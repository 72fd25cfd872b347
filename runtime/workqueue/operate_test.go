package workqueue_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// announcements counts the Queue's announcements of scope.
func (f *fixture) announcements() func() int {
	var mu sync.Mutex
	n := 0
	stop := f.qu.OnAnnounce(func(a workqueue.Announcement) {
		if a.Scope == scope {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	f.t.Cleanup(stop)
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// Retry-now makes a delayed item due, keeps its attempts, is announced,
// and refuses every item it does not apply to, writing nothing.
func TestRetryNow(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	announced := f.announcements()
	delayed := f.one(workqueue.Work{Delay: time.Hour})
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v before retry-now; the item is an hour away", ids(got))
	}
	before := announced()
	if err := f.qu.RetryNow(f.ctx, scope, delayed); err != nil {
		t.Fatalf("retry now: %v", err)
	}
	if announced() != before+1 {
		t.Fatalf("retry-now was not announced")
	}
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != delayed || got[0].Attempt != 1 {
		t.Fatalf("claimed %+v after retry-now, want item %d at attempt 1", got, delayed)
	}
	// A retry in backoff: attempts are kept.
	if _, err := f.qu.Retry(f.ctx, got[0], workqueue.Failure{Class: "flaky", Summary: "try later"}); err != nil {
		t.Fatal(err)
	}
	if err := f.qu.RetryNow(f.ctx, scope, delayed); err != nil {
		t.Fatalf("retry now of a retrying item: %v", err)
	}
	got = f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != delayed || got[0].Attempt != 2 {
		t.Fatalf("claimed %+v after the second retry-now, want item %d at attempt 2", got, delayed)
	}

	due := f.one(workqueue.Work{})
	for _, tc := range []struct {
		name  string
		scope string
		id    int64
	}{
		{"processing", scope, delayed},
		{"already due", scope, due},
		{"another scope's item", "tenant-b/pack-1", due},
		{"no such item", scope, 42},
	} {
		wrote := announced()
		if err := f.qu.RetryNow(f.ctx, tc.scope, tc.id); !errors.Is(err, workqueue.ErrRefused) {
			t.Errorf("%s: retry now = %v, want ErrRefused", tc.name, err)
		}
		if announced() != wrote {
			t.Errorf("%s: a refused retry-now was announced", tc.name)
		}
	}
	f.complete(got[0])
	if err := f.qu.RetryNow(f.ctx, scope, delayed); !errors.Is(err, workqueue.ErrRefused) {
		t.Errorf("retry now of a completed item = %v, want ErrRefused", err)
	}
}

// Skipping a lane head hands the lane to its follower in the same
// transaction; skipping a follower in the middle of a lane promotes
// nothing while the head runs, and the follower behind it runs right after
// the head; a processing or terminal item is refused.
func TestSkipUnclaimed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	announced := f.announcements()
	lane := workqueue.Work{SourceLane: "acct-7 "} // a trailing space is part of the key
	head, middle, last := f.one(lane), f.one(lane), f.one(lane)
	other := f.one(workqueue.Work{SourceLane: "acct-7"})

	// Skip the head: the middle item is promoted in the same transaction.
	before := announced()
	fin, err := f.qu.SkipUnclaimed(f.ctx, scope, head, "bad data")
	if err != nil {
		t.Fatalf("skip head: %v", err)
	}
	if fin.Promoted != 1 || f.state(head) != workqueue.StateSkipped || f.state(middle) != workqueue.StatePending {
		t.Fatalf("after skipping the head: promoted %d, head %s, middle %s; want 1, skipped, pending", fin.Promoted, f.state(head), f.state(middle))
	}
	if announced() != before+1 {
		t.Fatalf("a skip that promoted was not announced")
	}
	var class, summary string
	if err := f.db.QueryRow("SELECT failure_class, failure_summary FROM work_item WHERE work_id = ?", head).Scan(&class, &summary); err != nil {
		t.Fatal(err)
	}
	if class != workqueue.FailureSkippedByOperator || summary != "skipped by an operator: bad data" {
		t.Fatalf("skipped row records %q / %q", class, summary)
	}

	// The middle item runs; skipping the last (blocked behind it) promotes
	// nothing, and the last never runs.
	got := f.claim(c, workqueue.ClaimRequest{})
	if !sameIDs(ids(got), []int64{middle, other}) {
		t.Fatalf("claimed %v, want the new head %d and the other lane's %d", ids(got), middle, other)
	}
	if _, err := f.qu.SkipUnclaimed(f.ctx, scope, middle, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("skip of a processing item = %v, want ErrRefused", err)
	}
	fin, err = f.qu.SkipUnclaimed(f.ctx, scope, last, "")
	if err != nil || fin.Promoted != 0 {
		t.Fatalf("skip of a blocked follower = %+v, %v; want nothing promoted", fin, err)
	}
	if _, err := f.qu.SkipUnclaimed(f.ctx, scope, last, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("second skip = %v, want ErrRefused", err)
	}
	if _, err := f.qu.SkipUnclaimed(f.ctx, "tenant-b/pack-1", other, ""); !errors.Is(err, workqueue.ErrRefused) {
		t.Fatalf("skip from another scope = %v, want ErrRefused", err)
	}
	for _, it := range got {
		f.complete(it)
	}
	if got := f.claim(c, workqueue.ClaimRequest{}); len(got) != 0 {
		t.Fatalf("claimed %v; the skipped items must never run", ids(got))
	}
}

// A skipped follower in the middle of a lane hands over to the next one
// only once the head finishes: the next follower is not promoted past a
// live head (the promotion checks both lanes of the follower, not only the
// one it was found through).
func TestSkipInTheMiddleKeepsTheLaneOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	lane := workqueue.Work{SourceLane: "s", TargetLane: "t"}
	head, middle := f.one(lane), f.one(lane)
	behind := f.one(workqueue.Work{SourceLane: "s"})
	fin, err := f.qu.SkipUnclaimed(f.ctx, scope, middle, "")
	if err != nil || fin.Promoted != 0 {
		t.Fatalf("skip middle = %+v, %v; want nothing promoted while %d heads the lane", fin, err, head)
	}
	if s := f.state(behind); s != workqueue.StateBlocked {
		t.Fatalf("the item behind the skipped one is %s while the head is live, want blocked", s)
	}
	got := f.claim(c, workqueue.ClaimRequest{})
	if len(got) != 1 || got[0].WorkID != head {
		t.Fatalf("claimed %v, want only the head %d", ids(got), head)
	}
	if fin := f.complete(got[0]); fin.Promoted != 1 {
		t.Fatalf("the head's finish promoted %d, want the item behind the skipped one", fin.Promoted)
	}
	if s := f.state(behind); s != workqueue.StatePending {
		t.Fatalf("after the head finished the item behind is %s, want pending", s)
	}
}

// A paused class is neither claimed nor reclaimed, by this process or any
// other, other classes still run, the pause outlives the Queue that set it,
// and a resume is announced and claimed at once.
func TestPauseClass(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	c := f.claimer("w1")
	announced := f.announcements()
	leased := f.one(workqueue.Work{QueueClass: "bulk"})
	waiting := f.one(workqueue.Work{QueueClass: "bulk"})
	other := f.one(workqueue.Work{QueueClass: "interactive"})
	got := f.claim(c, workqueue.ClaimRequest{QueueClasses: []string{"bulk"}, Max: 1})
	if len(got) != 1 || got[0].WorkID != leased {
		t.Fatalf("claimed %v, want %d", ids(got), leased)
	}
	f.expireLease(leased)

	if err := f.qu.PauseClass(f.ctx, scope, "bulk"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := f.qu.PauseClass(f.ctx, scope, "bulk"); err != nil {
		t.Fatalf("pause again: %v", err)
	}
	if err := f.qu.PauseClass(f.ctx, scope, "bad class"); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("pause of a class with a space = %v, want ErrInvalid", err)
	}
	if err := f.qu.PauseClass(f.ctx, "tenant-none", "bulk"); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("pause in an unknown scope = %v, want ErrUnknownScope", err)
	}
	// Another process's claimer (a fresh one reads the durable pause).
	c2 := f.claimer("w2")
	for _, cl := range []*workqueue.Claimer{c, c2} {
		cl.NoteDue() // look for expired leases too
		got := f.claim(cl, workqueue.ClaimRequest{})
		if len(got) != 1 || got[0].WorkID != other {
			t.Fatalf("claimed %v with bulk paused, want only the interactive item %d", ids(got), other)
		}
		f.complete(got[0])
		other = f.one(workqueue.Work{QueueClass: "interactive"})
	}
	paused, err := f.qu.PausedClasses(f.ctx, scope)
	if err != nil || len(paused) != 1 || paused[0] != "bulk" {
		t.Fatalf("paused classes = %v, %v; want [bulk]", paused, err)
	}

	before := announced()
	if err := f.qu.ResumeClass(f.ctx, scope, "bulk"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if announced() != before+1 {
		t.Fatalf("resume was not announced")
	}
	c.NoteDue()
	got = f.claim(c, workqueue.ClaimRequest{})
	if !sameIDs(ids(got), []int64{leased, waiting, other}) {
		t.Fatalf("claimed %v after resume, want the expired lease %d, the waiting bulk item %d and %d", ids(got), leased, waiting, other)
	}
	before = announced()
	if err := f.qu.ResumeClass(f.ctx, scope, "bulk"); err != nil {
		t.Fatalf("second resume: %v", err)
	}
	if announced() != before {
		t.Fatalf("a resume that changed nothing was announced")
	}
	if paused, err := f.qu.PausedClasses(f.ctx, scope); err != nil || len(paused) != 0 {
		t.Fatalf("paused classes after resume = %v, %v; want none", paused, err)
	}
}

// Two operators pausing two classes at once both land: the list is
// rewritten under the scope row's lock.
func TestConcurrentPausesBothLand(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	classes := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var wg sync.WaitGroup
	errs := make(chan error, len(classes))
	for _, class := range classes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.qu.PauseClass(f.ctx, scope, class)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("pause: %v", err)
		}
	}
	paused, err := f.qu.PausedClasses(f.ctx, scope)
	if err != nil || len(paused) != len(classes) {
		t.Fatalf("paused = %v, %v; want all of %v", paused, err, classes)
	}
}

// sameIDs reports whether a and b hold the same ids in any order.
func sameIDs(a, b []int64) bool { return slices.Equal(sorted(a), sorted(b)) }
