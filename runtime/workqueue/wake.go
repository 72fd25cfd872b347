package workqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/store"
)

// WakeEndpoint is where one process listens for a scope's wakes (see
// runtime/wake): its address and the HMAC key a wake datagram must be
// tagged with.
type WakeEndpoint struct {
	ID      string // unique per process incarnation and scope
	Address string // host:port, as other processes dial it
	Key     []byte // HMAC-SHA256 key, 32 bytes
	// Process is what the process says about itself, for operators
	// (nil: nothing); written with the registration and each renewal.
	Process *ProcessInfo
}

// ProcessInfo is what a listening process says about itself in its wake
// endpoint row (the processes page of laneq's dashboard,
// inspect.Reader.Processes). Nothing decides anything by it.
type ProcessInfo struct {
	Host      string   `json:"host,omitempty"`
	PID       int      `json:"pid,omitempty"`
	Owner     string   `json:"owner,omitempty"` // the worker's owner name
	Executors int      `json:"executors,omitempty"`
	Classes   []string `json:"classes,omitempty"`    // the queue classes it claims
	WorkTypes []string `json:"work_types,omitempty"` // the work types it runs
	// Quiet: other processes' wakes reached it when it wrote this, so it
	// probed on the quiet periods (see runtime/controller). A worker
	// writes it again at the first maintenance after it changed.
	Quiet bool `json:"quiet"`
	// LeasePrefix starts the lease_owner of every lease it takes
	// (Claimer.LeasePrefix): leases held are counted by it.
	LeasePrefix string `json:"lease_prefix,omitempty"`
	// AbandonedHandlers is how many handlers that ignored their cancelled
	// context were still running when it wrote this: each holds its
	// item's lease, and the item's lanes, until it returns. A worker
	// writes it again at the first maintenance after it changed.
	AbandonedHandlers int64 `json:"abandoned_handlers,omitempty"`
}

// maxProcessInfo bounds the process document (a worker's classes and work
// types are short lists).
const maxProcessInfo = 16 << 10

// processJSON encodes p for the row (nil for none).
func processJSON(p *ProcessInfo) ([]byte, error) {
	if p == nil {
		return nil, nil
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("workqueue: encode process info: %w", err)
	}
	if len(b) > maxProcessInfo {
		return nil, invalidf("process info must encode to at most %d bytes, got %d", maxProcessInfo, len(b))
	}
	return b, nil
}

// Bounds of a WakeEndpoint's fields (the wake_endpoint columns).
const (
	MaxWakeEndpointID      = 64
	MaxWakeEndpointAddress = 255
	WakeKeySize            = 32
)

func (e WakeEndpoint) validate() error {
	if e.ID == "" || len(e.ID) > MaxWakeEndpointID {
		return invalidf("wake endpoint id must be 1..%d bytes, got %d", MaxWakeEndpointID, len(e.ID))
	}
	if e.Address == "" || len(e.Address) > MaxWakeEndpointAddress {
		return invalidf("wake endpoint address must be 1..%d bytes, got %d", MaxWakeEndpointAddress, len(e.Address))
	}
	for i := 0; i < len(e.Address); i++ {
		if e.Address[i] <= 0x20 || e.Address[i] > 0x7e {
			return invalidf("wake endpoint address must be printable ASCII without spaces, got byte 0x%02x at %d", e.Address[i], i)
		}
	}
	if len(e.Key) != WakeKeySize {
		return invalidf("wake endpoint key must be %d bytes, got %d", WakeKeySize, len(e.Key))
	}
	return nil
}

// registration checks e and ttl for a registration and encodes what its
// process says about itself.
func (e WakeEndpoint) registration(ttl time.Duration) (process []byte, err error) {
	if err := e.validate(); err != nil {
		return nil, err
	}
	if ttl <= 0 {
		return nil, invalidf("wake endpoint ttl must be positive, got %s", ttl)
	}
	return processJSON(e.Process)
}

// RegisterWakeEndpoint announces (or announces again) that e listens for
// scope's wakes until ttl from now on the database clock.
func (qu *Queue) RegisterWakeEndpoint(ctx context.Context, scope string, e WakeEndpoint, ttl time.Duration) error {
	if err := validScope(scope); err != nil {
		return err
	}
	process, err := e.registration(ttl)
	if err != nil {
		return err
	}
	err = qu.q.RegisterWakeEndpoint(ctx, gen.RegisterWakeEndpointParams{
		ScopeID: scope, EndpointID: e.ID, Address: e.Address, WakeKey: e.Key, TTLMicros: store.Micros(ttl), Process: process,
	})
	if err != nil {
		return fmt.Errorf("workqueue: register wake endpoint %q of scope %q: %w", e.ID, scope, err)
	}
	return nil
}

// RenewWakeEndpoint moves the endpoint's expiry to ttl from now and
// rewrites what its process says about itself (nil: nothing); found is
// false when its row is gone (swept while this process was paused), and
// the caller registers again.
func (qu *Queue) RenewWakeEndpoint(ctx context.Context, scope, endpointID string, ttl time.Duration, process *ProcessInfo) (found bool, err error) {
	doc, err := processJSON(process)
	if err != nil {
		return false, err
	}
	n, err := qu.q.RenewWakeEndpoint(ctx, gen.RenewWakeEndpointParams{TTLMicros: store.Micros(ttl), Process: doc, ScopeID: scope, EndpointID: endpointID})
	if err != nil {
		return false, fmt.Errorf("workqueue: renew wake endpoint %q of scope %q: %w", endpointID, scope, err)
	}
	return n > 0, nil
}

// RemoveWakeEndpoint deletes the endpoint (a process that stops).
func (qu *Queue) RemoveWakeEndpoint(ctx context.Context, scope, endpointID string) error {
	if _, err := qu.q.RemoveWakeEndpoint(ctx, gen.RemoveWakeEndpointParams{ScopeID: scope, EndpointID: endpointID}); err != nil {
		return fmt.Errorf("workqueue: remove wake endpoint %q of scope %q: %w", endpointID, scope, err)
	}
	return nil
}

// WakeEndpoints lists scope's live (unexpired) endpoints by id.
func (qu *Queue) WakeEndpoints(ctx context.Context, scope string) ([]WakeEndpoint, error) {
	rows, err := qu.q.ListWakeEndpoints(ctx, scope)
	if err != nil {
		return nil, fmt.Errorf("workqueue: list wake endpoints of scope %q: %w", scope, err)
	}
	out := make([]WakeEndpoint, len(rows))
	for i, r := range rows {
		out[i] = WakeEndpoint{ID: r.EndpointID, Address: r.Address, Key: r.WakeKey}
	}
	return out, nil
}

// SweepWakeEndpoints deletes up to limit of scope's endpoints that expired
// more than grace ago (processes that died without removing theirs).
func (qu *Queue) SweepWakeEndpoints(ctx context.Context, scope string, grace time.Duration, limit int32) (int64, error) {
	n, err := qu.q.SweepExpiredWakeEndpoints(ctx, gen.SweepExpiredWakeEndpointsParams{ScopeID: scope, GraceMicros: store.Micros(grace), Limit: limit})
	if err != nil {
		return n, fmt.Errorf("workqueue: sweep expired wake endpoints of scope %q: %w", scope, err)
	}
	return n, nil
}
