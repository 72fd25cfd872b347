package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/laneq/laneq/internal/benchdb"
)

// Report is a bench run's result.
type Report struct {
	Spec  Spec   `json:"spec"`
	Shape Shape  `json:"shape"` // the fault phase's workload
	TiDB  string `json:"tidb"`
	// Laneq is the whole workload under the fault plan.
	Laneq PhaseReport `json:"laneq"`
	// LaneqFree and Naive are the baseline pair (Spec.Baseline): the same
	// laneless events without faults, through laneq and the naive loop;
	// Ratios divides the first's figures by the second's.
	LaneqFree *PhaseReport `json:"laneq_free,omitempty"`
	Naive     *PhaseReport `json:"naive,omitempty"`
	Ratios    *Ratios      `json:"ratios,omitempty"`
}

// OK is true when every phase verified clean.
func (r *Report) OK() bool {
	for _, p := range r.phases() {
		if !p.Verification.OK {
			return false
		}
	}
	return true
}

func (r *Report) phases() []*PhaseReport {
	out := []*PhaseReport{&r.Laneq}
	if r.LaneqFree != nil {
		out = append(out, r.LaneqFree)
	}
	if r.Naive != nil {
		out = append(out, r.Naive)
	}
	return out
}

// PhaseReport is one phase: its figures, faults and verification.
type PhaseReport struct {
	Name     string `json:"name"`
	Database string `json:"database"`
	Events   int64  `json:"events"`
	Items    int    `json:"items"`
	// Completed, Skipped and Dead count items by terminal state.
	Completed int `json:"completed"`
	Skipped   int `json:"skipped"`
	Dead      int `json:"dead"`
	// Attempts is every handler execution; Retries those that failed on
	// purpose; Reclaims those that took over an expired lease; Rejected
	// those whose outcome the queue refused (their lease was gone).
	Attempts int `json:"attempts"`
	Retries  int `json:"retries"`
	Reclaims int `json:"reclaims"`
	Rejected int `json:"rejected"`
	// Duration is the first attempt's start to the last item's finish,
	// in database time; Throughput is terminal items per second of it.
	Duration   time.Duration `json:"duration_ns"`
	Throughput float64       `json:"throughput_per_s"`
	// ClaimP50/P99: the claim turn that handed each attempt its item.
	ClaimP50 time.Duration `json:"claim_p50_ns"`
	ClaimP99 time.Duration `json:"claim_p99_ns"`
	// EndToEndP50/P99: enqueue commit to finish, per completed item.
	EndToEndP50 time.Duration `json:"end_to_end_p50_ns"`
	EndToEndP99 time.Duration `json:"end_to_end_p99_ns"`
	// Usage is what TiDB counted for the phase's laneq statements (enqueue,
	// claims, finishes, maintenance; not the bench's own bench_* tables),
	// per item: its statement summary (internal/serverusage).
	Usage         Usage          `json:"usage"`
	Stubborn      StubbornReport `json:"stubborn"`
	Cancels       CancelReport   `json:"cancels"`
	Faults        []FaultReport  `json:"faults"`
	SkippedFaults []string       `json:"skipped_faults,omitempty"`
	Verification  Verification   `json:"verification"`
}

// Usage is a phase's server-side cost per item.
type Usage struct {
	RUPerItem         float64 `json:"ru_per_item"`
	ReadRUPerItem     float64 `json:"read_ru_per_item"`
	WriteRUPerItem    float64 `json:"write_ru_per_item"`
	StatementsPerItem float64 `json:"statements_per_item"` // executed, as the server counted them
	// KeysPerItem: keys scanned per item, where the engine reports them
	// (TiKV); 0 on the embedded engine, which reports none.
	KeysPerItem float64 `json:"keys_per_item"`
}

// StubbornReport is what the handlers that ignored their context did
// (Spec.StubbornEvery).
type StubbornReport struct {
	// Attempts ran a stubborn handler. Cancelled were told to stop by
	// their item's cancellation (requested while they ran, before their
	// deadline); PastDeadline by their deadline (they ran longer than
	// HandlerDeadline, no cancellation requested before it). Each ran on
	// past AbandonAfter, so its executor slot was given back: the item
	// must not have been.
	Attempts     int `json:"attempts"`
	Cancelled    int `json:"cancelled"`
	PastDeadline int `json:"past_deadline"`
}

// CancelReport is what the bench's cancellations did (Spec.Cancels).
type CancelReport struct {
	// Requested is every cancellation made; Running those Cancel answered
	// running (the holder is told at its next heartbeat and ends the item
	// when its handler returns), EndedAtOnce those whose item was not
	// running any more and ended at once, Unanswered those whose answer
	// was lost. Refused counts picks that had ended before Cancel reached
	// them (another was picked).
	Requested   int `json:"requested"`
	Running     int `json:"running"`
	EndedAtOnce int `json:"ended_at_once"`
	Unanswered  int `json:"unanswered"`
	Refused     int `json:"refused"`
	// ItemsCancelled is the items that ended cancelled (skipped, failure
	// class cancelled), each one the bench cancelled (the verifier checks);
	// CompletedAnyway those cancelled whose handler returned success first.
	ItemsCancelled  int `json:"items_cancelled"`
	CompletedAnyway int `json:"completed_anyway"`
	// Skipped says why planned cancellations were not made.
	Skipped []string `json:"skipped,omitempty"`
}

// cancelReport counts d's cancellations and cancelled items.
func cancelReport(d runData) CancelReport {
	var r CancelReport
	asked := map[int64]bool{}
	for _, c := range d.cancels {
		switch c.Outcome.String {
		case cancelRefused:
			r.Refused++
			continue
		case cancelRunning:
			r.Running++
		case cancelEnded:
			r.EndedAtOnce++
		default:
			r.Unanswered++
		}
		r.Requested++
		asked[c.WorkID] = true
	}
	for _, it := range d.items {
		switch {
		case cancelled(it):
			r.ItemsCancelled++
		case asked[it.WorkID] && it.State == "completed":
			r.CompletedAnyway++
		}
	}
	return r
}

// stubbornReport counts the stubborn attempts and what told each to stop,
// under the workers' handler deadline.
func stubbornReport(d runData, deadline time.Duration) StubbornReport {
	var r StubbornReport
	cancelsOf := map[int64][]time.Time{}
	for _, c := range d.cancels {
		if c.Outcome.String != cancelRefused {
			cancelsOf[c.WorkID] = append(cancelsOf[c.WorkID], c.RequestedAt)
		}
	}
	for _, a := range d.attempts {
		if !a.Stubborn {
			continue
		}
		r.Attempts++
		toldBy := a.StartedAt.Add(deadline) // the deadline, unless a cancellation came first
		if a.EndedAt.Valid && a.EndedAt.Time.Before(toldBy) {
			toldBy = a.EndedAt.Time
		}
		switch {
		case slices.ContainsFunc(cancelsOf[a.WorkID], func(t time.Time) bool { return !t.Before(a.StartedAt) && t.Before(toldBy) }):
			r.Cancelled++
		case a.EndedAt.Valid && a.EndedAt.Time.Sub(a.StartedAt) > deadline:
			r.PastDeadline++
		}
	}
	return r
}

// FaultReport is one injected fault and how the run recovered.
type FaultReport struct {
	Kind    string        `json:"kind"`
	Process string        `json:"process,omitempty"`
	Detail  string        `json:"detail"`
	At      time.Duration `json:"at_ns"`     // after the run's first attempt
	Lasted  time.Duration `json:"lasted_ns"` // fault start to end (kill: to the restart)
	// Caught is the attempts the fault caught in flight: for a kill or a
	// freeze, its process's attempts that had started and were running
	// or had no verdict recorded yet; for a TiDB pause or dropped
	// connections, the attempts running at its start.
	// Rejected is how many of those had their finalization refused.
	Caught   int `json:"caught"`
	Rejected int `json:"rejected"`
	// Recovery: kill and freeze, until the last caught item ran again
	// elsewhere; TiDB pause, from the resume to the first attempt that
	// started after it; dropped connections, until the process started its
	// next attempt.
	Recovery time.Duration `json:"recovery_ns"`
}

// Ratios are laneq's figures divided by the naive loop's, measured in the
// same run.
type Ratios struct {
	Throughput  float64 `json:"throughput"`
	ClaimP50    float64 `json:"claim_p50"`
	ClaimP99    float64 `json:"claim_p99"`
	EndToEndP50 float64 `json:"end_to_end_p50"`
	EndToEndP99 float64 `json:"end_to_end_p99"`
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func ratiosOf(l, n PhaseReport) *Ratios {
	return &Ratios{
		Throughput:  ratio(l.Throughput, n.Throughput),
		ClaimP50:    ratio(float64(l.ClaimP50), float64(n.ClaimP50)),
		ClaimP99:    ratio(float64(l.ClaimP99), float64(n.ClaimP99)),
		EndToEndP50: ratio(float64(l.EndToEndP50), float64(n.EndToEndP50)),
		EndToEndP99: ratio(float64(l.EndToEndP99), float64(n.EndToEndP99)),
	}
}

// report reads the finished phase back and computes its figures.
func (p *phase) report(ctx context.Context) (PhaseReport, error) {
	d, err := readRun(ctx, p.bq)
	d.drainedAt = p.drainedAt
	if err != nil {
		return PhaseReport{}, err
	}
	rep := summarize(d, p.name)
	// With StubbornEvery the spec's HandlerDeadline is set (its defaults);
	// without, there is no stubborn attempt to count.
	rep.Stubborn, rep.Cancels = stubbornReport(d, p.spec.HandlerDeadline), cancelReport(d)
	// A baseline phase may stop at its deadline: what did not finish is
	// counted, not a violation (the naive loop is expected to be slow).
	rep.Verification = verify(d, p.wl, p.spec.Lease, p.naive, p.name != phaseFaults)
	return rep, nil
}

func summarize(d runData, name string) PhaseReport {
	rep := PhaseReport{Name: name, Events: d.events, Items: len(d.items), Attempts: len(d.attempts)}
	var first, last time.Time
	var claims, e2e []time.Duration
	for _, a := range d.attempts {
		if first.IsZero() || a.StartedAt.Before(first) {
			first = a.StartedAt
		}
		claims = append(claims, time.Duration(a.ClaimUs)*time.Microsecond)
		if a.Outcome.String == "error" {
			rep.Retries++
		}
		if a.Reclaimed {
			rep.Reclaims++
		}
		if a.Finish.String == "rejected" {
			rep.Rejected++
		}
	}
	for _, it := range d.items {
		switch it.State {
		case "completed":
			rep.Completed++
			e2e = append(e2e, it.TerminalAt.Time.Sub(it.CreatedAt))
		case "skipped":
			rep.Skipped++
		case "dead":
			rep.Dead++
		}
		if it.TerminalAt.Valid && it.TerminalAt.Time.After(last) {
			last = it.TerminalAt.Time
		}
	}
	if !first.IsZero() && last.After(first) {
		rep.Duration = last.Sub(first)
		rep.Throughput = float64(rep.Completed+rep.Skipped+rep.Dead) / rep.Duration.Seconds()
	}
	rep.ClaimP50, rep.ClaimP99 = percentile(claims, 50), percentile(claims, 99)
	rep.EndToEndP50, rep.EndToEndP99 = percentile(e2e, 50), percentile(e2e, 99)
	rep.Faults = faultReports(d, first)
	return rep
}

func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[min(max(i-1, 0), len(s)-1)]
}

func faultReports(d runData, first time.Time) []FaultReport {
	byItem := map[int64][]benchdb.BenchAttempt{}
	for _, a := range d.attempts {
		byItem[a.WorkID] = append(byItem[a.WorkID], a)
	}
	var out []FaultReport
	for _, f := range d.faults {
		fr := FaultReport{Kind: f.Kind, Process: f.Process, Detail: f.Detail, At: f.StartedAt.Sub(first)}
		end := f.StartedAt
		if f.EndedAt.Valid {
			end = f.EndedAt.Time
			fr.Lasted = end.Sub(f.StartedAt)
		}
		runningAt := func(a benchdb.BenchAttempt) bool {
			return !a.StartedAt.After(f.StartedAt) && (!a.EndedAt.Valid || a.EndedAt.Time.After(f.StartedAt))
		}
		switch f.Kind {
		case faultKill, faultFreeze:
			for _, a := range d.attempts {
				// In flight when it hit: started, and its handler still
				// running or its verdict not recorded yet (a kill takes the
				// verdict with it; a frozen process records it, often a
				// rejection, after it wakes).
				inFlight := !a.StartedAt.After(f.StartedAt) &&
					(!a.EndedAt.Valid || a.EndedAt.Time.After(f.StartedAt) ||
						!a.FinishAt.Valid || a.FinishAt.Time.After(f.StartedAt))
				if a.Process != f.Process || !inFlight {
					continue
				}
				fr.Caught++
				if a.Finish.String == "rejected" {
					fr.Rejected++
				}
				for _, b := range byItem[a.WorkID] {
					if b.Process != f.Process && b.StartedAt.After(f.StartedAt) {
						fr.Recovery = max(fr.Recovery, b.StartedAt.Sub(f.StartedAt))
						break
					}
				}
			}
		case faultPause:
			var next time.Time
			for _, a := range d.attempts {
				if runningAt(a) {
					fr.Caught++
					if a.Finish.String == "rejected" {
						fr.Rejected++
					}
				}
				if a.StartedAt.After(end) && (next.IsZero() || a.StartedAt.Before(next)) {
					next = a.StartedAt
				}
			}
			if !next.IsZero() {
				fr.Recovery = next.Sub(end)
			}
		case faultDrop:
			var next time.Time
			for _, a := range d.attempts {
				if a.Process == f.Process && runningAt(a) {
					fr.Caught++
				}
				if a.Process == f.Process && a.StartedAt.After(f.StartedAt) && (next.IsZero() || a.StartedAt.Before(next)) {
					next = a.StartedAt
				}
			}
			if !next.IsZero() {
				fr.Recovery = next.Sub(f.StartedAt)
			}
		}
		out = append(out, fr)
	}
	return out
}

// WriteText writes the summary tables.
func (r *Report) WriteText(w io.Writer) {
	s := r.Spec
	fmt.Fprintf(w, "laneq bench on %s\n", r.TiDB)
	fmt.Fprintf(w, "workload: %d events over %d scope(s), %d source lanes, %d target lanes (bursts of %d), classes %s; %d processes × %d executors; lease %s; handler %s ±50%%; designed failure rate %.1f%%\n",
		s.Items, s.Scopes, s.SourceLanes, s.TargetLanes, s.BurstSize, strings.Join(s.Classes, ","),
		s.Processes, s.Executors, s.Lease, s.HandlerLatency, max(s.FailureRate, 0)*100)
	if s.NoClaimOnPromote {
		fmt.Fprintln(w, "claim on promote: off (followers are promoted for claim turns)")
	}
	sh := r.Shape
	fmt.Fprintf(w, "events: %d in no lane, %d projection, %d waiting for a dependency, %d in same-target bursts, %d in multi-target bursts, the rest in source lanes only\n",
		sh.Free, sh.Projection, sh.Consumers, sh.SameTarget, sh.MultiTarget)
	if s.StubbornEvery > 0 {
		fmt.Fprintf(w, "handler mix: one event in %d stubborn (%d, %d of them in lanes): its first attempt ignores its context for %s; workers' handler deadline %s, abandon after %s; %d cancellations of running stubborn items, one every %s\n",
			s.StubbornEvery, sh.Stubborn, sh.StubbornLaned, s.StubbornFor, s.HandlerDeadline, s.AbandonAfter, s.Cancels, s.CancelEvery)
	}
	fmt.Fprintln(w)
	phases := r.phases()
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	head := "\t"
	for _, p := range phases {
		head += p.Name + "\t"
	}
	if r.Ratios != nil {
		head += "laneq-free/naive\t"
	}
	fmt.Fprintln(tw, head)
	var rt Ratios
	if r.Ratios != nil {
		rt = *r.Ratios
	}
	row := func(name string, cell func(p *PhaseReport) string, ratio float64) {
		line := name + "\t"
		for _, p := range phases {
			line += cell(p) + "\t"
		}
		if r.Ratios != nil {
			if ratio != 0 {
				line += fmt.Sprintf("%.2f×", ratio)
			}
			line += "\t"
		}
		fmt.Fprintln(tw, line)
	}
	row("throughput (items/s)", func(p *PhaseReport) string { return fmt.Sprintf("%.0f", p.Throughput) }, rt.Throughput)
	row("claim latency p50", func(p *PhaseReport) string { return dur(p.ClaimP50) }, rt.ClaimP50)
	row("claim latency p99", func(p *PhaseReport) string { return dur(p.ClaimP99) }, rt.ClaimP99)
	row("end-to-end p50", func(p *PhaseReport) string { return dur(p.EndToEndP50) }, rt.EndToEndP50)
	row("end-to-end p99", func(p *PhaseReport) string { return dur(p.EndToEndP99) }, rt.EndToEndP99)
	row("RU per item", func(p *PhaseReport) string { return fmt.Sprintf("%.2f", p.Usage.RUPerItem) }, 0)
	row("RU per million items", func(p *PhaseReport) string { return fmt.Sprintf("%.2fM", p.Usage.RUPerItem) }, 0)
	row("statements per item", func(p *PhaseReport) string { return fmt.Sprintf("%.2f", p.Usage.StatementsPerItem) }, 0)
	row("keys per item", func(p *PhaseReport) string {
		if p.Usage.KeysPerItem == 0 {
			return "-" // the embedded engine reports no keys
		}
		return fmt.Sprintf("%.1f", p.Usage.KeysPerItem)
	}, 0)
	row("duration", func(p *PhaseReport) string { return dur(p.Duration) }, 0)
	row("events / items", func(p *PhaseReport) string { return fmt.Sprintf("%d / %d", p.Events, p.Items) }, 0)
	row("unfinished at the deadline", func(p *PhaseReport) string { return fmt.Sprint(p.Verification.Unfinished) }, 0)
	row("completed / skipped / dead", func(p *PhaseReport) string { return fmt.Sprintf("%d / %d / %d", p.Completed, p.Skipped, p.Dead) }, 0)
	row("attempts", func(p *PhaseReport) string { return fmt.Sprint(p.Attempts) }, 0)
	row("retries (designed failures)", func(p *PhaseReport) string { return fmt.Sprint(p.Retries) }, 0)
	row("reclaims (expired leases)", func(p *PhaseReport) string { return fmt.Sprint(p.Reclaims) }, 0)
	row("finalizations rejected", func(p *PhaseReport) string { return fmt.Sprint(p.Rejected) }, 0)
	if s.StubbornEvery > 0 {
		row("stubborn handlers (stopped by a cancel / their deadline)", func(p *PhaseReport) string {
			return fmt.Sprintf("%d (%d / %d)", p.Stubborn.Attempts, p.Stubborn.Cancelled, p.Stubborn.PastDeadline)
		}, 0)
		row("cancels (running / ended at once / unanswered)", func(p *PhaseReport) string {
			c := p.Cancels
			return fmt.Sprintf("%d (%d / %d / %d)", c.Requested, c.Running, c.EndedAtOnce, c.Unanswered)
		}, 0)
		row("items cancelled / completed anyway", func(p *PhaseReport) string {
			return fmt.Sprintf("%d / %d", p.Cancels.ItemsCancelled, p.Cancels.CompletedAnyway)
		}, 0)
	}
	tw.Flush()
	if r.Naive != nil {
		fmt.Fprintln(w, "\nlaneq is the whole workload under the fault plan. laneq-free and naive are the baseline pair: the same number of events, laneless (the naive claim, SELECT … FOR UPDATE of the first due row, knows no lanes, projections or dependencies), without faults or designed failures (it has no lease recovery or retry path), through laneq's worker and through the naive loop, with the same processes, executors and handler.")
	}
	fmt.Fprintln(w)
	r.Laneq.writeFaults(w)
	for _, s := range r.Laneq.Cancels.Skipped {
		fmt.Fprintf(w, "cancellation skipped: %s\n", s)
	}
	for _, p := range phases {
		p.Verification.write(w, p.Name)
	}
}

func (p PhaseReport) writeFaults(w io.Writer) {
	if len(p.Faults) == 0 && len(p.SkippedFaults) == 0 {
		fmt.Fprintln(w, "faults: none")
		return
	}
	fmt.Fprintln(w, "faults:")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  #\tkind\tat\tprocess\tlasted\tcaught\trejected\trecovery\tdetail")
	for i, f := range p.Faults {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", i+1, f.Kind, dur(f.At), or(f.Process, "-"), dur(f.Lasted), f.Caught, f.Rejected, dur(f.Recovery), f.Detail)
	}
	tw.Flush()
	for _, s := range p.SkippedFaults {
		fmt.Fprintf(w, "  skipped: %s\n", s)
	}
}

func (v Verification) write(w io.Writer, phase string) {
	verdict := "OK"
	if !v.OK {
		verdict = fmt.Sprintf("FAILED (%d problems)", v.ProblemCount)
	}
	fmt.Fprintf(w, "\nverification (%s): %s — %d items, %d attempts, %d lane pairs checked\n", phase, verdict, v.ItemsChecked, v.AttemptsChecked, v.LanePairsChecked)
	fmt.Fprintf(w, "  repeated executions explained: %d retried after a designed failure or release, %d after their process was killed, %d rejected finalizations under a fault, %d rejected without one (a lease lost to a slow renewal); %d overlapped the next attempt; %d completed by a holder killed before its verdict was written\n",
		v.RepeatsRetried, v.RepeatsKilled, v.RejectedWithFault, v.RejectedWithoutFault, v.OverlappingExecutions, v.CompletedByKilledHolder)
	fmt.Fprintf(w, "  lane overlaps by handler time: %d (an item started before an earlier item of its lane had returned from its handler); same-item overlaps: %d; %d overlaps explained by a lost lease (killed, frozen, or lost the database)\n",
		v.LaneOverlaps, v.SameItemOverlaps, v.OverlapsExplained)
	if v.Ticks > 0 {
		fmt.Fprintf(w, "  periodic: %d ticks stored, one item each, none lost (%d stored while the processes stopped)\n", v.Ticks, v.TicksAfterDrain)
	}
	if v.RateBusiestSecond > 0 {
		fmt.Fprintf(w, "  rate limit: busiest window granted %d, busiest second %d; limited attempts started %d in the busiest second (database clock)\n",
			v.RateBusiestWindow, v.RateBusiestSecond, v.RateBusiestStarts)
	}
	for _, p := range v.Problems {
		fmt.Fprintf(w, "  problem: %s\n", p)
	}
	if v.ProblemCount > len(v.Problems) {
		fmt.Fprintf(w, "  … and %d more\n", v.ProblemCount-len(v.Problems))
	}
}

func or(s, d string) string {
	if s == "" {
		return d
	}
	return s
}

// dur prints a duration with three significant digits.
func dur(d time.Duration) string {
	switch {
	case d == 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000)
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}
