// Package dashboard is laneq's web dashboard: server-rendered pages
// (net/http, html/template, embedded assets, no JavaScript) over the same
// reads as the laneq command: scopes, per-class statistics, dead letters
// with filters, one item's history and why it is not running, a lane in
// order, Prometheus metrics, and, only when enabled, write actions (replay,
// bulk replay, retry now, skip, pause and resume a class; actions.go), each
// guarded by a confirmation page, a CSRF token and cross-origin protection. Every
// request must name the dashboard in its Host header (see hostAllowed), or
// it is refused with 421 Misdirected Request.
package dashboard

import (
	"context"
	"crypto/rand"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/laneq/laneq/runtime/inspect"
	"github.com/laneq/laneq/runtime/stats"
	"github.com/laneq/laneq/runtime/workqueue"
)

//go:embed templates/*.html static/*
var assets embed.FS

// Config configures a dashboard.
type Config struct {
	// AllowWrites enables the write actions (replay, bulk replay, retry
	// now, skip, pause, resume: see actions.go), each behind its
	// confirmation page; without it the dashboard is read-only and refuses
	// every POST.
	AllowWrites bool
	// Timeout bounds each request's database work (default 10s).
	Timeout time.Duration
	Logger  *slog.Logger
	// AllowedHosts are further names a request's Host header may use, for
	// when browsers reach the dashboard by a DNS name or through a proxy.
	// Without them only the address the connection arrived at and the
	// loopback names (localhost, 127.x.x.x, [::1]), each with the port it
	// arrived on, are answered; every other Host gets 421, because a page
	// at an attacker's name that re-resolves to this address (DNS
	// rebinding) is otherwise same-origin with the dashboard. "name"
	// accepts the name on that port or without a port (what a browser
	// sends to a proxy on a default port); "name:port" accepts exactly
	// that. Names compare case-insensitively; a trailing dot is part of a
	// name, so "localhost." is refused unless listed. New refuses a
	// malformed entry with a *ConfigError.
	AllowedHosts []string
	// Login, when set, is the credential every request must carry (HTTP
	// basic auth; see Login). laneq ui refuses to listen beyond loopback,
	// or to start with AllowWrites, without one: CSRF tokens stop
	// browsers, not a local process posting to a loopback listener.
	Login *Login
}

// Server serves the dashboard.
type Server struct {
	cfg   Config
	qu    *workqueue.Queue
	st    *stats.Reader
	in    *inspect.Reader
	pages *template.Template
	key   []byte // signs CSRF tokens; fresh per process
	mux   *http.ServeMux
	hosts []hostPort // Config.AllowedHosts, parsed
	jobs  jobs       // bulk replays
}

// New returns a dashboard on db.
func New(db *sql.DB, cfg Config) (*Server, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	hosts, err := parseAllowedHosts(cfg.AllowedHosts)
	if err != nil {
		return nil, err
	}
	qu, err := workqueue.New(db, workqueue.Config{})
	if err != nil {
		return nil, fmt.Errorf("dashboard: %w", err)
	}
	st, in := stats.NewFromQueue(qu), inspect.NewFromQueue(qu)
	pages, err := template.New("").Funcs(template.FuncMap{
		"count": stats.FormatCount,
		"age":   ageCell,
		"when":  func(t time.Time) string { return whenCell(t) },
		"query": func(v url.Values) template.URL { return template.URL(v.Encode()) },
		"has":   func(list []string, v string) bool { return slices.Contains(list, v) },
	}).ParseFS(assets, "templates/*.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("dashboard: CSRF key: %w", err)
	}
	s := &Server{cfg: cfg, qu: qu, st: st, in: in, pages: pages, key: key, mux: http.NewServeMux(), hosts: hosts}
	s.jobs.ctx, s.jobs.cancel = context.WithCancel(context.Background())
	s.mux.Handle("GET /static/", http.FileServerFS(assets))
	s.mux.HandleFunc("GET /{$}", s.scopes)
	s.mux.HandleFunc("GET /scope", s.scope)
	s.mux.HandleFunc("GET /dlq", s.deadLetters)
	s.mux.HandleFunc("GET /item", s.item)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("GET /lane", s.lane)
	s.mux.HandleFunc("GET /processes", s.processes)
	s.mux.HandleFunc("GET /job", s.job)
	for _, a := range s.actions() {
		s.mux.HandleFunc("GET "+a.path, s.confirm(a))
		s.mux.HandleFunc("POST "+a.path, s.perform(a))
	}
	return s, nil
}

// ServeHTTP serves the dashboard behind the Host check (a request for
// another host, as a DNS-rebinding page sends, is refused before any
// handler runs, static files included), cross-origin protection (so is a
// POST from another site) and a session cookie that CSRF tokens are bound
// to.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; form-action 'self'; frame-ancestors 'none'")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if !s.checkHost(w, r) || !s.checkLogin(w, r) {
		return
	}
	http.NewCrossOriginProtection().Handler(s.mux).ServeHTTP(w, r)
}

const sessionCookie = "laneq_session"

// ScopeRefreshSeconds is how often a scope page with capped counts loads
// itself again (?live=0 stops it).
const ScopeRefreshSeconds = 10

// session returns the request's session id, setting a fresh one when the
// request has none.
func (s *Server) session(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(sessionCookie); err == nil && len(c.Value) == 32 {
		return c.Value
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	id := hex.EncodeToString(b)
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return id
}

type page struct {
	Title       string
	AllowWrites bool
	// Scope, when set, is the scope the page is about: the header says
	// which of its classes are paused (one point read of the scope row).
	Scope  string
	Paused []string
	// Refresh, when set, makes the browser load the page again after that
	// many seconds (a meta refresh: no script, so the page works, and
	// updates, under the dashboard's Content-Security-Policy).
	Refresh int
	Error   string
	Data    any
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.AllowWrites = s.cfg.AllowWrites
	if p.Scope != "" {
		ctx, cancel := s.ctx(r)
		// A failed read leaves the banner out; the page itself was read.
		p.Paused, _ = s.qu.PausedClasses(ctx, p.Scope)
		cancel()
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	if err := s.pages.ExecuteTemplate(w, name, p); err != nil {
		s.cfg.Logger.Error("dashboard: render", "page", name, "err", err)
	}
}

// fail renders an error page with the status the error means.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, stats.ErrInvalid), errors.Is(err, inspect.ErrInvalid), errors.Is(err, workqueue.ErrInvalid):
		status = http.StatusBadRequest
	case errors.Is(err, workqueue.ErrUnknownScope), errors.Is(err, inspect.ErrNotFound):
		status = http.StatusNotFound
	case errors.Is(err, workqueue.ErrNotReplayable), errors.Is(err, workqueue.ErrAlreadyReplayed), errors.Is(err, workqueue.ErrRefused):
		status = http.StatusConflict
	case errors.Is(err, errTooManyJobs):
		status = http.StatusTooManyRequests
	default:
		s.cfg.Logger.Error("dashboard", "err", err)
	}
	s.render(w, r, status, "error.html", page{Title: http.StatusText(status), Error: err.Error()})
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.Timeout)
}

func (s *Server) scopes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	after := r.URL.Query().Get("after")
	list, err := s.in.Scopes(ctx, after, 100)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	next := ""
	if len(list) == 100 {
		next = list[len(list)-1].Scope
	}
	s.render(w, r, http.StatusOK, "scopes.html", page{Title: "Scopes", Data: map[string]any{"Scopes": list, "Next": next}})
}

func (s *Server) scope(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	q := r.URL.Query()
	read := s.st.Cheap
	if q.Get("exact") == "1" {
		read = s.st.Exact
	}
	st, err := read(ctx, q.Get("s"), stats.Filter{})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// The capped counts update themselves (each costs one capped statement
	// per class); the exact ones, which read the backlog, never do; live=0
	// stops it.
	live := !st.Exact && q.Get("live") != "0"
	refresh := 0
	if live {
		refresh = ScopeRefreshSeconds
	}
	// The charts: what workers recorded over the window (queue_history;
	// minutes x kinds x processes, never items).
	points, cut, err := s.in.History(ctx, st.Scope, st.At.Add(-HistoryWindow))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.render(w, r, http.StatusOK, "scope.html", page{Title: st.Scope, Scope: st.Scope, Refresh: refresh, Data: map[string]any{
		"Stats": st, "CapCount": stats.CapCount, "Live": live, "RefreshSeconds": ScopeRefreshSeconds,
		"Charts": charts(points, st.At), "HistoryCut": cut,
	}})
}

func (s *Server) deadLetters(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	q := r.URL.Query()
	dq, err := deadLetterQuery(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	dq.Cursor = q.Get("cursor")
	p, err := s.in.DeadLetters(ctx, q.Get("s"), dq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	next := url.Values{}
	if p.Next != "" {
		for k, v := range q {
			next[k] = v
		}
		next.Set("cursor", p.Next)
	}
	s.render(w, r, http.StatusOK, "dlq.html", page{Title: "Dead letters of " + p.Scope, Scope: p.Scope, Data: map[string]any{
		"Page": p, "Filter": dq, "Since": q.Get("since"), "Until": q.Get("until"), "Next": next, "Filters": dlqFilters(q),
	}})
}

// dlqFilters are the scope and dead-letter filters of a request, as the
// dead letters page and the bulk replay take them.
func dlqFilters(in url.Values) url.Values {
	out := url.Values{"s": {in.Get("s")}}
	for _, k := range []string{"work_type", "failure_class", "since", "until"} {
		if v := in.Get(k); v != "" {
			out.Set(k, v)
		}
	}
	return out
}

// deadLetterQuery reads the dead-letter filters (the dead letters page's
// and the bulk replay's).
func deadLetterQuery(in url.Values) (inspect.DeadLetterQuery, error) {
	dq := inspect.DeadLetterQuery{WorkType: in.Get("work_type"), FailureClass: in.Get("failure_class")}
	var err error
	if dq.From, err = parseTime("since", in.Get("since")); err != nil {
		return dq, err
	}
	dq.To, err = parseTime("until", in.Get("until"))
	return dq, err
}

func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	for _, layout := range []string{time.RFC3339, "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, &inspect.InvalidError{Field: field, Reason: fmt.Sprintf("%q is not a time (RFC 3339 or 2006-01-02T15:04 UTC)", s)}
}

func workID(value string) (int64, error) {
	id, err := strconv.ParseInt(value, 10, 64)
	if err != nil || id <= 0 {
		return 0, &inspect.InvalidError{Field: "id", Reason: fmt.Sprintf("%q is not a work id", value)}
	}
	return id, nil
}

// lane is one lane in order: its head and a page of what is blocked
// behind it (inspect.Reader.Lane).
func (s *Server) lane(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	q := r.URL.Query()
	lq := inspect.LaneQuery{Source: q.Get("source"), Target: q.Get("target")}
	if v := q.Get("after"); v != "" {
		after, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			s.fail(w, r, &inspect.InvalidError{Field: "after", Reason: fmt.Sprintf("%q is not a lane ordinal", v)})
			return
		}
		lq.After = after
	}
	p, err := s.in.Lane(ctx, q.Get("s"), lq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	next := url.Values{}
	if p.Next != 0 {
		for k, v := range q {
			next[k] = v
		}
		next.Set("after", strconv.FormatInt(p.Next, 10))
	}
	s.render(w, r, http.StatusOK, "lane.html", page{Title: fmt.Sprintf("%s lane %s", strings.ToUpper(p.Kind[:1])+p.Kind[1:], p.Lane), Scope: p.Scope,
		Data: map[string]any{"Page": p, "After": lq.After, "Next": next}})
}

// readItem reads the item the request's id names; on failure it has
// rendered the error page and reports false.
func (s *Server) readItem(w http.ResponseWriter, r *http.Request, value string) (inspect.Item, bool) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	id, err := workID(value)
	if err == nil {
		var it inspect.Item
		if it, err = s.in.Item(ctx, id); err == nil {
			return it, true
		}
	}
	s.fail(w, r, err)
	return inspect.Item{}, false
}

func (s *Server) item(w http.ResponseWriter, r *http.Request) {
	it, ok := s.readItem(w, r, r.URL.Query().Get("id"))
	if !ok {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	why, err := s.in.Why(ctx, it)
	if err != nil {
		// The item is still worth showing: say the reason could not be read.
		why = inspect.Why{Text: "could not tell: " + err.Error()}
	}
	s.render(w, r, http.StatusOK, "item.html", page{Title: fmt.Sprintf("Work item %d", it.WorkID), Scope: it.Scope, Data: map[string]any{
		"Item": it, "Why": why,
		// The actions the item's state allows (each still checked when done).
		"Replayable": it.State == workqueue.StateDead && it.ReplayedAt.IsZero(),
		"RetryNow":   it.State == workqueue.StatePending && it.RunAfter.After(it.At),
		"Skippable":  slices.Contains([]string{workqueue.StatePending, workqueue.StateBlocked, workqueue.StateWaitingDependency}, it.State),
		"Cancelable": slices.Contains([]string{workqueue.StatePending, workqueue.StateBlocked, workqueue.StateWaitingDependency, workqueue.StateProcessing}, it.State),
	}})
}

func ageCell(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(time.Second).String()
}

func whenCell(t time.Time) string {
	if t.IsZero() {
		return "–"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}
