package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
	"github.com/laneq/laneq/schema"
)

func runMigrate(c *cli, args []string) error {
	c.flags()
	if err := c.parse(args); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	c.progress("applying migrations...")
	n, err := schema.Up(ctx, c.db)
	if err != nil {
		return err
	}
	return c.emit(map[string]int{"applied": n}, func(t *table) {
		t.line("applied %d migration(s); the schema is up to date", n)
	})
}

// listFlag is a repeatable, comma-separated flag.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*l = append(*l, v)
		}
	}
	return nil
}

func runStats(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (required)")
	var classes, types listFlag
	fs.Var(&classes, "class", "queue classes to count (repeatable or comma-separated; default every class of the scope)")
	fs.Var(&types, "work-type", "work types to count (default each class's own)")
	exact := fs.Bool("exact", false, "exact counts: reads the whole backlog (a diagnostic); default capped counts")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", *scope != ""}); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	r, err := stats.New(c.db)
	if err != nil {
		return err
	}
	read := r.Cheap
	if *exact {
		read = r.Exact
	}
	s, err := read(ctx, *scope, stats.Filter{Classes: classes, WorkTypes: types})
	if err != nil {
		return err
	}
	return c.emit(s, func(t *table) {
		kind := fmt.Sprintf("capped at %d", stats.CapCount)
		if s.Exact {
			kind = "exact"
		}
		t.line("scope %s, generation %d, at %s (%s)", s.Scope, s.Generation, s.At.Format(time.RFC3339), kind)
		t.row("CLASS", "DUE", "OLDEST DUE", "NOT DUE", "RETRYING", "LEASED", "EXPIRED", "LANE-BLOCKED", "WAITING", "INACTIVE", "DEAD")
		for _, cl := range s.Classes {
			t.row(countsRow(cl.Class, cl.Counts, s.Exact)...)
		}
		if len(s.Classes) > 1 {
			t.row(countsRow("(all)", s.Total, s.Exact)...)
		}
	})
}

func countsRow(name string, n stats.Counts, exact bool) []string {
	count := func(n int64) string { return stats.FormatCount(n, exact) }
	return []string{name, count(n.Due), age(n.OldestDue), count(n.NotDue), count(n.Retrying), count(n.Leased),
		count(n.ExpiredLeases), count(n.LaneBlocked), count(n.WaitingDependency), count(n.InactiveSuccessors), count(n.Dead)}
}

func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func runDLQList(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (required)")
	q := inspect.DeadLetterQuery{}
	fs.StringVar(&q.WorkType, "work-type", "", "only this work type")
	fs.StringVar(&q.FailureClass, "failure-class", "", "only this failure class")
	since := fs.String("since", "", "only dead at or after this time (RFC 3339) or this long ago (e.g. 24h)")
	until := fs.String("until", "", "only dead before this time (RFC 3339) or this long ago")
	fs.Int64Var(&q.Generation, "generation", 0, "the scope generation (default the active one)")
	fs.IntVar(&q.Limit, "limit", inspect.DefaultPageSize, fmt.Sprintf("dead entries read per page (1..%d)", inspect.MaxPageSize))
	fs.StringVar(&q.Cursor, "cursor", "", "continue after the page that printed this cursor")
	all := fs.Bool("all", false, "follow the cursor to the end (a progress line on stderr)")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", *scope != ""}); err != nil {
		return err
	}
	var err error
	if q.From, err = when("since", *since); err != nil {
		return err
	}
	if q.To, err = when("until", *until); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	r, err := inspect.New(c.db)
	if err != nil {
		return err
	}
	page, err := r.DeadLetters(ctx, *scope, q)
	if err != nil {
		return err
	}
	for scanned := page.Scanned; *all && page.Next != ""; {
		c.progress(fmt.Sprintf("dlq: %d dead letters read, %d listed...", scanned, len(page.Items)))
		q.Cursor = page.Next
		next, err := r.DeadLetters(ctx, *scope, q)
		if err != nil {
			return err
		}
		scanned += next.Scanned
		page.Items, page.Next, page.Scanned = append(page.Items, next.Items...), next.Next, scanned
	}
	return c.emit(page, func(t *table) {
		t.row("WORK ID", "DEAD AT", "TYPE", "CLASS", "ATTEMPTS", "FAILURE", "SUMMARY", "SOURCE", "DELIVERY", "REPLAYED")
		for _, d := range page.Items {
			replayed := ""
			if d.Replayed {
				replayed = d.ReplayedAt.Format(time.RFC3339)
			}
			t.row(strconv.FormatInt(d.WorkID, 10), d.DeadAt.Format(time.RFC3339Nano), d.WorkType, d.QueueClass,
				strconv.Itoa(d.Attempts), d.Failure.Class, clip(d.Failure.Summary, 60),
				d.Event.SourceKind+"/"+d.Event.SourceID, d.Event.DeliveryID, replayed)
		}
		if page.Next != "" {
			t.line("more: --cursor %s", page.Next)
		}
	})
}

// when parses an RFC 3339 time or a duration ago.
func when(name, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return time.Now().Add(-d).UTC(), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, &usageError{fmt.Sprintf("--%s %q: want an RFC 3339 time or a duration ago", name, s)}
	}
	return t.UTC(), nil
}

func clip(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

func runItemShow(c *cli, args []string) error {
	fs := c.flags()
	id := fs.Int64("work-id", 0, "the work item (required)")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"work-id", *id != 0}); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	r, err := inspect.New(c.db)
	if err != nil {
		return err
	}
	it, err := r.Item(ctx, *id)
	if err != nil {
		return err
	}
	why, err := r.Why(ctx, it)
	if err != nil {
		return err
	}
	// JSON: the item's fields as before, and Why beside them.
	out := struct {
		inspect.Item
		Why inspect.Why
	}{it, why}
	return c.emit(out, func(t *table) {
		t.row("work id", strconv.FormatInt(it.WorkID, 10))
		t.row("scope", fmt.Sprintf("%s (generation %d%s)", it.Scope, it.Generation, map[bool]string{true: ", not the active one", false: ""}[it.Stale]))
		t.row("work", fmt.Sprintf("%s in class %s", it.WorkType, it.QueueClass))
		t.row("state", it.State)
		t.row("why", why.Text)
		if it.TerminalAt.IsZero() {
			t.row("run after", fmt.Sprintf("%s (%s from now)", it.RunAfter.Format(time.RFC3339Nano), it.RunAfter.Sub(it.At).Round(time.Millisecond)))
		} else {
			t.row("terminal at", it.TerminalAt.Format(time.RFC3339Nano))
		}
		t.row("attempts", fmt.Sprintf("%d (safe retries %d)", it.Attempts, it.SafeRetries))
		if it.LeaseOwner != "" {
			t.row("lease", fmt.Sprintf("%s, token %d", it.LeaseOwner, it.LeaseToken))
		}
		if it.SourceLane != "" || it.TargetLane != "" {
			t.row("lanes", fmt.Sprintf("source %q, target %q, ordinal %d", it.SourceLane, it.TargetLane, it.LaneOrdinal))
		}
		if it.WaitsOn != "" {
			t.row("waits on", it.WaitsOn)
		}
		if it.Failure != nil {
			t.row("failure", it.Failure.Class+": "+it.Failure.Summary)
		}
		t.row("event", fmt.Sprintf("%d: %s %s/%s, route %s v%d, key %q", it.Event.EventID, it.Event.EventKind,
			it.Event.SourceKind, it.Event.SourceID, it.Event.RouteID, it.Event.RouteVersion, it.Event.IdempotencyKey))
		if it.Event.ReceiptID != 0 {
			t.row("receipt", fmt.Sprintf("%d: delivery %q, %s, correlation %q", it.Event.ReceiptID, it.Event.DeliveryID, it.Event.RouteKey, it.Event.CorrelationID))
		}
		t.line("")
		t.row("DEPTH", "WORK ID", "STATE", "ATTEMPTS", "FAILURE", "CREATED", "REPLAYED")
		for _, h := range it.History {
			failure := ""
			if h.Failure != nil {
				failure = h.Failure.Class
			}
			replayed := ""
			if !h.ReplayedAt.IsZero() {
				replayed = h.ReplayedAt.Format(time.RFC3339)
			}
			t.row(strconv.Itoa(h.ReplayDepth), strconv.FormatInt(h.WorkID, 10), h.State, strconv.Itoa(h.Attempts), failure,
				h.CreatedAt.Format(time.RFC3339), replayed)
		}
	})
}

func runReceiptShow(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (with --delivery)")
	delivery := fs.String("delivery", "", "the delivery id")
	id := fs.Int64("id", 0, "the receipt id (instead of --scope and --delivery)")
	if err := c.parse(args); err != nil {
		return err
	}
	if (*id == 0) == (*delivery == "") || (*delivery != "" && *scope == "") {
		return &usageError{"pass --id, or --scope and --delivery"}
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	in, err := ingress.New(c.db, ingress.Config{})
	if err != nil {
		return err
	}
	var rc ingress.Receipt
	if *id != 0 {
		rc, err = in.Receipt(ctx, *id)
	} else {
		rc, err = in.ReceiptByDelivery(ctx, *scope, *delivery)
	}
	if err != nil {
		return err
	}
	return c.emit(rc, func(t *table) {
		t.row("receipt", strconv.FormatInt(rc.ID, 10))
		t.row("delivery", fmt.Sprintf("%q in scope %s", rc.DeliveryID, rc.Scope))
		t.row("request", fmt.Sprintf("%s %s (%s), event kind %q, correlation %q, class %s", rc.Method, rc.RouteKey, rc.ContentType, rc.EventKind, rc.CorrelationID, rc.Class))
		t.row("accepted", rc.AcceptedAt.Format(time.RFC3339Nano))
		t.row("status", fmt.Sprintf("%s after %d attempt(s)", rc.Status, rc.Attempts))
		if rc.LastErrorClass != "" {
			t.row("last error", rc.LastErrorClass+": "+rc.LastErrorSummary)
		}
		if !rc.MaterializedAt.IsZero() {
			ids := make([]string, len(rc.EventIDs))
			for i, e := range rc.EventIDs {
				ids[i] = strconv.FormatInt(e, 10)
			}
			t.row("materialized", fmt.Sprintf("%s as event(s) %s", rc.MaterializedAt.Format(time.RFC3339Nano), strings.Join(ids, ", ")))
		}
	})
}

func runSetGeneration(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (required)")
	generation := fs.Int64("generation", 0, "the new active generation (required); only forward unless --rollback")
	rollback := fs.Bool("rollback", false, "allow a generation below the active one: makes the older generation's live work claimable again (needs --yes)")
	yes := fs.Bool("yes", false, "really move it: claims stop taking the old generation's work")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", *scope != ""}, flagSet{"generation", *generation != 0}); err != nil {
		return err
	}
	if !*yes {
		if *rollback {
			return &refusedError{fmt.Sprintf("rolling scope %s back to generation %d makes that generation's live items, lanes and projections claimable again and fences the newer generations' work; pass --yes to do it", *scope, *generation)}
		}
		return &refusedError{fmt.Sprintf("moving scope %s to generation %d fences every live item of the current generation; pass --yes to do it", *scope, *generation)}
	}
	ctx, cancel := c.context()
	defer cancel()
	qu, err := c.queue(ctx)
	if err != nil {
		return err
	}
	set := qu.SetGeneration
	if *rollback {
		set = qu.RollbackGeneration
	}
	if err := set(ctx, *scope, *generation); err != nil {
		var ge *workqueue.GenerationError
		if errors.As(err, &ge) {
			return &refusedError{fmt.Sprintf("scope %s is at generation %d: refusing to move it back to %d (generations only move forward; --rollback --yes rolls back on purpose)", ge.Scope, ge.Active, ge.Requested)}
		}
		return err
	}
	return c.emit(map[string]any{"scope": *scope, "generation": *generation, "rollback": *rollback}, func(t *table) {
		t.line("scope %s: active generation %d", *scope, *generation)
	})
}

func runProcesses(c *cli, args []string) error {
	fs := c.flags()
	scope := fs.String("scope", "", "the scope (required)")
	if err := c.parse(args); err != nil {
		return err
	}
	if err := need(flagSet{"scope", *scope != ""}); err != nil {
		return err
	}
	ctx, cancel := c.context()
	defer cancel()
	if err := c.open(ctx); err != nil {
		return err
	}
	r, err := inspect.New(c.db)
	if err != nil {
		return err
	}
	ps, err := r.Processes(ctx, *scope)
	if err != nil {
		return err
	}
	return c.emit(ps, func(t *table) {
		t.row("HOST", "PID", "OWNER", "EXECUTORS", "CLASSES", "WORK TYPES", "QUIET", "ABANDONED", "LEASES", "EXPIRED", "RENEWED", "LIVE", "ADDRESS")
		for _, p := range ps.Processes {
			t.row(p.Info.Host, strconv.Itoa(p.Info.PID), p.Info.Owner, strconv.Itoa(p.Info.Executors), strings.Join(p.Info.Classes, ","),
				strings.Join(p.Info.WorkTypes, ","), strconv.FormatBool(p.Info.Quiet), strconv.FormatInt(p.Info.AbandonedHandlers, 10),
				strconv.Itoa(p.Leases), strconv.Itoa(p.Expired), p.RenewedAt.Format(time.RFC3339), strconv.FormatBool(p.Live), p.Address)
		}
		if n := ps.AbandonedHandlers(); n > 0 {
			t.line("%d handler(s) ignored their cancelled context and still run, each holding its item and lanes until it returns (ABANDONED)", n)
		}
		if ps.Unattributed > 0 {
			t.line("%d lease(s) held by owners no listed process claims (wakes off, or a swept registration)", ps.Unattributed)
		}
	})
}
