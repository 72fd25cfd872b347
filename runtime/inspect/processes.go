package inspect

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/runtime/workqueue"
)

// Bounds of Processes' reads.
const (
	// MaxProcesses is how many registered processes of a scope Processes
	// lists.
	MaxProcesses = 500
	// maxLeasesCounted bounds the processing rows counted per page: a
	// scope runs at most as many items as its processes have executors.
	maxLeasesCounted = 10000
)

// Process is one worker process of a scope, as its wake endpoint row
// says (runtime/wake registers one per process and scope; a worker with
// wakes off registers none and is not listed).
type Process struct {
	EndpointID string
	Address    string // where it listens for wakes
	// Info is what the process said about itself at its last registration
	// or renewal (zero when it said nothing).
	Info         workqueue.ProcessInfo
	RegisteredAt time.Time
	RenewedAt    time.Time // its last registration or renewal
	ExpiresAt    time.Time
	Live         bool // its registration has not expired (by the database clock)
	Leases       int  // items it holds under a lease now (running, or its lease ran out)
	Expired      int  // of those, leases that ran out (a stalled or dead process)
}

// Processes is a scope's registered processes and the leases they hold.
type Processes struct {
	Scope      string
	Generation int64
	Processes  []Process // by endpoint id; live and recently expired
	Truncated  bool      // more than MaxProcesses are registered
	// Unattributed are leases held under an owner no listed process
	// claims (a process with wakes off, or one whose row was swept).
	Unattributed        int
	UnattributedExpired int
	LeasesCapped        bool // more than 10,000 leases: counts stop there
}

// Processes reads scope's registered worker processes, what each says
// about itself (host, process id, executors, classes, work types) and how
// many leases each holds: the scope's range of wake_endpoint, and the
// processing range of the active generation cut at 10,000 rows.
func (r *Reader) Processes(ctx context.Context, scope string) (Processes, error) {
	if scope == "" {
		return Processes{}, &InvalidError{Field: "scope", Reason: "empty"}
	}
	generation, err := r.generation(ctx, scope, 0)
	if err != nil {
		return Processes{}, err
	}
	out := Processes{Scope: scope, Generation: generation}
	if out.Processes, out.Truncated, err = r.registered(ctx, scope); err != nil {
		return Processes{}, err
	}
	leases, err := r.q.LeaseOwnerCounts(ctx, gen.LeaseOwnerCountsParams{ScopeID: scope, Generation: generation, Limit: maxLeasesCounted})
	if err != nil {
		return Processes{}, fmt.Errorf("inspect: leases of scope %q: %w", scope, err)
	}
	total := 0
next:
	for _, l := range leases {
		total += int(l.Leases)
		for i := range out.Processes {
			if p := &out.Processes[i]; p.Info.LeasePrefix != "" && strings.HasPrefix(l.LeaseOwner.String, p.Info.LeasePrefix) {
				p.Leases += int(l.Leases)
				p.Expired += int(l.Expired)
				continue next
			}
		}
		out.Unattributed += int(l.Leases)
		out.UnattributedExpired += int(l.Expired)
	}
	out.LeasesCapped = total >= maxLeasesCounted
	return out, nil
}

// registered reads the scope's wake endpoint rows, at most MaxProcesses,
// and what each process said about itself.
func (r *Reader) registered(ctx context.Context, scope string) (ps []Process, truncated bool, err error) {
	rows, err := r.q.ScopeProcesses(ctx, gen.ScopeProcessesParams{ScopeID: scope, Limit: MaxProcesses + 1})
	if err != nil {
		return nil, false, fmt.Errorf("inspect: processes of scope %q: %w", scope, err)
	}
	if len(rows) > MaxProcesses {
		rows, truncated = rows[:MaxProcesses], true
	}
	for _, row := range rows {
		p := Process{EndpointID: row.EndpointID, Address: row.Address, RegisteredAt: row.RegisteredAt,
			RenewedAt: row.RenewedAt.Time, ExpiresAt: row.ExpiresAt, Live: row.Live == 1}
		if p.RenewedAt.IsZero() {
			p.RenewedAt = row.RegisteredAt // a row registered before renewals were recorded
		}
		if len(row.Process) > 0 {
			// A document no laneq wrote is shown as nothing rather than
			// failing the page.
			_ = json.Unmarshal(row.Process, &p.Info)
		}
		ps = append(ps, p)
	}
	return ps, truncated, nil
}

// AbandonedHandlers is how many handlers that ignored their cancelled
// context the scope's live processes said they still run (each holds its
// item and the item's lanes until it returns): one read of the scope's
// wake endpoint rows, none of its items, so a metrics scrape can afford
// it. Processes with wakes off register nothing and are not counted.
func (r *Reader) AbandonedHandlers(ctx context.Context, scope string) (int64, error) {
	if scope == "" {
		return 0, &InvalidError{Field: "scope", Reason: "empty"}
	}
	ps, _, err := r.registered(ctx, scope)
	if err != nil {
		return 0, err
	}
	return Processes{Processes: ps}.AbandonedHandlers(), nil
}

// AbandonedHandlers sums what the live processes of ps said of their
// abandoned handlers still running.
func (ps Processes) AbandonedHandlers() int64 {
	var n int64
	for _, p := range ps.Processes {
		if p.Live {
			n += p.Info.AbandonedHandlers
		}
	}
	return n
}

// Serves reports whether some live process of ps claims class.
func (ps Processes) Serves(class string) bool {
	for _, p := range ps.Processes {
		if p.Live {
			for _, c := range p.Info.Classes {
				if c == class {
					return true
				}
			}
		}
	}
	return false
}
