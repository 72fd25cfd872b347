package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/laneq/laneq/runtime/scheduler"
	"github.com/laneq/laneq/runtime/workqueue"
)

type classed struct{ error }

func (classed) FailureClass() string { return "dependency_unavailable" }

func TestFailureOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		outcome error
		class   string
	}{
		{errors.New("boom"), "handler_error"},
		{&scheduler.PanicError{Value: "x"}, "panic"},
		{errors.Join(scheduler.ErrHandlerDeadline, errors.New("context canceled")), "deadline"},
		{errors.Join(scheduler.ErrLeaseRenewal, workqueue.ErrLeaseLost), "lease_renewal"},
		{fmt.Errorf("bad mapping: %w", workqueue.ErrPermanent), "permanent"},
		{fmt.Errorf("wrapped: %w", classed{errors.New("503")}), "dependency_unavailable"},
		// A named class says more than "permanent" (laneq.DecodeError is both).
		{classed{fmt.Errorf("bad bytes: %w", workqueue.ErrPermanent)}, "dependency_unavailable"},
	}
	for _, tc := range cases {
		if got := failureOf(tc.outcome); got.Class != tc.class || got.Summary != tc.outcome.Error() {
			t.Errorf("failureOf(%v) = %+v, want class %q", tc.outcome, got, tc.class)
		}
	}
	long := failureOf(errors.New(strings.Repeat("é", 2000)))
	if n := len([]rune(long.Summary)); n != 1024 {
		t.Errorf("summary of %d characters, want 1024", n)
	}
}
