package queries_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/tidbtest"
)

// TestWakeEndpointLifecycle: an endpoint registers, re-registers in place
// (a new address and key, one row), is listed only while live, renews until
// it is removed (then renewing reports 0 rows: register again), and the
// sweep deletes only endpoints expired longer than its grace, of its own
// scope. Endpoint ids differing by a trailing space are two endpoints (the
// key's collation is NO PAD).
func TestWakeEndpointLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := tidbtest.NewDB(t)
	q := gen.New(db)
	const other = "tenant-b/pack-1"
	register := func(scope, id, addr string, ttl time.Duration) {
		t.Helper()
		if err := q.RegisterWakeEndpoint(ctx, gen.RegisterWakeEndpointParams{
			ScopeID: scope, EndpointID: id, Address: addr, WakeKey: []byte("key-of-" + id), TTLMicros: ttl.Microseconds(),
		}); err != nil {
			t.Fatalf("register %q: %v", id, err)
		}
	}
	live := func(scope string) []string {
		t.Helper()
		rows, err := q.ListWakeEndpoints(ctx, scope)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range rows {
			out = append(out, r.EndpointID+"@"+r.Address+"#"+string(r.WakeKey))
		}
		return out
	}

	register(scopeID, "a", "10.0.0.1:7000", time.Hour)
	register(scopeID, "a ", "10.0.0.1:7001", time.Hour)
	register(scopeID, "dead", "10.0.0.1:7002", -time.Hour)        // died an hour ago
	register(scopeID, "just-dead", "10.0.0.1:7003", -time.Second) // within the sweep's grace
	register(other, "a", "10.0.0.9:7000", -time.Hour)
	register(scopeID, "a", "10.0.0.2:7100", time.Hour) // restarted on another address: the same row

	want := []string{"a@10.0.0.2:7100#key-of-a", "a @10.0.0.1:7001#key-of-a "}
	if diff := cmp.Diff(want, live(scopeID)); diff != "" {
		t.Fatalf("live endpoints (-want +got):\n%s", diff)
	}
	if got := live(other); len(got) != 0 {
		t.Fatalf("other scope lists %v, want nothing live", got)
	}

	if n, err := q.RenewWakeEndpoint(ctx, gen.RenewWakeEndpointParams{TTLMicros: time.Hour.Microseconds(), ScopeID: scopeID, EndpointID: "a"}); err != nil || n != 1 {
		t.Fatalf("renew a: %d rows, %v; want 1", n, err)
	}
	if n, err := q.RemoveWakeEndpoint(ctx, gen.RemoveWakeEndpointParams{ScopeID: scopeID, EndpointID: "a"}); err != nil || n != 1 {
		t.Fatalf("remove a: %d rows, %v; want 1", n, err)
	}
	if n, err := q.RenewWakeEndpoint(ctx, gen.RenewWakeEndpointParams{TTLMicros: time.Hour.Microseconds(), ScopeID: scopeID, EndpointID: "a"}); err != nil || n != 0 {
		t.Fatalf("renew a removed endpoint: %d rows, %v; want 0", n, err)
	}

	n, err := q.SweepExpiredWakeEndpoints(ctx, gen.SweepExpiredWakeEndpointsParams{ScopeID: scopeID, GraceMicros: time.Minute.Microseconds(), Limit: 100})
	if err != nil || n != 1 {
		t.Fatalf("sweep: %d rows, %v; want 1 (only the endpoint dead for an hour)", n, err)
	}
	var left []string
	rows, err := db.QueryContext(ctx, "SELECT CONCAT(scope_id, '/', endpoint_id) FROM wake_endpoint ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		left = append(left, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want = []string{scopeID + "/a ", scopeID + "/just-dead", other + "/a"}
	if diff := cmp.Diff(want, left); diff != "" {
		t.Fatalf("rows after the sweep (-want +got):\n%s", diff)
	}
}
