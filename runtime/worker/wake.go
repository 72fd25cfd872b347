package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/laneq/laneq/runtime/clock"
	"github.com/laneq/laneq/runtime/wake"
	"github.com/laneq/laneq/runtime/workqueue"
)

// startWakes subscribes the worker's scope on its wake hub (its own, or
// Config.Wake.Shared) and watches its Queue there, so other processes
// wake it and it wakes them. A failed subscription is logged and the
// worker probes on the normal periods; a hub that cannot be built (its
// listen address is taken or invalid) is a configuration error. stop
// removes the endpoint and closes an own hub (the Queue announced every
// release and retry already; see workqueue.Announcement).
func (w *Worker) startWakes(ctx context.Context) (stop func(), err error) {
	if g := w.grouped; g != nil { // the group's one endpoint serves every member
		g.mu.Lock()
		hub, quiet := g.hub, g.healthy
		g.mu.Unlock()
		if hub != nil {
			w.hub.Store(hub)
		}
		w.ctrl.SetQuiet(quiet)
		return func() {
			w.ctrl.SetQuiet(false)
			w.hub.Store(nil)
		}, nil
	}
	wc := w.cfg.Wake
	if wc.Off {
		return func() {}, nil
	}
	hub, own, err := wc.open(w.q, w.log, w.clock)
	if err != nil {
		return nil, err
	}
	w.hub.Store(hub)
	sub, err := hub.Subscribe(ctx, w.cfg.Scope, wake.Handlers{
		Wake: func(lookFar bool) {
			if lookFar {
				w.ctrl.WakeLookFar()
			} else {
				w.ctrl.Wake()
			}
			if s := w.wakeSub.Load(); s != nil && s.Healthy() {
				w.ctrl.SetQuiet(true) // a wake arrived: the path works again
			}
		},
		Rewind:   w.rewind,
		Health:   w.ctrl.SetQuiet,
		Describe: w.describe,
	})
	if err != nil {
		w.log.Warn("wake endpoint not registered: other processes cannot wake this worker; it probes on the normal period", "err", err)
	} else {
		w.wakeSub.Store(sub)
	}
	return func() {
		if sub != nil {
			if err := sub.Close(); err != nil {
				w.log.Warn("wake endpoint not removed (it expires by itself)", "err", err)
			}
			w.wakeSub.Store(nil)
		}
		w.ctrl.SetQuiet(false)
		w.hub.Store(nil)
		if own {
			if err := hub.Close(); err != nil {
				w.log.Warn("closing the wake hub", "err", err)
			}
		}
	}, nil
}

// open returns the hub wakes go through, watching q: Shared, or a hub of
// its own (own: the caller closes it) built from Hub, logging to log on
// clk unless Hub says otherwise.
func (wc WakeConfig) open(q *workqueue.Queue, log *slog.Logger, clk clock.Clock) (hub *wake.Hub, own bool, err error) {
	hub = wc.Shared
	if hub == nil {
		hc := wc.Hub
		if hc.Logger == nil {
			hc.Logger = log
		}
		if hc.Clock == nil {
			hc.Clock = clk
		}
		if hub, err = wake.New(q, hc); err != nil {
			return nil, false, fmt.Errorf("worker: wake hub: %w", err)
		}
		own = true
	}
	hub.Watch(q)
	return hub, own, nil
}

// describe is what this worker says about itself in its wake endpoint row
// (the dashboard's processes page): read at registration and renewal.
func (w *Worker) describe() workqueue.ProcessInfo {
	host, _ := os.Hostname()
	return workqueue.ProcessInfo{
		Host: host, PID: os.Getpid(), Owner: w.cfg.Owner, Executors: w.cfg.Scheduler.Executors,
		Classes: slices.Clone(w.classes), WorkTypes: slices.Clone(w.types), Quiet: w.ctrl.Quiet(),
		LeasePrefix: w.claimer.LeasePrefix(), AbandonedHandlers: w.sched.Stats().AbandonedRunning,
	}
}

// describedState is the part of the process description that changes
// while the worker runs.
type describedState struct {
	quiet     bool
	abandoned int64
}

// describeChange writes the endpoint row again when the quiet mode or the
// count of abandoned handlers it last described changed (at maintenance:
// one statement per change, none otherwise), so the dashboard's processes
// page and metrics say whether the process runs quiet and how many
// handlers hold their items past their context, at most one maintenance
// period late.
func (w *Worker) describeChange(ctx context.Context) error {
	if g := w.grouped; g != nil { // the group's one endpoint row describes every member
		return g.describeChange(ctx)
	}
	sub := w.wakeSub.Load()
	if sub == nil {
		return nil
	}
	now := describedState{quiet: w.ctrl.Quiet(), abandoned: w.sched.Stats().AbandonedRunning}
	if was := w.described.Load(); was != nil && *was == now {
		return nil
	}
	if err := sub.Renew(ctx); err != nil {
		return fmt.Errorf("describe the process again: %w", err)
	}
	w.described.Store(&now)
	return nil
}

// describeChange is Worker.describeChange for the group's endpoint row,
// which sums its members' abandoned handlers: its members call it at
// their maintenance.
func (g *Group) describeChange(ctx context.Context) error {
	g.mu.Lock()
	sub := g.sub
	g.mu.Unlock()
	if sub == nil {
		return nil
	}
	info := g.describe()
	now := describedState{quiet: info.Quiet, abandoned: info.AbandonedHandlers}
	if was := g.described.Load(); was != nil && *was == now {
		return nil
	}
	if err := sub.Renew(ctx); err != nil {
		return fmt.Errorf("describe the process again: %w", err)
	}
	g.described.Store(&now)
	return nil
}
