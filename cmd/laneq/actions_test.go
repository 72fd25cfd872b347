package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/queuetest"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The write commands: each refuses without --yes (exit 4, nothing
// written), does its work with it, and refuses (exit 4, one line saying
// why) what the item's state no longer allows.
func TestWriteCommands(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, scope)
	ctx := context.Background()
	res, err := qu.Enqueue(ctx, scope, []workqueue.Event{{IdempotencyKey: "e1", RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: "1",
		Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: "later", Delay: time.Hour}, {WorkType: "lane", SourceLane: "acct-1"}, {WorkType: "lane2", SourceLane: "acct-1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	later, head, follower := res[0].Work[0].WorkID, res[0].Work[1].WorkID, res[0].Work[2].WorkID
	dead := queuetest.Dead(t, qu, scope, "sync", "rejected", 7)
	state := func(id int64) string { t.Helper(); return queuetest.Item(t, db, id).State }
	id := func(v int64) string { return fmt.Sprint(v) }

	// retry-now
	laneq(t, dsn, "item", "retry-now", "--scope", scope, "--work-id", id(later)).oneLine(t, 4, "pass --yes")
	laneq(t, dsn, "item", "retry-now", "--scope", scope, "--work-id", id(later), "--yes").want(t, 0)
	laneq(t, dsn, "item", "retry-now", "--scope", scope, "--work-id", id(later), "--yes").oneLine(t, 4, "pending and already due")
	laneq(t, dsn, "item", "retry-now", "--scope", scope, "--yes").oneLine(t, 2, "missing --work-id")

	// skip hands the lane over
	laneq(t, dsn, "item", "skip", "--scope", scope, "--work-id", id(head)).oneLine(t, 4, "pass --yes")
	if state(head) != workqueue.StatePending {
		t.Fatal("a skip without --yes wrote")
	}
	out := laneq(t, dsn, "item", "skip", "--scope", scope, "--work-id", id(head), "--reason", "bad data", "--yes").want(t, 0).stdout
	if !strings.Contains(out, "1 lane follower(s) now claimable") || state(head) != workqueue.StateSkipped || state(follower) != workqueue.StatePending {
		t.Fatalf("skip: %q; head %s, follower %s", out, state(head), state(follower))
	}
	laneq(t, dsn, "item", "skip", "--scope", scope, "--work-id", id(head), "--yes").oneLine(t, 4, "is skipped")

	// cancel: an item no process holds ends at once; a running one is
	// marked for its holder's next heartbeat
	laneq(t, dsn, "item", "cancel", "--scope", scope, "--work-id", id(follower)).oneLine(t, 4, "pass --yes")
	out = laneq(t, dsn, "item", "cancel", "--scope", scope, "--work-id", id(follower), "--reason", "not needed", "--yes").want(t, 0).stdout
	if !strings.Contains(out, "cancelled "+id(follower)) || state(follower) != workqueue.StateSkipped {
		t.Fatalf("cancel: %q; item %s", out, state(follower))
	}
	laneq(t, dsn, "item", "cancel", "--scope", scope, "--work-id", id(follower), "--yes").oneLine(t, 4, "is skipped")
	claimer, err := qu.NewClaimer(scope, "cli-test", workqueue.ClaimerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	held, _, err := claimer.Claim(ctx, workqueue.ClaimRequest{QueueClasses: []string{"default"}, WorkTypes: []string{"later"}, Max: 1})
	if err != nil || len(held) != 1 || held[0].WorkID != later {
		t.Fatalf("claim %d: %v, %v", later, held, err)
	}
	got := decode[map[string]any](t, laneq(t, dsn, "item", "cancel", "--scope", scope, "--work-id", id(later), "--yes", "--json").want(t, 0))
	if got["running"] != true || state(later) != workqueue.StateProcessing {
		t.Fatalf("cancel of a running item: %v; item %s", got, state(later))
	}
	if _, err := qu.FinishCancelled(ctx, held[0].Lease, ""); err != nil {
		t.Fatal(err)
	}

	// pause and resume
	laneq(t, dsn, "class", "pause", "--scope", scope, "--class", "bulk").oneLine(t, 4, "pass --yes")
	got = decode[map[string]any](t, laneq(t, dsn, "class", "pause", "--scope", scope, "--class", "bulk", "--yes", "--json").want(t, 0))
	if fmt.Sprint(got["paused_classes"]) != "[bulk]" {
		t.Fatalf("pause: %v", got)
	}
	laneq(t, dsn, "class", "pause", "--scope", scope, "--class", "bad class", "--yes").oneLine(t, 2, "queue class")
	laneq(t, dsn, "class", "pause", "--scope", "tenant-none", "--class", "bulk", "--yes").oneLine(t, 3, "unknown scope")
	laneq(t, dsn, "class", "resume", "--scope", scope, "--class", "bulk", "--yes").want(t, 0)
	if paused, err := qu.PausedClasses(ctx, scope); err != nil || len(paused) != 0 {
		t.Fatalf("after resume: %v, %v", paused, err)
	}

	// bulk replay, twice
	laneq(t, dsn, "dlq", "replay", "--scope", scope, "--work-type", "sync").oneLine(t, 4, "pass --yes")
	r := laneq(t, dsn, "dlq", "replay", "--scope", scope, "--work-type", "sync", "--batch", "3", "--yes").want(t, 0)
	if !strings.Contains(r.stdout, "replayed 7 of 7 matching dead letters") || strings.Count(r.stderr, "dlq replay: batch") != 3 {
		t.Fatalf("bulk replay:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	again := laneq(t, dsn, "dlq", "replay", "--scope", scope, "--work-type", "sync", "--yes").want(t, 0)
	if !strings.Contains(again.stdout, "replayed 0 of 7 matching dead letters (7 replayed before") {
		t.Fatalf("second bulk replay: %s", again.stdout)
	}
	var children int
	if err := db.QueryRow("SELECT COUNT(*) FROM work_item WHERE replay_of_work_id IN (?, ?, ?, ?, ?, ?, ?)",
		dead[0], dead[1], dead[2], dead[3], dead[4], dead[5], dead[6]).Scan(&children); err != nil || children != 7 {
		t.Fatalf("%d children (%v), want 7", children, err)
	}
	laneq(t, dsn, "dlq", "replay", "--scope", scope, "--batch", "501", "--yes").oneLine(t, 2, "Batch")
}

func TestProcessesCommand(t *testing.T) {
	t.Parallel()
	qu, _, dsn := queuetest.New(t, workqueue.Config{}, scope)
	if err := qu.RegisterWakeEndpoint(context.Background(), scope, workqueue.WakeEndpoint{ID: "p1", Address: "127.0.0.1:7001", Key: make([]byte, 32),
		Process: &workqueue.ProcessInfo{Host: "web-1", PID: 4242, Owner: "worker-a", Executors: 16, Classes: []string{"default", "bulk"}}}, time.Hour); err != nil {
		t.Fatal(err)
	}
	out := laneq(t, dsn, "processes", "--scope", scope).want(t, 0).stdout
	for _, want := range []string{"HOST", "web-1", "4242", "worker-a", "16", "default,bulk", "true", "127.0.0.1:7001"} {
		if !strings.Contains(out, want) {
			t.Fatalf("laneq processes without %q:\n%s", want, out)
		}
	}
	laneq(t, dsn, "processes", "--scope", "tenant-none").oneLine(t, 3, "tenant-none")
}

func TestSkipMatchingCommand(t *testing.T) {
	t.Parallel()
	qu, db, dsn := queuetest.New(t, workqueue.Config{}, scope)
	var events []workqueue.Event
	for i := range 5 {
		key := fmt.Sprintf("e%d", i)
		wt := []string{"sync", "mail"}[i%2]
		events = append(events, workqueue.Event{IdempotencyKey: key, RouteID: "r", RouteVersion: 1, EventKind: "k", SourceKind: "s", SourceID: key,
			Payload: []byte("{}"), Work: []workqueue.Work{{WorkType: wt, SourceLane: "acct-1"}}})
	}
	res, err := qu.Enqueue(context.Background(), scope, events)
	if err != nil {
		t.Fatal(err)
	}
	laneq(t, dsn, "item", "skip-matching", "--scope", scope, "--work-type", "sync").oneLine(t, 4, "pass --yes")
	laneq(t, dsn, "item", "skip-matching", "--scope", scope, "--yes").oneLine(t, 2, "missing --class, --work-type or --failure-class")
	r := laneq(t, dsn, "item", "skip-matching", "--scope", scope, "--work-type", "sync", "--batch", "2", "--yes").want(t, 0)
	if !strings.Contains(r.stdout, "skipped 3 of 3 matching") || !strings.Contains(r.stderr, "skip: batch") {
		t.Fatalf("skip-matching:\nstdout %s\nstderr %s", r.stdout, r.stderr)
	}
	for i, ev := range res {
		want := []string{"skipped", "pending", "skipped", "blocked", "skipped"}[i]
		if got := queuetest.Item(t, db, ev.Work[0].WorkID).State; got != want {
			t.Errorf("item %d (%d) is %s, want %s", i, ev.Work[0].WorkID, got, want)
		}
	}
}
