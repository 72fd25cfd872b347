package main

import (
	"context"
	"flag"
	"fmt"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/operate"
	"github.com/laneq/laneq/runtime/workqueue"
)

// The write commands: each needs --yes (without it: exit 4 and what it
// would do), and each refusal by the item's state is exit 4 with the
// reason (workqueue.ErrRefused, ErrNotReplayable, ErrAlreadyReplayed).

// itemAction is a one-item write: its flags (--scope, --work-id, --yes and
// its own), what it does, and how it reports.
type itemAction struct {
	what        string // for --yes's help: "really <what>"
	consequence string // the refusal without --yes says it
	reason      bool   // takes --reason, recorded on the item
	// do writes and returns the JSON value and the table line.
	do func(ctx context.Context, qu *workqueue.Queue, scope string, id int64, reason string) (any, string, error)
}

// run parses, refuses without --yes, and does a.
func (a itemAction) run(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (required)")
	id := fs.Int64("work-id", 0, "the work item (required)")
	yes := fs.Bool("yes", false, "really "+a.what)
	var reason *string
	if a.reason {
		reason = fs.String("reason", "", "why, recorded on the item (at most 1000 bytes)")
	} else {
		reason = new(string)
	}
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", *scope != ""}, flagSet{"work-id", *id != 0}); err != nil {
		return err
	}
	if !*yes {
		return &refusedError{fmt.Sprintf("work item %d: %s; pass --yes to do it", *id, a.consequence)}
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	v, line, err := a.do(ctx, qu, *scope, *id, *reason)
	if err != nil {
		return err
	}
	return c.emit(v, func(t *table) { t.line("%s", line) })
}

var (
	replayCommand = itemAction{
		what: "replay: creates a new work item that will run", consequence: "replaying creates a new work item that will run",
		do: func(ctx context.Context, qu *workqueue.Queue, scope string, id int64, reason string) (any, string, error) {
			child, err := qu.Replay(ctx, scope, id)
			return map[string]any{"replayed": id, "child": child.WorkID, "state": child.State},
				fmt.Sprintf("replayed %d: child work item %d (%s)", id, child.WorkID, child.State), err
		},
	}
	retryNowCommand = itemAction{
		what: "make it due now", consequence: "retry-now makes a pending item that is not due yet due at once",
		do: func(ctx context.Context, qu *workqueue.Queue, scope string, id int64, reason string) (any, string, error) {
			err := qu.RetryNow(ctx, scope, id)
			return map[string]any{"due_now": id}, fmt.Sprintf("work item %d is due now", id), err
		},
	}
	skipCommand = itemAction{
		what: "skip it: it ends skipped and never runs", consequence: "skip ends it as skipped: it never runs, and its lanes move on",
		reason: true,
		do: func(ctx context.Context, qu *workqueue.Queue, scope string, id int64, reason string) (any, string, error) {
			fin, err := qu.SkipUnclaimed(ctx, scope, id, reason)
			return map[string]any{"skipped": id, "promoted": fin.Promoted},
				fmt.Sprintf("skipped %d; %d lane follower(s) now claimable", id, fin.Promoted), err
		},
	}
)

var cancelCommand = itemAction{
	what:        "cancel it: it ends skipped (cancelled), or stops at its next heartbeat if running",
	consequence: "cancel ends it as skipped with failure class cancelled, at once or, if it is running, when its handler stops after its next heartbeat; its lanes move on",
	reason:      true,
	do: func(ctx context.Context, qu *workqueue.Queue, scope string, id int64, reason string) (any, string, error) {
		out, err := qu.Cancel(ctx, scope, id, reason)
		line := fmt.Sprintf("cancelled %d; %d lane follower(s) now claimable", id, out.Finished.Promoted)
		if out.Running {
			line = fmt.Sprintf("cancellation of %d requested: it is running, and its process stops it at its next heartbeat", id)
		}
		return map[string]any{"cancelled": id, "running": out.Running, "promoted": out.Finished.Promoted}, line, err
	},
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

// bulkTimeout is the bulk commands' default --timeout: they run in
// batches until done (a run cut short is continued by running it again).
const bulkTimeout = "1h"

func useBulkTimeout(fs *flag.FlagSet) {
	_ = fs.Set("timeout", bulkTimeout) // a valid duration
	fs.Lookup("timeout").DefValue = bulkTimeout
}

func runDLQReplay(c *cli, args []string) error {
	fs := c.flags()
	useBulkTimeout(fs)
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

func runSkipMatching(c *cli, args []string) error {
	fs := c.flags()
	useBulkTimeout(fs)
	bulk := operate.BulkSkip{}
	fs.StringVar(&bulk.Scope, "scope", "", "the scope (required)")
	fs.StringVar(&bulk.QueueClass, "class", "", "only this queue class")
	fs.StringVar(&bulk.WorkType, "work-type", "", "only this work type (--class, --work-type or --failure-class is required)")
	fs.StringVar(&bulk.FailureClass, "failure-class", "", "only items whose last attempt failed with this class (retries in backoff)")
	since := fs.String("since", "", "only items due at or after this time (RFC 3339) or this long ago (e.g. 24h)")
	until := fs.String("until", "", "only items due before this time (RFC 3339) or this long ago")
	fs.StringVar(&bulk.Reason, "reason", "", "why, recorded on each item (at most 1000 bytes)")
	fs.IntVar(&bulk.Batch, "batch", operate.DefaultBatch, fmt.Sprintf("entries read per batch (1..%d); a progress line on stderr after each", inspect.MaxPageSize))
	yes := fs.Bool("yes", false, "really skip every matching unclaimed item")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", bulk.Scope != ""},
		flagSet{"class, --work-type or --failure-class", bulk.QueueClass != "" || bulk.WorkType != "" || bulk.FailureClass != ""}); err != nil {
		return err
	}
	var err error
	if bulk.From, err = when("since", *since); err != nil {
		return err
	}
	if bulk.To, err = when("until", *until); err != nil {
		return err
	}
	if !*yes {
		return &refusedError{"skipping ends every matching pending, blocked or waiting item as skipped: none of them will run, " +
			"and their lanes move on; pass --yes to do it"}
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	p, err := operate.Skip(ctx, qu, inspect.NewFromQueue(qu), bulk, func(p operate.SkipProgress) {
		c.progress(fmt.Sprintf("skip: batch %d: %d read, %d matched, %d skipped, %d refused", p.Batches, p.Scanned, p.Matched, p.Skipped, p.Refused))
	})
	if err != nil {
		return fmt.Errorf("%w (skipped %d before stopping; run it again to continue)", err, p.Skipped)
	}
	return c.emit(p, func(t *table) {
		t.line("skipped %d of %d matching unclaimed items (%d refused: their state moved on)", p.Skipped, p.Matched, p.Refused)
	})
}

// exitRefusedErrors are the runtime's refusals: exit 4.
var exitRefusedErrors = []error{workqueue.ErrRefused, workqueue.ErrNotReplayable, workqueue.ErrAlreadyReplayed}
