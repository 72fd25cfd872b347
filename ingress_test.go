package laneq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/laneq/laneq"
	"github.com/laneq/laneq/internal/tidbtest"
	"github.com/laneq/laneq/laneqtest"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

// routeGreeting turns a delivery whose body is a greet into one greet item.
func routeGreeting(_ context.Context, r ingress.Claimed) ([]workqueue.Event, error) {
	var g greet
	if err := json.Unmarshal(r.Body, &g); err != nil {
		return nil, ingress.Terminal("bad_body", err)
	}
	ev, err := laneq.NewEvent(g)
	if err != nil {
		return nil, ingress.Terminal("bad_greet", err)
	}
	return []workqueue.Event{ev}, nil
}

func greeting(scope, id, name string) ingress.Delivery {
	return ingress.Delivery{Scope: scope, DeliveryID: id, Method: "POST", RouteKey: "greet", Body: []byte(fmt.Sprintf(`{"name":%q}`, name))}
}

// TestClientIngress: a Client with Config.Ingress accepts deliveries, its
// router turns each into exactly one item, and its worker runs it; a
// redelivery writes nothing and runs nothing again.
func TestClientIngress(t *testing.T) {
	t.Parallel()
	c, _ := openClient(t, laneq.Config{Ingress: &laneq.IngressConfig{Route: routeGreeting}})
	if c.Inbox() == nil {
		t.Fatal("Inbox() is nil with Config.Ingress")
	}
	ran := make(chan string, 10)
	events := startWorker(t, c, func(_ context.Context, job *laneq.Job[greet]) error {
		ran <- job.Args.Name
		return nil
	}, laneq.EventCompleted)
	ctx := context.Background()
	acc, err := c.Inbox().Accept(ctx, greeting(c.Scope(), "d-1", "ada"))
	if err != nil || acc.Duplicate {
		t.Fatalf("Accept = %+v, %v", acc, err)
	}
	e := nextEvent(t, events)
	if e.WorkType != "greet" || <-ran != "ada" {
		t.Fatalf("completion %+v", e)
	}
	again, err := c.Inbox().Accept(ctx, greeting(c.Scope(), "d-1", "ada"))
	if err != nil || !again.Duplicate || again.Receipt.ID != acc.Receipt.ID {
		t.Fatalf("redelivery = %+v, %v; want the same receipt, duplicate", again, err)
	}
	laneqtest.WaitFor(t, "the receipt materialized", func() (bool, error) {
		r, err := c.Inbox().Receipt(ctx, acc.Receipt.ID)
		return r.Status == ingress.StatusMaterialized, err
	})
	r, err := c.Inbox().Receipt(ctx, acc.Receipt.ID)
	if err != nil || len(r.EventIDs) != 1 {
		t.Fatalf("receipt %+v, %v: want one event", r, err)
	}
	laneqtest.Drain(t, c)
	if st := c.Router().Stats(); st.Materialized != 1 || st.Events != 1 {
		t.Fatalf("router stats %+v: want one receipt and one event", st)
	}
	select {
	case name := <-ran:
		t.Fatalf("the handler ran again for %q", name)
	default:
	}
}

// TestClientIngressOnly: a Client with Ingress and no handlers starts its
// router alone (a webhook process); another Client on the same scope runs
// the items, and a bad body fails its receipt without an item.
func TestClientIngressOnly(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	ctx := context.Background()
	hooks := openClientOn(t, dsn, laneq.Config{Scope: "tenant-hooks", Ingress: &laneq.IngressConfig{Route: routeGreeting}})
	if err := hooks.Start(ctx); err != nil {
		t.Fatalf("Start with ingress and no handlers: %v", err)
	}
	runner := openClientOn(t, dsn, laneq.Config{Scope: "tenant-hooks"})
	events := startWorker(t, runner, func(context.Context, *laneq.Job[greet]) error { return nil }, laneq.EventCompleted)

	if _, err := hooks.Inbox().Accept(ctx, greeting(hooks.Scope(), "d-ok", "grace")); err != nil {
		t.Fatal(err)
	}
	bad := greeting(hooks.Scope(), "d-bad", "")
	bad.Body = []byte("not json")
	badAcc, err := hooks.Inbox().Accept(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, events); e.WorkType != "greet" {
		t.Fatalf("completion %+v", e)
	}
	laneqtest.WaitFor(t, "the bad receipt failed", func() (bool, error) {
		r, err := hooks.Inbox().Receipt(ctx, badAcc.Receipt.ID)
		return r.Status == ingress.StatusFailed && r.LastErrorClass == "bad_body", err
	})
	// The router counts a failure after its write committed: the receipt
	// can read failed a moment before the count moved (a loaded machine
	// stretches that moment).
	laneqtest.WaitFor(t, "the router counted the failure", func() (bool, error) {
		return hooks.Router().Stats().Failed >= 1, nil
	})
	if st := hooks.Router().Stats(); st.Materialized != 1 || st.Failed != 1 {
		t.Fatalf("router stats %+v: want one materialized, one failed", st)
	}
	if w := hooks.Worker(); w != nil {
		t.Fatalf("an ingress-only Client runs a worker: %v", w)
	}
}

func TestClientIngressRefusesBadConfiguration(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	route := routeGreeting
	for name, ic := range map[string]*laneq.IngressConfig{
		"no route":          {},
		"route twice":       {Route: route, Router: ingress.RouterConfig{Route: route}},
		"another scope":     {Route: route, Router: ingress.RouterConfig{Scope: "other"}},
		"body out of range": {Route: route, Inbox: ingress.Config{MaxBody: -1}},
		"negative backstop": {Route: route, Router: ingress.RouterConfig{Backstop: -1}},
		"a class twice":     {Route: route, Router: ingress.RouterConfig{Classes: []string{"a", "a"}}},
	} {
		c, err := laneq.Open(context.Background(), dsn, laneq.Config{Scope: "s", Migrate: true, Ingress: ic})
		if err == nil {
			_ = c.Close()
			t.Errorf("%s: Open succeeded", name)
			continue
		}
		if !errors.Is(err, laneq.ErrConfig) && !errors.Is(err, ingress.ErrInvalid) {
			t.Errorf("%s: Open = %v, want ErrConfig or ingress.ErrInvalid", name, err)
		}
	}
}
