package main

import (
	"fmt"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/operate"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The write commands: each needs --yes (without it: exit 4 and what it
// would do), and each refusal by the item's state is exit 4 with the
// reason (workqueue.ErrRefused, ErrNotReplayable, ErrAlreadyReplayed).

// itemAction parses the flags every one-item write takes.
type itemAction struct {
	scope *string
	id    *int64
	yes   *bool
}

func (c *cli) itemActionFlags(what string) itemAction {
	fs := c.flags()
	return itemAction{
		scope: fs.String("scope", "", "the scope (required)"),
		id:    fs.Int64("work-id", 0, "the work item (required)"),
		yes:   fs.Bool("yes", false, "really "+what),
	}
}

// ready checks the parsed flags and --yes; consequence says what the
// write does, for the refusal without --yes.
func (a itemAction) ready(consequence string) error {
	if err := need(flagSet{"scope", *a.scope != ""}, flagSet{"work-id", *a.id != 0}); err != nil {
		return err
	}
	if !*a.yes {
		return &refusedError{fmt.Sprintf("work item %d: %s; pass --yes to do it", *a.id, consequence)}
	}
	return nil
}

func runReplay(c *cli, args []string) error {
	a := c.itemActionFlags("replay: creates a new work item that will run")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := a.ready("replaying creates a new work item that will run"); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	child, err := qu.Replay(ctx, *a.scope, *a.id)
	if err != nil {
		return err
	}
	return c.emit(map[string]any{"replayed": *a.id, "child": child.WorkID, "state": child.State}, func(t *table) {
		t.line("replayed %d: child work item %d (%s)", *a.id, child.WorkID, child.State)
	})
}

func runRetryNow(c *cli, args []string) error {
	a := c.itemActionFlags("make it due now")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := a.ready("retry-now makes a pending item that is not due yet due at once"); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	if err := qu.RetryNow(ctx, *a.scope, *a.id); err != nil {
		return err
	}
	return c.emit(map[string]any{"due_now": *a.id}, func(t *table) {
		t.line("work item %d is due now", *a.id)
	})
}

func runSkip(c *cli, args []string) error {
	a := c.itemActionFlags("skip it: it ends skipped and never runs")
	reason := c.fs.String("reason", "", "why, recorded on the item (at most 1000 bytes)")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := a.ready("skip ends it as skipped: it never runs, and its lanes move on"); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	fin, err := qu.SkipUnclaimed(ctx, *a.scope, *a.id, *reason)
	if err != nil {
		return err
	}
	return c.emit(map[string]any{"skipped": *a.id, "promoted": fin.Promoted}, func(t *table) {
		t.line("skipped %d; %d lane follower(s) now claimable", *a.id, fin.Promoted)
	})
}

// classAction is pause or resume.
func classAction(pause bool) func(c *cli, args []string) error {
	verb := map[bool]string{true: "pause", false: "resume"}[pause]
	return func(c *cli, args []string) error {
		fs := c.flags()
		scope := fs.String("scope", "", "the scope (required)")
		class := fs.String("class", "", "the queue class (required)")
		yes := fs.Bool("yes", false, "really "+verb+" the class")
		if err := c.parse(args); err != nil {
			return err
		}
		if err := need(flagSet{"scope", *scope != ""}, flagSet{"class", *class != ""}); err != nil {
			return err
		}
		if !*yes {
			what := "pausing stops every worker from claiming or taking over its work until it is resumed"
			if !pause {
				what = "resuming lets workers claim its work again at once"
			}
			return &refusedError{fmt.Sprintf("class %s of %s: %s; pass --yes to do it", *class, *scope, what)}
		}
		ctx, cancel := c.context()
		defer cancel()
		qu, err := c.queue(ctx)
		if err != nil {
			return err
		}
		set := qu.ResumeClass
		if pause {
			set = qu.PauseClass
		}
		if err := set(ctx, *scope, *class); err != nil {
			return err
		}
		paused, err := qu.PausedClasses(ctx, *scope)
		if err != nil {
			return err
		}
		return c.emit(map[string]any{"scope": *scope, "paused_classes": paused}, func(t *table) {
			t.line("%sd class %s of %s; paused classes now: %v", verb, *class, *scope, paused)
		})
	}
}

func runDLQReplay(c *cli, args []string) error {
	fs := c.flags()
	bulk := operate.BulkReplay{}
	fs.StringVar(&bulk.Scope, "scope", "", "the scope (required)")
	fs.StringVar(&bulk.Filter.WorkType, "work-type", "", "only this work type")
	fs.StringVar(&bulk.Filter.FailureClass, "failure-class", "", "only this failure class")
	since := fs.String("since", "", "only dead at or after this time (RFC 3339) or this long ago (e.g. 24h)")
	until := fs.String("until", "", "only dead before this time (RFC 3339) or this long ago")
	fs.IntVar(&bulk.Batch, "batch", operate.DefaultBatch, fmt.Sprintf("dead entries read per batch (1..%d); a progress line on stderr after each", inspect.MaxPageSize))
	yes := fs.Bool("yes", false, "really replay every matching dead letter not replayed before")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", bulk.Scope != ""}); err != nil {
		return err
	}
	var err error
	if bulk.Filter.From, err = when("since", *since); err != nil {
		return err
	}
	if bulk.Filter.To, err = when("until", *until); err != nil {
		return err
	}
	if !*yes {
		return &refusedError{"replaying creates a new work item that will run for every matching dead letter not replayed before " +
			"(run laneq dlq list with the same filters to see them); pass --yes to do it"}
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	p, err := operate.Replay(ctx, qu, inspect.NewFromQueue(qu), bulk, func(p operate.Progress) {
		c.progress(fmt.Sprintf("dlq replay: batch %d: %d dead letters read, %d matched, %d replayed, %d replayed before, %d refused",
			p.Batches, p.Scanned, p.Matched, p.Replayed, p.AlreadyReplayed, p.Refused))
	})
	if err != nil {
		// What was replayed stays replayed; running it again continues.
		return fmt.Errorf("%w (replayed %d before stopping; run it again to continue)", err, p.Replayed)
	}
	return c.emit(p, func(t *table) {
		t.line("replayed %d of %d matching dead letters (%d replayed before, %d refused)", p.Replayed, p.Matched, p.AlreadyReplayed, p.Refused)
		if p.LastRefusal != "" {
			t.line("last refusal: %s", p.LastRefusal)
		}
	})
}

// exitRefusedErrors are the runtime's refusals: exit 4.
var exitRefusedErrors = []error{workqueue.ErrRefused, workqueue.ErrNotReplayable, workqueue.ErrAlreadyReplayed}
