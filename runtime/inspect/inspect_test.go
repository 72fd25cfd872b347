package inspect_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

const scope = "tenant-a/pack-1"

type env struct {
	t   *testing.T
	ctx context.Context
	db  *sql.DB
	qu  *workqueue.Queue
	r   *inspect.Reader
	cl  *workqueue.Claimer

	events int // events enqueued by enqueue, for their idempotency keys
}

func newEnv(t *testing.T) *env {
	t.Helper()
	qu, db, _ := queuetest.New(t, workqueue.Config{}, scope)
	r, err := inspect.New(db)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := qu.NewClaimer(scope, "inspect-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: context.Background(), db: db, qu: qu, r: r, cl: cl}
}

// killAll claims everything due and fails it for good, the failure class
// chosen by class(work type, source id).
func (e *env) killAll(class func(workType, sourceID string) string) {
	e.t.Helper()
	for {
		got, _, err := e.cl.Claim(e.ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"deliver", "notify"}, Max: 16})
		if err != nil {
			e.t.Fatal(err)
		}
		if len(got) == 0 {
			return
		}
		for _, c := range got {
			f := workqueue.Failure{Class: class(c.WorkType, c.Event.SourceID), Summary: "failed " + c.Event.SourceID}
			if _, err := e.qu.Fail(e.ctx, c, f, workqueue.ErrPermanent); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// all follows a query's cursors to the end.
func (e *env) all(q inspect.DeadLetterQuery) ([]inspect.DeadLetter, int) {
	e.t.Helper()
	var out []inspect.DeadLetter
	pages := 0
	for {
		p, err := e.r.DeadLetters(e.ctx, scope, q)
		if err != nil {
			e.t.Fatal(err)
		}
		pages++
		if p.Scanned > max(q.Limit, inspect.DefaultPageSize) {
			e.t.Fatalf("a page scanned %d entries, limit %d", p.Scanned, q.Limit)
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out, pages
		}
		q.Cursor = p.Next
	}
}

func ids(ds []inspect.DeadLetter) []int64 {
	out := make([]int64, len(ds))
	for i, d := range ds {
		out[i] = d.WorkID
	}
	return out
}

// Dead letters page newest first through cursors, every one exactly once,
// with their event context and sanitized failure; filters and time ranges
// select exactly the matching ones, however few a page holds; a replayed
// item shows its history.
func TestDeadLettersAndItemHistory(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var events []workqueue.Event
	for i := range 30 {
		wt := "deliver"
		if i%3 == 0 {
			wt = "notify"
		}
		key := fmt.Sprintf("fact-%02d", i)
		events = append(events, workqueue.Event{
			IdempotencyKey: key, RouteID: "crm", RouteVersion: 2, EventKind: "changed", SourceKind: "object", SourceID: key,
			Payload: []byte("secret payload " + key), Work: []workqueue.Work{{WorkType: wt}},
		})
	}
	// Three enqueues, so dead times differ between batches and tie within.
	for i := 0; i < 30; i += 10 {
		if _, err := e.qu.Enqueue(e.ctx, scope, events[i:i+10]); err != nil {
			t.Fatal(err)
		}
	}
	classOf := func(_, source string) string {
		if strings.HasSuffix(source, "5") || strings.HasSuffix(source, "0") {
			return "timeout"
		}
		return "broken"
	}
	e.killAll(classOf)

	everything, pages := e.all(inspect.DeadLetterQuery{Limit: 7})
	if len(everything) != 30 || pages != 5 {
		t.Fatalf("%d dead letters in %d pages, want 30 in 5", len(everything), pages)
	}
	seen := map[int64]bool{}
	for i, d := range everything {
		if seen[d.WorkID] {
			t.Fatalf("work item %d listed twice", d.WorkID)
		}
		seen[d.WorkID] = true
		if i > 0 {
			prev := everything[i-1]
			if d.DeadAt.After(prev.DeadAt) || (d.DeadAt.Equal(prev.DeadAt) && d.WorkID > prev.WorkID) {
				t.Fatalf("not newest first at %d: %v/%d after %v/%d", i, d.DeadAt, d.WorkID, prev.DeadAt, prev.WorkID)
			}
		}
		if d.Failure.Class != classOf(d.WorkType, d.Event.SourceID) || d.Failure.Summary != "failed "+d.Event.SourceID ||
			d.Event.RouteID != "crm" || d.Event.RouteVersion != 2 || d.Event.IdempotencyKey != d.Event.SourceID || d.Attempts != 1 {
			t.Fatalf("dead letter %+v", d)
		}
		if strings.Contains(fmt.Sprintf("%+v", d), "secret payload") {
			t.Fatalf("a dead letter carries the payload: %+v", d)
		}
	}

	// Filters: brute force over the full list.
	for _, q := range []inspect.DeadLetterQuery{
		{WorkType: "notify", Limit: 4},
		{FailureClass: "timeout", Limit: 5},
		{WorkType: "deliver", FailureClass: "timeout", Limit: 3},
		{WorkType: "no-such-type", Limit: 8},
		{FailureClass: "timeout", To: everything[9].DeadAt, Limit: 4},
		{From: everything[20].DeadAt, To: everything[4].DeadAt.Add(time.Microsecond), Limit: 6},
	} {
		var want []int64
		for _, d := range everything {
			if (q.WorkType == "" || d.WorkType == q.WorkType) && (q.FailureClass == "" || d.Failure.Class == q.FailureClass) &&
				(q.From.IsZero() || !d.DeadAt.Before(q.From)) && (q.To.IsZero() || d.DeadAt.Before(q.To)) {
				want = append(want, d.WorkID)
			}
		}
		got, _ := e.all(q)
		if !slices.Equal(ids(got), want) {
			t.Fatalf("query %+v: got %v, want %v", q, ids(got), want)
		}
	}

	// Replay the newest dead letter: its history is two generations.
	parent := everything[0]
	child, err := e.qu.Replay(e.ctx, scope, parent.WorkID)
	if err != nil {
		t.Fatal(err)
	}
	it, err := e.r.Item(e.ctx, child.WorkID)
	if err != nil {
		t.Fatal(err)
	}
	if it.ReplayOf != parent.WorkID || it.ReplayDepth != 1 || it.State != "pending" || it.Stale || it.Failure != nil ||
		it.Event.SourceID != parent.Event.SourceID || it.Scope != scope || it.At.IsZero() {
		t.Fatalf("replay child %+v", it)
	}
	if len(it.History) != 2 || it.History[0].WorkID != parent.WorkID || it.History[0].State != "dead" ||
		it.History[0].ReplayedAt.IsZero() || it.History[0].Failure == nil || it.History[1].WorkID != child.WorkID {
		t.Fatalf("history %+v", it.History)
	}
	// A Reader on the Queue's own statements reads the same item.
	shared, err := inspect.NewFromQueue(e.qu).Item(e.ctx, child.WorkID)
	if err != nil || shared.WorkID != it.WorkID || shared.State != it.State || len(shared.History) != len(it.History) {
		t.Fatalf("NewFromQueue's Item: %+v, %v; want %+v", shared, err, it)
	}
	again, _ := e.all(inspect.DeadLetterQuery{})
	if len(again) != 30 || again[0].WorkID != parent.WorkID || !again[0].Replayed || again[1].Replayed {
		t.Fatalf("after the replay: %d dead letters, newest %+v", len(again), again[0])
	}
}

// A dead letter of a delivery names the delivery it came from.
func TestDeadLetterFromAReceipt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	in, err := ingress.New(e.db, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.Accept(e.ctx, ingress.Delivery{
		Scope: scope, DeliveryID: "dlv-42", Method: "POST", RouteKey: "/hooks/crm", ContentType: "text/plain",
		EventKind: "changed", CorrelationID: "corr-42", Body: []byte("body with a secret"),
	}); err != nil {
		t.Fatal(err)
	}
	router, err := in.NewRouter(e.qu, ingress.RouterConfig{Scope: scope, Route: func(_ context.Context, c ingress.Claimed) ([]workqueue.Event, error) {
		return []workqueue.Event{{
			RouteID: "crm", RouteVersion: 1, EventKind: c.EventKind, SourceKind: "object", SourceID: "o-1",
			Payload: c.Body, Work: []workqueue.Work{{WorkType: "deliver"}},
		}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := router.Turn(e.ctx, ingress.DefaultClass); err != nil || n != 1 {
		t.Fatalf("router turn: %d receipts, %v", n, err)
	}
	e.killAll(func(string, string) string { return "rejected" })
	page, err := e.r.DeadLetters(e.ctx, scope, inspect.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 1 || page.Next != "" {
		t.Fatalf("page %+v", page)
	}
	d := page.Items[0]
	if d.Event.ReceiptID == 0 || d.Event.DeliveryID != "dlv-42" || d.Event.RouteKey != "/hooks/crm" || d.Event.CorrelationID != "corr-42" {
		t.Fatalf("receipt context %+v", d.Event)
	}
	if strings.Contains(fmt.Sprintf("%+v", page), "secret") {
		t.Fatalf("the page carries the body: %+v", page)
	}
	it, err := e.r.Item(e.ctx, d.WorkID)
	if err != nil {
		t.Fatal(err)
	}
	if it.Event != d.Event || it.State != "dead" || it.Failure == nil || it.Failure.Class != "rejected" || len(it.History) != 1 {
		t.Fatalf("item %+v", it)
	}
}

func TestBadArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, q := range []inspect.DeadLetterQuery{
		{Limit: -1}, {Limit: inspect.MaxPageSize + 1}, {Cursor: "not-a-cursor"}, {Cursor: "AAAAAAAAAAAAAAAAAAAAAA"},
		{From: time.Now(), To: time.Now().Add(-time.Hour)},
	} {
		if _, err := e.r.DeadLetters(e.ctx, scope, q); !errors.Is(err, inspect.ErrInvalid) {
			t.Fatalf("query %+v: %v, want ErrInvalid", q, err)
		}
	}
	if _, err := e.r.DeadLetters(e.ctx, "", inspect.DeadLetterQuery{}); !errors.Is(err, inspect.ErrInvalid) {
		t.Fatalf("empty scope: %v", err)
	}
	if _, err := e.r.DeadLetters(e.ctx, scope+" ", inspect.DeadLetterQuery{}); !errors.Is(err, inspect.ErrUnknownScope) {
		t.Fatalf("a scope with a trailing space: %v, want ErrUnknownScope", err)
	}
	if _, err := e.r.Item(e.ctx, 0); !errors.Is(err, inspect.ErrInvalid) {
		t.Fatalf("work id 0: %v", err)
	}
	if _, err := e.r.Item(e.ctx, 1<<60); !errors.Is(err, inspect.ErrNotFound) {
		t.Fatalf("a missing work id: %v, want ErrNotFound", err)
	}
}
