package dashboard

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/operate"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Write actions. Every one is two requests: GET path renders its
// confirmation page (the only place its form is rendered, with a token
// bound to the session, the action and its subject), and POST path does it
// after checking, in order: writes are enabled, the token matches this
// session and this exact subject, and the runtime agrees the subject's
// state allows it (a refusal is a 409 page saying why). Cross-origin POSTs
// and forged Host headers are refused before any of this (ServeHTTP).

// action is one write the dashboard offers.
type action struct {
	path  string // "/replay": GET confirms, POST does
	title string // the confirmation page's title
	// target reads the request's inputs (the query on GET, the form on
	// POST) and what it acts on; a failure is rendered as an error page.
	target func(ctx context.Context, in url.Values) (target, error)
	// do performs it and returns where to send the browser.
	do func(ctx context.Context, t target, form url.Values) (redirect string, err error)
}

// target is what a confirmation page shows and a POST acts on.
type target struct {
	Subject  string     // canonical: what the token is bound to
	Question string     // "Replay dead work item 42 (deliver of crm/7 in scope s)?"
	Effect   string     // what will happen
	Button   string     // the submit button's label
	Fields   url.Values // posted back as hidden fields
	Cancel   string     // where "Cancel" leads
	Reason   bool       // ask for a reason (skip)
	scope    string
	workID   int64
	class    string
	bulk     operate.BulkReplay
	skip     operate.BulkSkip
}

func (s *Server) actions() []action {
	return []action{
		{path: "/replay", title: "Replay?", target: s.itemTarget(func(it inspect.Item) target {
			return target{
				Question: fmt.Sprintf("Replay dead work item %d (%s of %s/%s in scope %s)?", it.WorkID, it.WorkType, it.Event.SourceKind, it.Event.SourceID, it.Scope),
				Effect:   "A new work item for the same event will be created and will run. The dead item stays as it is.",
				Button:   fmt.Sprintf("Replay work item %d", it.WorkID),
			}
		}), do: func(ctx context.Context, t target, _ url.Values) (string, error) {
			child, err := s.qu.Replay(ctx, t.scope, t.workID)
			if err != nil {
				return "", err
			}
			s.cfg.Logger.Info("dashboard: replayed", "scope", t.scope, "work_id", t.workID, "child", child.WorkID)
			return "/item?id=" + strconv.FormatInt(child.WorkID, 10), nil
		}},
		{path: "/retry-now", title: "Retry now?", target: s.itemTarget(func(it inspect.Item) target {
			return target{
				Question: fmt.Sprintf("Make work item %d (%s in scope %s, due at %s UTC) due now?", it.WorkID, it.WorkType, it.Scope, whenCell(it.RunAfter)),
				Effect:   "It becomes due at once and a worker of its class claims it; it keeps its attempts and failure budget.",
				Button:   fmt.Sprintf("Retry work item %d now", it.WorkID),
			}
		}), do: func(ctx context.Context, t target, _ url.Values) (string, error) {
			if err := s.qu.RetryNow(ctx, t.scope, t.workID); err != nil {
				return "", err
			}
			s.cfg.Logger.Info("dashboard: retry now", "scope", t.scope, "work_id", t.workID)
			return "/item?id=" + strconv.FormatInt(t.workID, 10), nil
		}},
		{path: "/skip", title: "Skip?", target: s.itemTarget(func(it inspect.Item) target {
			return target{
				Question: fmt.Sprintf("Skip work item %d (%s of %s/%s in scope %s, %s)?", it.WorkID, it.WorkType, it.Event.SourceKind, it.Event.SourceID, it.Scope, it.State),
				Effect:   "It ends as skipped and never runs; the next item of each of its lanes takes its place. This cannot be undone.",
				Button:   fmt.Sprintf("Skip work item %d", it.WorkID),
				Reason:   true,
			}
		}), do: func(ctx context.Context, t target, form url.Values) (string, error) {
			fin, err := s.qu.SkipUnclaimed(ctx, t.scope, t.workID, form.Get("reason"))
			if err != nil {
				return "", err
			}
			s.cfg.Logger.Info("dashboard: skipped", "scope", t.scope, "work_id", t.workID, "promoted", fin.Promoted)
			return "/item?id=" + strconv.FormatInt(t.workID, 10), nil
		}},
		{path: "/cancel", title: "Cancel?", target: s.itemTarget(func(it inspect.Item) target {
			effect := "It ends as skipped (failure class cancelled) and never runs; the next item of each of its lanes takes its place. This cannot be undone."
			if it.State == workqueue.StateProcessing {
				effect = "It is running: its process is told at its next heartbeat and cancels its handler, and it then ends as skipped (failure class cancelled), unless the handler completes first. Its lanes move on when it ends. This cannot be undone."
			}
			return target{
				Question: fmt.Sprintf("Cancel work item %d (%s of %s/%s in scope %s, %s)?", it.WorkID, it.WorkType, it.Event.SourceKind, it.Event.SourceID, it.Scope, it.State),
				Effect:   effect,
				Button:   fmt.Sprintf("Cancel work item %d", it.WorkID),
				Reason:   true,
			}
		}), do: func(ctx context.Context, t target, form url.Values) (string, error) {
			out, err := s.qu.Cancel(ctx, t.scope, t.workID, form.Get("reason"))
			if err != nil {
				return "", err
			}
			s.cfg.Logger.Info("dashboard: cancelled", "scope", t.scope, "work_id", t.workID, "running", out.Running, "promoted", out.Finished.Promoted)
			return "/item?id=" + strconv.FormatInt(t.workID, 10), nil
		}},
		s.classAction(true),
		s.classAction(false),
		{path: "/dlq/replay", title: "Replay these dead letters?", target: s.bulkTarget, do: s.startBulkReplay},
		{path: "/skip-matching", title: "Skip these items?", target: s.skipTarget, do: s.startBulkSkip},
	}
}

// itemTarget reads the item the "id" input names.
func (s *Server) itemTarget(describe func(inspect.Item) target) func(ctx context.Context, in url.Values) (target, error) {
	return func(ctx context.Context, in url.Values) (target, error) {
		id, err := workID(in.Get("id"))
		if err != nil {
			return target{}, err
		}
		it, err := s.in.Item(ctx, id)
		if err != nil {
			return target{}, err
		}
		t := describe(it)
		t.Subject, t.scope, t.workID = strconv.FormatInt(id, 10), it.Scope, id
		t.Fields = url.Values{"id": {t.Subject}}
		t.Cancel = "/item?id=" + t.Subject
		return t, nil
	}
}

func (s *Server) classAction(pause bool) action {
	verb, path := "Resume", "/resume"
	effect := "Workers claim its due work again at once."
	if pause {
		verb, path = "Pause", "/pause"
		effect = "From their next claim turn no worker claims its work or takes over its expired leases, until it is resumed; items already running finish. Durable: restarts keep it paused."
	}
	return action{path: path, title: verb + "?", target: func(ctx context.Context, in url.Values) (target, error) {
		scope, class := in.Get("s"), in.Get("class")
		if scope == "" {
			return target{}, &inspect.InvalidError{Field: "s", Reason: "empty"}
		}
		if err := workqueue.ValidQueueClass(class); err != nil {
			return target{}, err
		}
		return target{
			Subject: scope + "\x00" + class, scope: scope, class: class,
			Question: fmt.Sprintf("%s class %s of scope %s?", verb, class, scope), Effect: effect,
			Button: fmt.Sprintf("%s class %s", verb, class), Fields: url.Values{"s": {scope}, "class": {class}},
			Cancel: "/scope?s=" + url.QueryEscape(scope),
		}, nil
	}, do: func(ctx context.Context, t target, _ url.Values) (string, error) {
		set := s.qu.ResumeClass
		if pause {
			set = s.qu.PauseClass
		}
		if err := set(ctx, t.scope, t.class); err != nil {
			return "", err
		}
		s.cfg.Logger.Info("dashboard: "+path[1:], "scope", t.scope, "class", t.class)
		return "/scope?s=" + url.QueryEscape(t.scope), nil
	}}
}

// bulkTarget reads the dead-letter filters of the request (the dead
// letters page's) and counts nothing: a bulk replay's extent is known only
// by reading it, which the job does in batches.
func (s *Server) bulkTarget(_ context.Context, in url.Values) (target, error) {
	dq, err := deadLetterQuery(in)
	if err != nil {
		return target{}, err
	}
	scope := in.Get("s")
	if scope == "" {
		return target{}, &inspect.InvalidError{Field: "s", Reason: "empty"}
	}
	fields := dlqFilters(in)
	filter := "every dead letter"
	if dq.WorkType != "" || dq.FailureClass != "" || !dq.From.IsZero() || !dq.To.IsZero() {
		filter = "the dead letters matching " + describeFilter(dq)
	}
	return target{
		Subject: fields.Encode(), scope: scope, bulk: operate.BulkReplay{Scope: scope, Filter: dq, Batch: operate.DefaultBatch},
		Question: fmt.Sprintf("Replay %s of scope %s that was not replayed before?", filter, scope),
		Effect: fmt.Sprintf("Each gets a new work item that will run, %d dead letters at a time, with progress on the next page. "+
			"Running it again replays nothing twice.", operate.DefaultBatch),
		Button: "Replay them", Fields: fields, Cancel: "/dlq?" + fields.Encode(),
	}, nil
}

func describeFilter(dq inspect.DeadLetterQuery) string {
	var parts []string
	if dq.WorkType != "" {
		parts = append(parts, "work type "+dq.WorkType)
	}
	if dq.FailureClass != "" {
		parts = append(parts, "failure class "+dq.FailureClass)
	}
	if !dq.From.IsZero() {
		parts = append(parts, "dead since "+whenCell(dq.From)+" UTC")
	}
	if !dq.To.IsZero() {
		parts = append(parts, "dead before "+whenCell(dq.To)+" UTC")
	}
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}

// token binds an action on one subject to the session.
func (s *Server) token(session, path, subject string) string {
	m := hmac.New(sha256.New, s.key)
	fmt.Fprintf(m, "%s\x00%s\x00%s", session, path, subject)
	return hex.EncodeToString(m.Sum(nil))
}

// confirm renders an action's confirmation page.
func (s *Server) confirm(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.AllowWrites {
			s.render(w, r, http.StatusForbidden, "error.html", page{Title: "Read-only", Error: "this dashboard is read-only: start it with --allow-writes --login-file FILE to act on items"})
			return
		}
		ctx, cancel := s.ctx(r)
		defer cancel()
		t, err := a.target(ctx, r.URL.Query())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		session := s.session(w, r)
		s.render(w, r, http.StatusOK, "confirm.html", page{Title: a.title, Scope: t.scope, Data: map[string]any{
			"Action": a.path, "Target": t, "Token": s.token(session, a.path, t.Subject),
		}})
	}
}

// perform does an action: POST only, refused by a read-only server or
// without the token its confirmation page issued for this session and
// subject.
func (s *Server) perform(a action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.cfg.AllowWrites {
			s.render(w, r, http.StatusForbidden, "error.html", page{Title: "Read-only", Error: "this dashboard is read-only"})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 8192)
		if err := r.ParseForm(); err != nil {
			s.fail(w, r, &inspect.InvalidError{Field: "form", Reason: err.Error()})
			return
		}
		ctx, cancel := s.ctx(r)
		defer cancel()
		t, err := a.target(ctx, r.PostForm)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		c, err := r.Cookie(sessionCookie)
		token := r.PostForm.Get("csrf")
		if err != nil || token == "" || !hmac.Equal([]byte(token), []byte(s.token(c.Value, a.path, t.Subject))) {
			s.render(w, r, http.StatusForbidden, "error.html", page{Title: "Refused", Error: "missing or invalid CSRF token: open the action's confirmation page and confirm there"})
			return
		}
		to, err := a.do(ctx, t, r.PostForm)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		http.Redirect(w, r, to, http.StatusSeeOther)
	}
}

// Bulk actions (replay, skip) run as jobs of the server, not of the
// request that started them: a large one outlives a request's timeout, and
// its page shows its progress, reloading itself until it is done.
const (
	maxRunningJobs = 2
	maxKeptJobs    = 32
	jobTimeout     = time.Hour
	// JobRefreshSeconds is how often a running job's page reloads.
	JobRefreshSeconds = 1
)

// JobCounts is a bulk action's progress, whichever it is.
type JobCounts struct {
	Batches, Scanned, Matched int
	Acted                     int // replayed, or skipped
	Before                    int // replayed before (nothing written)
	Refused                   int
	LastRefusal               string
}

// JobState is a job as its page shows it.
type JobState struct {
	ID, Kind, Scope, Filter string // Kind: "replay" or "skip"
	Started                 time.Time
	Counts                  JobCounts
	Running                 bool
	Error                   string
}

// job is one bulk action.
type job struct {
	mu sync.Mutex
	st JobState
}

func (j *job) state() JobState {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.st
}

func (j *job) report(c JobCounts) {
	j.mu.Lock()
	j.st.Counts = c
	j.mu.Unlock()
}

// jobs are the server's bulk actions, newest last. They run on ctx, which
// Server.Close cancels, and Close waits for them (wg).
type jobs struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	list   []*job
	closed bool
}

// Close stops the bulk actions still running and waits for them: what
// each did stays done, and its progress is logged. Then it closes the
// dashboard's Queue, sending the announcements it still holds. Call it
// after the HTTP server's Shutdown.
func (s *Server) Close() {
	s.jobs.mu.Lock()
	s.jobs.closed = true
	s.jobs.mu.Unlock()
	s.jobs.cancel()
	s.jobs.wg.Wait()
	_ = s.qu.Close() // it only stops the publisher: nothing to report
}

var errTooManyJobs = errors.New("dashboard: bulk actions already running")

// startJob runs one bulk action in the background (at most maxRunningJobs
// at once) and returns its page.
func (s *Server) startJob(kind, scope, filter string, run func(ctx context.Context, j *job) error) (string, error) {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	j := &job{st: JobState{ID: hex.EncodeToString(b), Kind: kind, Scope: scope, Filter: filter, Started: time.Now(), Running: true}}
	s.jobs.mu.Lock()
	running := 0
	for _, o := range s.jobs.list {
		if o.state().Running {
			running++
		}
	}
	if running >= maxRunningJobs {
		s.jobs.mu.Unlock()
		return "", fmt.Errorf("%w: %d at once at most; wait for one to finish", errTooManyJobs, maxRunningJobs)
	}
	if s.jobs.closed {
		s.jobs.mu.Unlock()
		return "", errors.New("dashboard: shutting down")
	}
	s.jobs.wg.Add(1)
	s.jobs.list = append(s.jobs.list, j)
	for i := 0; len(s.jobs.list) > maxKeptJobs && i < len(s.jobs.list); {
		if s.jobs.list[i].state().Running {
			i++
			continue
		}
		s.jobs.list = slices.Delete(s.jobs.list, i, i+1) // the oldest finished first
	}
	s.jobs.mu.Unlock()
	s.cfg.Logger.Info("dashboard: bulk "+kind+" started", "job", j.st.ID, "scope", scope, "filter", filter)
	go func() {
		defer s.jobs.wg.Done()
		ctx, cancel := context.WithTimeout(s.jobs.ctx, jobTimeout)
		defer cancel()
		err := run(ctx, j)
		j.mu.Lock()
		j.st.Running = false
		if err != nil {
			j.st.Error = err.Error()
		}
		st := j.st
		j.mu.Unlock()
		s.cfg.Logger.Info("dashboard: bulk "+kind+" ended", "job", st.ID, "done", st.Counts.Acted, "before", st.Counts.Before, "refused", st.Counts.Refused, "err", err)
	}()
	return "/job?id=" + j.st.ID, nil
}

func (s *Server) startBulkReplay(_ context.Context, t target, _ url.Values) (string, error) {
	return s.startJob("replay", t.scope, describeFilter(t.bulk.Filter), func(ctx context.Context, j *job) error {
		counts := func(p operate.Progress) JobCounts {
			return JobCounts{Batches: p.Batches, Scanned: p.Scanned, Matched: p.Matched, Acted: p.Replayed, Before: p.AlreadyReplayed,
				Refused: p.Refused, LastRefusal: p.LastRefusal}
		}
		p, err := operate.Replay(ctx, s.qu, s.in, t.bulk, func(p operate.Progress) { j.report(counts(p)) })
		j.report(counts(p))
		return err
	})
}

func (s *Server) startBulkSkip(_ context.Context, t target, form url.Values) (string, error) {
	bulk := t.skip
	bulk.Reason = form.Get("reason")
	return s.startJob("skip", t.scope, describeSkip(bulk), func(ctx context.Context, j *job) error {
		counts := func(p operate.SkipProgress) JobCounts {
			return JobCounts{Batches: p.Batches, Scanned: p.Scanned, Matched: p.Matched, Acted: p.Skipped, Refused: p.Refused, LastRefusal: p.LastRefusal}
		}
		p, err := operate.Skip(ctx, s.qu, s.in, bulk, func(p operate.SkipProgress) { j.report(counts(p)) })
		j.report(counts(p))
		return err
	})
}

func describeSkip(b operate.BulkSkip) string {
	var parts []string
	if b.QueueClass != "" {
		parts = append(parts, "class "+b.QueueClass)
	}
	if b.WorkType != "" {
		parts = append(parts, "work type "+b.WorkType)
	}
	if b.FailureClass != "" {
		parts = append(parts, "last failure "+b.FailureClass)
	}
	if !b.From.IsZero() {
		parts = append(parts, "due since "+whenCell(b.From)+" UTC")
	}
	if !b.To.IsZero() {
		parts = append(parts, "due before "+whenCell(b.To)+" UTC")
	}
	return strings.Join(parts, ", ")
}

// skipTarget reads a bulk skip's scope, class and work type.
func (s *Server) skipTarget(_ context.Context, in url.Values) (target, error) {
	scope := in.Get("s")
	bulk := operate.BulkSkip{Scope: scope, QueueClass: in.Get("class"), WorkType: in.Get("work_type"), FailureClass: in.Get("failure_class")}
	var err error
	if bulk.From, err = parseTime("since", in.Get("since")); err != nil {
		return target{}, err
	}
	if bulk.To, err = parseTime("until", in.Get("until")); err != nil {
		return target{}, err
	}
	switch {
	case scope == "":
		return target{}, &inspect.InvalidError{Field: "s", Reason: "empty"}
	case bulk.QueueClass == "" && bulk.WorkType == "" && bulk.FailureClass == "":
		return target{}, &inspect.InvalidError{Field: "filter", Reason: "a bulk skip needs a queue class, a work type or a failure class"}
	case bulk.QueueClass != "" && workqueue.ValidQueueClass(bulk.QueueClass) != nil:
		return target{}, workqueue.ValidQueueClass(bulk.QueueClass)
	case bulk.WorkType != "" && workqueue.ValidWorkType(bulk.WorkType) != nil:
		return target{}, workqueue.ValidWorkType(bulk.WorkType)
	}
	fields := url.Values{"s": {scope}}
	for _, k := range []string{"class", "work_type", "failure_class", "since", "until"} {
		if v := in.Get(k); v != "" {
			fields.Set(k, v)
		}
	}
	return target{
		Subject: fields.Encode(), scope: scope, skip: bulk, Reason: true,
		Question: fmt.Sprintf("Skip every unclaimed item of %s in scope %s?", describeSkip(bulk), scope),
		Effect: fmt.Sprintf("Every pending, blocked or waiting item of %s ends as skipped and never runs; the next item of each lane takes its place. "+
			"Items running now are left alone. %d at a time, with progress on the next page. This cannot be undone.", describeSkip(bulk), operate.DefaultBatch),
		Button: "Skip them", Fields: fields, Cancel: "/scope?s=" + url.QueryEscape(scope),
	}, nil
}

// job shows a bulk action's progress; the page reloads itself while the
// job runs.
func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("id")
	s.jobs.mu.Lock()
	var j *job
	for _, o := range s.jobs.list {
		if o.state().ID == id {
			j = o
		}
	}
	s.jobs.mu.Unlock()
	if j == nil {
		s.fail(w, r, fmt.Errorf("%w: no bulk action %q on this dashboard (jobs live as long as the process)", inspect.ErrNotFound, id))
		return
	}
	st := j.state()
	refresh := 0
	if st.Running {
		refresh = JobRefreshSeconds
	}
	s.render(w, r, http.StatusOK, "job.html", page{Title: "Bulk " + st.Kind, Scope: st.Scope, Refresh: refresh, Data: st})
}
