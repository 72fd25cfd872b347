package ingress_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/waitfor"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/worker"
)

// TestWebhookToHandler runs the whole path a backend team deploys, in one
// process: deliveries posted to the webhook handler (some twice, as
// providers redeliver), the router materializing them through the queue
// the worker claims from, the worker's handlers. Every fact's handler runs
// exactly once, and each run sees the receipt it came from.
func TestWebhookToHandler(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := f.in.Handler(ingress.HandlerConfig{Verify: verifyHMAC, Resolve: resolveHeaders, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	const deliveries = 60
	var mu sync.Mutex
	ran := map[string]int{}
	done := make(chan struct{})
	cfg := worker.Config{Scope: scope, Owner: "pipeline", Logger: quiet, Wake: worker.WakeConfig{Off: true}}
	w, err := worker.New(f.qu, cfg, map[string]worker.Handler{
		"deliver": func(_ context.Context, job *worker.Job) error {
			mu.Lock()
			defer mu.Unlock()
			if job.Event.ReceiptID == 0 {
				t.Errorf("event %d has no receipt", job.Event.EventID)
			}
			ran[string(job.Event.Payload)]++
			if len(ran) == 2*deliveries {
				close(done)
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
	defer cancel()
	go func() { _ = w.Run(ctx) }()
	f.run(f.router(ingress.RouterConfig{Classes: []string{"interactive", ingress.DefaultClass}}))

	post := func(i int) int {
		body := fmt.Sprintf("p%d-a,p%d-b", i, i)
		req, _ := http.NewRequest("POST", srv.URL+"/hooks/crm", strings.NewReader(body))
		req.Header.Set("X-Signature", sign([]byte(body)))
		req.Header.Set("X-Delivery-ID", fmt.Sprintf("pipe-%d", i))
		req.Header.Set("X-Class", []string{"interactive", ""}[i%2])
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for i := range deliveries {
		if got := post(i); got != http.StatusAccepted {
			t.Fatalf("delivery %d: %d", i, got)
		}
		if i%3 == 0 { // a provider redelivery
			if got := post(i); got != http.StatusOK {
				t.Fatalf("redelivery %d: %d", i, got)
			}
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatalf("handlers ran for %d of %d facts", len(ran), 2*deliveries)
	}
	waitfor.Until(t, time.Minute, func() (bool, error) {
		return f.count("SELECT COUNT(*) FROM work_item WHERE state = 'completed'") >= 2*deliveries, nil
	}, func() string { return "work items not all completed" })
	if n := f.count("SELECT COUNT(*) FROM work_item WHERE attempt_count <> 1"); n != 0 {
		t.Fatalf("%d work items ran more than once", n)
	}
	if n := f.count("SELECT COUNT(*) FROM work_item"); n != 2*deliveries {
		t.Fatalf("%d work items, want %d", n, 2*deliveries)
	}
	cancel()
	mu.Lock()
	defer mu.Unlock()
	counts := slices.Collect(func(yield func(int) bool) {
		for _, n := range ran {
			if !yield(n) {
				return
			}
		}
	})
	if slices.Max(counts) != 1 {
		t.Fatalf("a fact's handler ran %d times", slices.Max(counts))
	}
}
