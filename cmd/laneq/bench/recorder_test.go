package bench

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/benchdb"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/runtime/worker"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestRecorderKeepsAnAttemptWhoseContextEnded: a handler entered with its
// context already ended still leaves its start, its end and its verdict on
// record. A process frozen between its pre-start renewal and the handler's
// start wakes with its heartbeat due, finds the lease taken over and
// cancels the attempt as the handler writes its start; when that write
// shared the handler's context, the row could commit while the call
// failed, and the attempt read as one a kill cut short (TestBenchFaultsShort
// failed on it once: "executed again ... that no kill, rejection or retry
// explains").
func TestRecorderKeepsAnAttemptWhoseContextEnded(t *testing.T) {
	t.Parallel()
	db := tidbtest.NewDB(t)
	ctx := context.Background()
	if err := createBenchTables(ctx, db); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder(db, "p1")
	lost := errors.New("lease taken over while the process was frozen")
	hctx, cancel := context.WithCancelCause(ctx)
	cancel(lost)
	lease := workqueue.Lease{WorkID: 7, Token: 2}
	job := &worker.Job{Item: workqueue.Claimed{WorkID: 7, WorkType: typeDeliver, Attempt: 1, Lease: lease}}
	// An hour of simulated work: only the ended context can make it return.
	err := rec.run(hctx, processConfig{HandlerLatency: time.Hour}, job, &sync.Map{}, nil)
	if !errors.Is(err, lost) {
		t.Fatalf("handler returned %v, want the context's cause %v", err, lost)
	}
	rec.verdict(lease, errors.New("workqueue: lease token 2 is stale"))
	rec.close()

	atts, err := benchdb.New(db).ListAttempts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type recorded struct {
		Process         string
		WorkID, Token   int64
		Ended           bool
		Outcome, Finish string
	}
	var got []recorded
	for _, a := range atts {
		got = append(got, recorded{a.Process, a.WorkID, a.LeaseToken, a.EndedAt.Valid, a.Outcome.String, a.Finish.String})
	}
	want := []recorded{{Process: "p1", WorkID: 7, Token: 2, Ended: true, Outcome: "canceled", Finish: "rejected"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("attempts on record (-want +got):\n%s", diff)
	}
}

// TestOutcomeWord: the recorded outcome is what the handler returned. A
// handler that returned nil is completed by the worker even when its
// context ended just after it returned (a deadline passing before the end
// is written); recording it as "canceled" made the verifier report a
// completed item whose last attempt did not complete it (seen with a 2s
// handler deadline on a loaded machine).
func TestOutcomeWord(t *testing.T) {
	for _, tc := range []struct {
		outcome  error
		ctxEnded bool
		want     string
	}{
		{nil, false, "ok"},
		{nil, true, "ok"},
		{errors.New("designed failure"), false, "error"},
		{context.DeadlineExceeded, true, "canceled"},
	} {
		if got := outcomeWord(tc.outcome, tc.ctxEnded); got != tc.want {
			t.Errorf("outcome %v, context ended %v: recorded %q, want %q", tc.outcome, tc.ctxEnded, got, tc.want)
		}
	}
}
