package laneq

import (
	"fmt"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/wake"
)

// IngressConfig turns on webhook receipts for the Client's scope
// (runtime/ingress): the Inbox accepts deliveries durably and
// idempotently, and Start runs a router that turns each receipt into
// events, exactly once, through Route.
type IngressConfig struct {
	// Route turns a receipt into the events it stands for (required; see
	// ingress.RouteFunc for keys, errors and panics).
	Route ingress.RouteFunc
	// Inbox bounds what Accept takes (ingress.Config: MaxBody).
	Inbox ingress.Config
	// Router tunes the router Start runs: classes, lease, batches,
	// attempts, backstops (ingress.RouterConfig). Its Scope and Route are
	// the Client's; its Wakes default to the Client's wake hub.
	Router ingress.RouterConfig
}

func (ic *IngressConfig) validate(scope string) error {
	if ic.Route == nil {
		return &ConfigError{Setting: "Ingress.Route", Reason: "required"}
	}
	if ic.Router.Route != nil {
		return &ConfigError{Setting: "Ingress.Router.Route", Reason: "set Ingress.Route instead"}
	}
	if ic.Router.Scope != "" && ic.Router.Scope != scope {
		return &ConfigError{Setting: "Ingress.Router.Scope", Reason: fmt.Sprintf("%q differs from Scope %q (leave it empty)", ic.Router.Scope, scope)}
	}
	return nil
}

// Inbox accepts deliveries for the Client's scope (nil without
// Config.Ingress): call Accept, or serve Handler(...) over HTTP. A
// receipt's acceptance wakes the routers of this process at once and, over
// the Client's wake hub, those of other processes.
func (c *Client) Inbox() *ingress.Inbox { return c.inbox }

// Router is the receipt router (nil without Config.Ingress), for its
// Stats; it runs from Start to Stop.
func (c *Client) Router() *ingress.Router { return c.router }

// newIngress builds the Inbox, the router Start runs (so Open refuses a bad
// RouterConfig), and, unless wakes are off, the wake hub that carries the
// Inbox's accepts and the Queue's announcements to other processes (and
// wakes this process's worker and router). One hub per Client: the worker
// shares it instead of opening its own. On an error nothing is left open.
func (c *Client) newIngress() error {
	ic := c.cfg.Ingress
	in, err := ingress.NewFromQueue(c.qu, ic.Inbox)
	if err != nil {
		return fmt.Errorf("laneq: ingress: %w", err)
	}
	c.inbox = in
	wk := c.cfg.Worker.Wake
	switch {
	case wk.Off:
	case wk.Shared != nil:
		c.hub = wk.Shared
	default:
		hcfg := wk.Hub
		if hcfg.Logger == nil {
			hcfg.Logger = c.log
		}
		if c.hub, err = wake.New(c.qu, hcfg); err != nil {
			return fmt.Errorf("laneq: wake hub: %w", err)
		}
		c.ownsHub = true
	}
	if c.router, err = c.newRouter(); err != nil {
		if c.ownsHub {
			_ = c.hub.Close()
		}
		return err
	}
	if c.hub != nil {
		c.stopAnnounce = in.AnnounceTo(c.hub)
	}
	return nil
}

// newRouter is the router Start runs: the Client's scope, route and hub.
func (c *Client) newRouter() (*ingress.Router, error) {
	rcfg := c.cfg.Ingress.Router
	rcfg.Scope, rcfg.Route = c.cfg.Scope, c.cfg.Ingress.Route
	if rcfg.Wakes == nil {
		rcfg.Wakes = c.hub
	}
	if rcfg.Logger == nil {
		rcfg.Logger = c.log
	}
	r, err := c.inbox.NewRouter(c.qu, rcfg)
	if err != nil {
		return nil, fmt.Errorf("laneq: router: %w", err)
	}
	return r, nil
}
