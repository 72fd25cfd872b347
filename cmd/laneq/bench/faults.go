package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
)

// Fault kinds, as recorded in bench_fault.
const (
	faultKill   = "kill"
	faultFreeze = "freeze"
	faultPause  = "tidb-pause"
	faultDrop   = "drop-connections"
)

// schedule interleaves the planned faults: kill, freeze, TiDB pause,
// dropped connections, kill, ... until every count is spent.
func (f FaultPlan) schedule() []string {
	left := map[string]int{faultKill: f.Kills, faultFreeze: f.Freezes, faultPause: f.TiDBPauses, faultDrop: f.Drops}
	var out []string
	for len(out) < f.Total() {
		for _, k := range []string{faultKill, faultFreeze, faultPause, faultDrop} {
			if left[k] > 0 {
				left[k]--
				out = append(out, k)
			}
		}
	}
	return out
}

// injectFaults runs the schedule, one fault every Faults.Every.
func (p *phase) injectFaults(ctx context.Context) error {
	for i, kind := range p.spec.Faults.schedule() {
		select {
		case <-time.After(p.spec.Faults.Every):
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
		p.lastFault = fmt.Sprintf(" (now: %s)", kind)
		p.mu.Unlock()
		summary, err := p.inject(ctx, kind, i)
		if errors.Is(err, errSkipped) {
			p.mu.Lock()
			p.skipped = append(p.skipped, kind+": "+summary)
			p.mu.Unlock()
		} else if err != nil {
			return fmt.Errorf("bench: fault %d (%s): %w", i+1, kind, err)
		}
		p.mu.Lock()
		p.faults++
		p.lastFault = "; last: " + kind + " " + summary
		p.mu.Unlock()
	}
	return nil
}

var errSkipped = errors.New("bench: fault skipped")

// inject carries out one fault and records it in bench_fault, timed by
// the database clock.
func (p *phase) inject(ctx context.Context, kind string, n int) (string, error) {
	if kind == faultPause {
		if !p.opts.Server.CanPause() {
			return "the server was reached by DSN and LANEQ_TIDB_PAUSE / LANEQ_TIDB_RESUME are not set", errSkipped
		}
		id, err := p.beginFault(ctx, kind, "", fmt.Sprintf("TiDB stopped for %s", p.spec.Faults.Pause))
		if err != nil {
			return "", err
		}
		if err := p.opts.Server.Pause(); err != nil {
			return "", err
		}
		select {
		case <-time.After(p.spec.Faults.Pause):
		case <-ctx.Done():
		}
		if err := p.opts.Server.Resume(); err != nil {
			return "", err
		}
		return fmt.Sprintf("for %s", p.spec.Faults.Pause), p.endFault(ctx, id, fmt.Sprintf("TiDB stopped for %s", p.spec.Faults.Pause))
	}
	if kind == faultFreeze {
		return p.freeze(ctx)
	}
	victim, running, err := p.busiest(ctx)
	if err != nil {
		return "", err
	}
	detail := fmt.Sprintf("%d attempts running", running)
	// The fault is recorded once it hit, so the attempts it caught are
	// the ones running at its recorded start.
	switch kind {
	case faultKill:
		victim.kill()
	case faultDrop:
		err = victim.signal(syscall.SIGUSR1)
		detail += ", connections dropped under its next claims, renewals, finishes and commits"
	}
	if err != nil {
		return "", err
	}
	id, err := p.beginFault(ctx, kind, victim.name, detail)
	if err != nil {
		return "", err
	}
	switch kind {
	case faultKill:
		select {
		case <-time.After(p.spec.Faults.Restart):
		case <-ctx.Done():
			return "", ctx.Err()
		}
		next, err := p.startProcess(ctx, fmt.Sprintf("%s.%d", victim.name, n+1))
		if err != nil {
			return "", err
		}
		detail += ", restarted as " + next.name
	}
	return victim.name + ": " + detail, p.endFault(ctx, id, detail)
}

// freezeHoldFor bounds how long a frozen process waits, past Freeze, for
// its leases to be taken over; freezeFindFor how long the freeze looks
// for a process that holds a lease at the moment it is stopped. The
// lease holders change every handler latency, but a busy machine (or the
// embedded engine clearing a killed process's lock) can keep every
// process between attempts for seconds, so the search is generous.
const (
	freezeHoldFor = 2 * time.Minute
	freezeFindFor = time.Minute
)

// freeze stops the busiest worker process with SIGSTOP while it holds at
// least one lease (stopped, then checked, and resumed and tried again
// when it held none, for up to freezeFindFor: a freeze that caught no
// lease proves nothing, so it is an error, not a fault recorded as
// done), keeps it stopped for Faults.Freeze and then until
// every lease it held was taken over (or freezeHoldFor passed), and
// resumes it. The frozen process is the GC-pause case: waking only after
// the takeover is a barrier, not a hope, so its stale finalizations must
// meet the new tokens and be rejected.
func (p *phase) freeze(ctx context.Context) (string, error) {
	var (
		victim  *proc
		running int64
		held    int64
	)
	began := time.Now()
	for tries := 1; ; tries++ {
		var err error
		victim, running, err = p.busiest(ctx)
		if err != nil {
			return "", err
		}
		if err := victim.signal(syscall.SIGSTOP); err != nil {
			return "", err
		}
		if held, err = p.bq.LeasesHeldBy(ctx, victim.name); err != nil {
			_ = victim.signal(syscall.SIGCONT)
			return "", fmt.Errorf("read leases held by %s: %w", victim.name, err)
		}
		if held > 0 {
			break
		}
		if time.Since(began) > freezeFindFor {
			_ = victim.signal(syscall.SIGCONT)
			return "", fmt.Errorf("no worker process held a lease when stopped, in %d tries over %s (last: %s, %d attempts running); %s",
				tries, time.Since(began).Round(time.Millisecond), victim.name, running, p.itemStates(ctx))
		}
		// Its attempts ended between the pick and the stop: try again.
		if err := victim.signal(syscall.SIGCONT); err != nil {
			return "", err
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	detail := fmt.Sprintf("%d attempts running, %d leases held", running, held)
	id, err := p.beginFault(ctx, faultFreeze, victim.name, detail)
	if err != nil {
		_ = victim.signal(syscall.SIGCONT)
		return "", err
	}
	stopped := time.Now()
	select {
	case <-time.After(p.spec.Faults.Freeze):
	case <-ctx.Done():
	}
	left, err := p.waitTakenOver(ctx, victim.name, freezeHoldFor)
	if cerr := victim.signal(syscall.SIGCONT); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	detail += fmt.Sprintf(", frozen for %s", time.Since(stopped).Round(10*time.Millisecond))
	if left > 0 {
		detail += fmt.Sprintf(", %d still held when woken", left)
	} else if held > 0 {
		detail += ", woken once every one was taken over"
	}
	return victim.name + ": " + detail, p.endFault(ctx, id, detail)
}

// waitTakenOver waits until process holds no lease (see LeasesHeldBy) or
// limit passed, and says how many it still holds.
func (p *phase) waitTakenOver(ctx context.Context, process string, limit time.Duration) (int64, error) {
	give := time.Now().Add(limit)
	for {
		held, err := p.bq.LeasesHeldBy(ctx, process)
		if err != nil || held == 0 || time.Now().After(give) {
			if err != nil {
				err = fmt.Errorf("read leases held by %s: %w", process, err)
			}
			return held, err
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-ctx.Done():
			return held, nil
		}
	}
}

// busiest is the live worker process with the most attempts running. It
// waits up to 10s for one to be running something, so that a fault lands
// mid-execution whenever there is work at all.
func (p *phase) busiest(ctx context.Context) (*proc, int64, error) {
	give := time.Now().Add(10 * time.Second)
	for {
		best, running, err := p.busiestNow(ctx)
		if err != nil || running > 0 || time.Now().After(give) {
			return best, running, err
		}
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

func (p *phase) busiestNow(ctx context.Context) (*proc, int64, error) {
	rows, err := p.bq.CountInFlight(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("read running attempts: %w", err)
	}
	running := map[string]int64{}
	for _, r := range rows {
		running[r.Process] = r.Running
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var best *proc
	for _, pr := range p.procs {
		if pr.alive() && (best == nil || running[pr.name] > running[best.name]) {
			best = pr
		}
	}
	if best == nil {
		return nil, 0, errNoProcess
	}
	return best, running[best.name], nil
}

func (p *phase) beginFault(ctx context.Context, kind, process, detail string) (int64, error) {
	res, err := p.bq.BeginFault(ctx, benchdb.BeginFaultParams{Kind: kind, Process: process, Detail: detail})
	if err != nil {
		return 0, fmt.Errorf("record fault: %w", err)
	}
	return res, nil
}

// endFault records the fault's end (throughFaults: a TiDB pause may have
// broken the connection).
func (p *phase) endFault(ctx context.Context, id int64, detail string) error {
	if err := throughFaults(ctx, func() error {
		return p.bq.EndFault(ctx, benchdb.EndFaultParams{FaultID: id, Detail: detail})
	}); err != nil {
		return fmt.Errorf("record fault end: %w", err)
	}
	return nil
}

// throughFaults runs a coordinator's bookkeeping write until it succeeds,
// for up to 30s: after a TiDB pause the statement waits for the server to
// answer again, and a connection the pause broke is tried again.
func throughFaults(ctx context.Context, write func() error) error {
	var err error
	for range 60 {
		if err = write(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// itemStates says, for a fault's error, how many items are in each state
// and how many attempts each process is running.
func (p *phase) itemStates(ctx context.Context) string {
	var b strings.Builder
	b.WriteString("items by state:")
	if states, err := p.bq.CountRunItemStates(ctx); err != nil {
		fmt.Fprintf(&b, " (%v)", err)
	} else {
		for _, s := range states {
			fmt.Fprintf(&b, " %s %d", s.State, s.Items)
		}
	}
	b.WriteString("; attempts running by process:")
	if rows, err := p.bq.CountInFlight(ctx); err != nil {
		fmt.Fprintf(&b, " (%v)", err)
	} else {
		for _, r := range rows {
			fmt.Fprintf(&b, " %s %d", r.Process, r.Running)
		}
	}
	return b.String()
}
