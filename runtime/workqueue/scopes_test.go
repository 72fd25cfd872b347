package workqueue_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// TestScopeMarksOfAPrefixPageAndMove: a prefix's marks span more than one
// statement's page, leave out the neighbours of its key range (the prefix
// itself without its last byte's successor, the next prefix, an id with a
// trailing space), and move on an enqueue; ScopeLive tells live work from
// none and names a missing scope.
func TestScopeMarksOfAPrefixPageAndMove(t *testing.T) {
	t.Parallel()
	f := newFixture(t, workqueue.Config{})
	const n = workqueue.MaxScopesPerStatement + 5
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("org/%05d", i))
	}
	for _, s := range append(ids, "org", "org0", "org ", "orf/1") {
		if err := f.qu.EnsureScope(f.ctx, s, 1); err != nil {
			t.Fatal(err)
		}
	}
	marks, err := f.qu.ScopeMarksWithPrefix(f.ctx, "org/")
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != n || marks[0].Scope != ids[0] || marks[n-1].Scope != ids[n-1] {
		t.Fatalf("%d marks from %q to %q, want the %d scopes of the prefix", len(marks), marks[0].Scope, marks[len(marks)-1].Scope, n)
	}
	listed, err := f.qu.ScopeMarks(f.ctx, append([]string{"org/missing"}, ids...))
	if err != nil || len(listed) != n {
		t.Fatalf("listed marks: %d (%v), want %d: the missing scope left out", len(listed), err, n)
	}
	target := ids[n-1]
	before, live, err := f.qu.ScopeLive(f.ctx, target)
	if err != nil || live {
		t.Fatalf("live %t (%v) before any enqueue", live, err)
	}
	if _, err := f.qu.Enqueue(f.ctx, target, []workqueue.Event{{IdempotencyKey: "k", RouteID: "r", RouteVersion: 1, EventKind: "k",
		SourceKind: "s", SourceID: "1", Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "deliver"}}}}); err != nil {
		t.Fatal(err)
	}
	after, live, err := f.qu.ScopeLive(f.ctx, target)
	if err != nil || !live || after.Equal(before) {
		t.Fatalf("after an enqueue: live %t, mark %+v (before %+v), err %v; want live and a moved mark", live, after, before, err)
	}
	if _, _, err := f.qu.ScopeLive(f.ctx, "org/missing"); !errors.Is(err, workqueue.ErrUnknownScope) {
		t.Fatalf("missing scope: %v", err)
	}
	if _, err := f.qu.ScopeMarksWithPrefix(f.ctx, "org/\x7f"); !errors.Is(err, workqueue.ErrInvalid) {
		t.Fatalf("a prefix outside printable ASCII: %v", err)
	}
	all, err := f.qu.ScopeMarksWithPrefix(f.ctx, "")
	if err != nil || len(all) != n+5 { // the fixture's scope, the prefix's and the four neighbours
		t.Fatalf("every scope: %d (%v), want %d", len(all), err, n+5)
	}
}
