package laneqtest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/laneqtest"
	"github.com/laneq/laneq/runtime/workqueue"
)

func TestMain(m *testing.M) { os.Exit(laneqtest.Main(m)) }

type welcome struct{ Email string }

func (welcome) Kind() string { return "welcome" }

type invoice struct{ ID int }

func (invoice) Kind() string { return "invoice" }

func TestKitOverARealClient(t *testing.T) {
	t.Parallel()
	c := laneqtest.Open(t, laneq.Config{})
	if err := laneq.AddWorker(c, func(ctx context.Context, job *laneq.Job[welcome]) error {
		if job.Args.Email == "" {
			return fmt.Errorf("no address: %w", workqueue.ErrPermanent)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(context.Background(), welcome{Email: "ada@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if got := laneqtest.RequireEnqueued[welcome](t, c, res.WorkID); got.Email != "ada@example.com" {
		t.Errorf("RequireEnqueued = %+v", got)
	}
	laneqtest.Start(t, c)
	if it := laneqtest.WaitForState(t, c, res.WorkID, workqueue.StateCompleted); it.WorkID != res.WorkID {
		t.Errorf("WaitForState returned item %d", it.WorkID)
	}
	if e := laneqtest.Work(t, c, welcome{}); e.Kind != laneq.EventDead || !errors.Is(e.Err, workqueue.ErrPermanent) {
		t.Errorf("Work of a bad welcome = %+v, want dead with the permanent error", e)
	}
	if e := laneqtest.Work(t, c, welcome{Email: "bob@example.com"}); e.Kind != laneq.EventCompleted {
		t.Errorf("Work = %+v, want completed", e)
	}
	laneqtest.Drain(t, c)
}

// The kit's checks fail a test when their condition does not hold.
func TestKitFailsWhatDoesNotHold(t *testing.T) {
	t.Parallel()
	c := laneqtest.Open(t, laneq.Config{})
	res, err := c.Enqueue(context.Background(), welcome{Email: "ada@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	for name, check := range map[string]func(tb testing.TB){
		"RequireEnqueued of another kind": func(tb testing.TB) { laneqtest.RequireEnqueued[invoice](tb, c, res.WorkID) },
		"WaitForState of a missing item":  func(tb testing.TB) { laneqtest.WaitForState(tb, c, res.WorkID+1000, workqueue.StateCompleted) },
		"WaitFor a condition that errs": func(tb testing.TB) {
			laneqtest.WaitFor(tb, "a condition", func() (bool, error) { return true, errors.New("read failed") })
		},
	} {
		rec := &recorder{TB: t}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // Fatalf ends this goroutine, as in a test
			defer wg.Done()
			check(rec)
		}()
		wg.Wait()
		if !rec.failed {
			t.Errorf("%s: passed", name)
		} else if !strings.Contains(rec.msg, "laneqtest:") {
			t.Errorf("%s: failed with %q", name, rec.msg)
		}
	}
}

// recorder is a testing.TB whose Fatalf records the failure and ends the
// calling goroutine, as testing.T's does.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
