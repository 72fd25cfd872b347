package plancheck

import (
	"context"
	"database/sql"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/queries"
)

// The fixture generators: hand-written SQL, bound by Bind (see seed.sql for
// why sqlc does not compile them).
//
//go:embed fixtures/seed.sql
var seedSQL string

// Fixture names the rows cases refer to. Cases use "$name" placeholders for
// these values (see Values).
const (
	// ProjectionHistoryKey is the projection key of the fixture's one long
	// projection history.
	ProjectionHistoryKey = "hist:projection"
	TargetScope          = "plan/target"
	OtherScope           = "plan/other"
	// IdleScopePrefix names the idle scopes of a multi-scope worker,
	// IdleScopes of them at every scale; NoiseScopePrefix sorts right
	// after it and holds `scale` more (see SeedIdleScopes).
	IdleScopePrefix  = "plan/tenant/"
	NoiseScopePrefix = "plan/tenant0"
	IdleScopes       = 1000
	GroupEndpoint    = "group-1"
	// RateWindowBase numbers the first seeded window of each rate limit
	// (see SeedRateWindows).
	RateWindowBase = 5_000_000
	targetGen      = 2
	knownBase      = 1_000_000  // ids and ordinals of the target scope's interesting rows
	noise          = 10_000_000 // id blocks of the noise distributions: each starts at a multiple
)

// The fixture's timeline. Rows that must be due sit in the year 2000, so no
// amount of time between seeding and checking makes them anything else.
// Rows that must not be due yet sit from futureLead after the seeding
// database's clock (recorded in plancheck_fixture), and Verify fails the run
// loudly if the check starts so late that any of them came due.
var pastBase = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

const futureLead = time.Hour

// Values are the fixture facts cases can name as "$key" arguments.
func Values() map[string]any {
	idle := make([]any, IdleScopes)
	for i := range idle {
		idle[i] = fmt.Sprintf("%s%05d", IdleScopePrefix, i)
	}
	return map[string]any{
		"idle_scopes":         idle,             // a multi-scope worker's 1,000 idle scopes
		"idle_prefix":         IdleScopePrefix,  // their prefix
		"idle_prefix_end":     NoiseScopePrefix, // its key range's end
		"group_endpoint":      GroupEndpoint,    // the endpoint registered on all of them
		"scope":               TargetScope,
		"generation":          int64(targetGen),
		"head_work_id":        int64(knownBase),            // a due pending lane head
		"head_ordinal":        int64(knownBase),            // its lane ordinal
		"blocked_work_id":     int64(knownBase + 100),      // a blocked follower
		"blocked_ordinal":     int64(knownBase + 100),      // its lane ordinal
		"processing_work_id":  int64(knownBase + 200),      // a leased row
		"event_id":            int64(knownBase),            // the head's event
		"idempotency_key":     "known:0",                   // that event's key
		"lane":                "lane:0",                    // the head's source lane
		"target_lane":         "acct:0",                    // the head's target lane
		"wake_key":            "known-wake:0",              // the wake key of one known waiter
		"waiter_work_id":      int64(knownBase + 500),      // that waiter
		"registration_id":     int64(knownBase + 700),      // an interrupted dependency registration
		"satisfied_key":       "known-wake:key:0",          // a satisfied dependency key
		"missing_key":         "known-wake:key:1",          // a dependency key not satisfied
		"lease_token":         int64(0),                    // seeded rows' token
		"long_lane":           "long:0",                    // a lane with `scale` blocked followers
		"long_lane_head":      int64(longLaneBase - 1),     // its head's ordinal, just before them
		"long_lane_head_id":   int64(knownBase + 600),      // the long lane's head
		"long_lane_follower":  int64(13 * noise),           // the long lane's first blocked follower
		"headless_candidate":  int64(knownBase + 800),      // a blocked row behind a headless lane's `scale` blocked rows
		"target_candidate":    int64(knownBase + 801),      // a blocked row in that lane's target lane, first there
		"next_ordinal":        int64(maxSeededOrdinal + 1), // past every seeded ordinal
		"projection_key":      ProjectionHistoryKey,        // a projection with `scale` terminal generations
		"projection_event_10": int64(17*noise + 10),        // the admission ordinal of its 11th event
		"projection_event_20": int64(17*noise + 20),        // ... and of its 21st
		"receipt_id":          int64(receiptBase),          // the first due bulk receipt (see receiptDistributions)
		"expired_receipt_id":  int64(receiptBase + 100),    // a bulk receipt whose routing lease expired
	}
}

// receiptBase is the id block of the target scope's known receipts: the
// first due bulk receipts (KnownReceipts of them), then the expired leases.
const (
	receiptBase   = 3 * knownBase
	KnownReceipts = 32
)

// receiptDistribution is one kind of seeded ingress receipt.
type receiptDistribution struct {
	what, scope, class, status string
	at                         when // next_attempt_at (a routing row's lease end)
	idBase, count              int64
}

// receiptDistributions: the target scope's bulk class holds, around its
// KnownReceipts due pending receipts and 10 expired leases, `scale` more due
// receipts behind them, 5 × scale not-due retries, scale live leases,
// scale materialized and scale/10 failed receipts; its interactive class a
// few due receipts; the other scope `scale` due bulk receipts.
func receiptDistributions(scale int64) []receiptDistribution {
	return []receiptDistribution{
		{"known-due", TargetScope, "bulk", "pending", when{offset: 0, spread: time.Minute}, receiptBase, KnownReceipts},
		{"expired-lease", TargetScope, "bulk", "routing", when{offset: 30 * time.Second, spread: time.Minute}, receiptBase + 100, 10},
		{"due", TargetScope, "bulk", "pending", when{offset: time.Hour, spread: time.Hour}, 20 * noise, scale},
		{"retry", TargetScope, "bulk", "pending", when{future: true, offset: 0, spread: time.Hour}, 21 * noise, 5 * scale},
		{"leased", TargetScope, "bulk", "routing", when{future: true, offset: 0, spread: time.Hour}, 22 * noise, scale},
		{"materialized", TargetScope, "bulk", "materialized", when{offset: 0, spread: time.Hour}, 23 * noise, scale},
		{"failed", TargetScope, "bulk", "failed", when{offset: 0, spread: time.Hour}, 24 * noise, max(scale/10, 1)},
		{"interactive", TargetScope, "interactive", "pending", when{offset: 0, spread: time.Minute}, receiptBase + 200, 5},
		{"other-scope", OtherScope, "bulk", "pending", when{offset: 0, spread: time.Hour}, 25 * noise, scale},
	}
}

// when places a distribution's rows in time: the first row at base+offset
// and the rest spread evenly over spread after it.
type when struct {
	future bool // base: the seeding clock plus futureLead; else the year 2000
	offset time.Duration
	spread time.Duration
}

// distribution is one kind of seeded row.
type distribution struct {
	what                 string
	scope                string
	generation           int64
	state                string
	at                   when // run_after: when due, or the lease expiry of a processing row
	source, target, proj string
	projActive           bool
	projSame             bool // every row of one projection (proj is its key)
	wake                 string
	lanes                int64
	idBase, ordinalBase  int64
	count                int64
	per                  float64 // with count 0: count = per × scale
	workType, queueClass string
	skew                 bool // one of the skewed distributions (see distributions)
}

// Ordinal blocks (each below the next block's base) and the largest ordinal
// seeded; the scope's next enqueue ordinal is set past it.
const (
	longLaneBase     = 12 * knownBase
	headlessLaneBase = 14*knownBase + 3*MaxScale
	// The old registrations' block (at most MaxScale/2 of them), after the
	// two known rows behind the headless lane (headlessLaneBase + MaxScale).
	oldRegistrationBase = 14*knownBase + 4*MaxScale + MaxScale/2
	maxSeededOrdinal    = 14*knownBase + 5*MaxScale
)

// distributions are the fixture: a constant set of interesting rows in the
// target scope, rows of every kind of noise the seeds name (`scale` each),
// and the skewed distributions that defeated earlier claim scans (issue 9),
// sized in proportion to the scale so that both scales are skewed:
//
//   - not-due retries in the claim range (5 × scale): the seed-002 profile,
//     commands retrying at a five-minute cap, due over the next five minutes;
//   - expired leases of another queue class (scale / 2);
//   - live leases expiring over the next half hour (scale / 2, beside the
//     `scale` processing rows of the noise);
//   - one lane with `scale` blocked followers at consecutive ordinals;
//   - one lane with no head and `scale` blocked rows, waiting on their
//     other lane;
//   - due rows of a work type the cases do not ask for, in the same class and
//     time range as the due backlog (scale);
//   - dependency registrations crashed workers left (scale / 2, issue 35),
//     long past any grace, in the hour of the `scale` dependency waiters.
func distributions(scale int64) []distribution {
	d := func(x distribution) distribution {
		if x.workType == "" {
			x.workType = "deliver"
		}
		if x.queueClass == "" {
			x.queueClass = "default"
		}
		if x.lanes == 0 {
			x.lanes = 20
		}
		if x.count == 0 {
			x.count = max(1, int64(x.per*float64(scale)))
		}
		if x.scope == "" {
			x.scope = TargetScope
		}
		if x.generation == 0 {
			x.generation = targetGen
		}
		return x
	}
	backlog := when{spread: time.Hour} // the due backlog: the year 2000's first hour
	inBacklog := when{offset: 30 * time.Minute, spread: 20 * time.Millisecond}
	notDue := when{future: true, spread: time.Hour}
	leases := when{future: true, spread: 30 * time.Minute}
	return []distribution{
		// The target scope's interesting rows (constant at every scale), in
		// the middle of the due backlog.
		d(distribution{what: "lane heads", state: "pending", at: inBacklog, source: "lane:", target: "acct:", idBase: knownBase, ordinalBase: knownBase, count: 20}),
		d(distribution{what: "blocked followers of the heads", state: "blocked", at: inBacklog, source: "lane:", target: "acct:", idBase: knownBase + 100, ordinalBase: knownBase + 100, count: 20}),
		d(distribution{what: "leased rows", state: "processing", at: leases, source: "run:", idBase: knownBase + 200, ordinalBase: knownBase + 200, count: 10}),
		d(distribution{what: "expired leases", state: "processing", at: inBacklog, source: "stale:", idBase: knownBase + 300, ordinalBase: knownBase + 300, count: 5}),
		d(distribution{what: "retries in backoff", state: "pending", at: notDue, source: "retry:", idBase: knownBase + 400, ordinalBase: knownBase + 400, count: 5}),
		d(distribution{what: "known dependency waiters", state: "waiting_dependency", at: inBacklog, source: "dep:", wake: "known-wake:", idBase: knownBase + 500, ordinalBase: knownBase + 500, count: 10}),
		d(distribution{what: "interrupted dependency registrations", state: "dependency_registration", at: inBacklog, source: "reg:", wake: "known-reg:", idBase: knownBase + 700, ordinalBase: knownBase + 700, count: 5}),
		d(distribution{what: "the long lane's head", state: "pending", at: inBacklog, source: "long:", lanes: 1, idBase: knownBase + 600, ordinalBase: longLaneBase - 1, count: 1}),
		d(distribution{what: "a row behind the headless lane", state: "blocked", at: inBacklog, source: "headless:", target: "behind:", lanes: 1, idBase: knownBase + 800, ordinalBase: headlessLaneBase + MaxScale, count: 1}),
		d(distribution{what: "a row first in its target lane", state: "blocked", at: inBacklog, source: "aside:", target: "headless-target:", lanes: 1, idBase: knownBase + 801, ordinalBase: headlessLaneBase + MaxScale + 1, count: 1}),

		// Noise, `scale` rows each, placed where a careless plan would read it.
		d(distribution{what: "other scopes", scope: OtherScope, state: "pending", at: backlog, source: "lane:", target: "acct:", idBase: 1 * noise, ordinalBase: knownBase, per: 1}),
		d(distribution{what: "other generations", generation: targetGen - 1, state: "pending", at: backlog, source: "lane:", target: "acct:", idBase: 2 * noise, ordinalBase: 0, per: 1}),
		d(distribution{what: "terminal history in the same lanes", state: "completed", at: backlog, source: "lane:", target: "acct:", idBase: 3 * noise, ordinalBase: 0, per: 1}),
		d(distribution{what: "processing rows", state: "processing", at: leases, source: "busy:", lanes: 1000, idBase: 4 * noise, ordinalBase: 2 * knownBase, per: 1}),
		d(distribution{what: "blocked followers in the same lanes", state: "blocked", at: backlog, source: "lane:", target: "acct:", idBase: 5 * noise, ordinalBase: 3 * knownBase, per: 1}),
		d(distribution{what: "inactive projection successors", state: "blocked", at: backlog, proj: "proj:", source: "proj:", idBase: 6 * noise, ordinalBase: 4 * knownBase, per: 1}),
		d(distribution{what: "dependency waiters", state: "waiting_dependency", at: backlog, source: "wait:", wake: "wake:", lanes: 100, idBase: 7 * noise, ordinalBase: 5 * knownBase, per: 1}),
		d(distribution{what: "same scope, other lanes, due", state: "pending", at: backlog, source: "other:", lanes: 1000, idBase: 8 * noise, ordinalBase: 6 * knownBase, per: 1}),
		d(distribution{what: "same scope, other lanes, not due", state: "pending", at: notDue, source: "later:", lanes: 1000, idBase: 9 * noise, ordinalBase: 7 * knownBase, per: 1}),

		// Skew (issue 9).
		d(distribution{what: "not-due retries in the claim range", state: "pending", at: when{future: true, spread: 5 * time.Minute}, source: "retrying:", lanes: 1000, idBase: 10 * noise, ordinalBase: 8 * knownBase, per: 5, skew: true}),
		d(distribution{what: "expired leases of another class", state: "processing", queueClass: "bulk", at: backlog, source: "dead:", lanes: 1000, idBase: 11 * noise, ordinalBase: 10 * knownBase, per: 0.5, skew: true}),
		d(distribution{what: "live leases", state: "processing", at: leases, source: "alive:", lanes: 1000, idBase: 12 * noise, ordinalBase: 11 * knownBase, per: 0.5, skew: true}),
		d(distribution{what: "one lane with `scale` blocked followers", state: "blocked", at: backlog, source: "long:", lanes: 1, idBase: 13 * noise, ordinalBase: longLaneBase, per: 1, skew: true}),
		d(distribution{what: "one lane without a head and `scale` blocked rows", state: "blocked", at: backlog, source: "headless:", target: "waits-on:", lanes: 1, idBase: 18 * noise, ordinalBase: headlessLaneBase, per: 1, skew: true}),
		d(distribution{what: "due rows of another work type", state: "pending", workType: "other", at: backlog, source: "foreign:", lanes: 1000, idBase: 14 * noise, ordinalBase: 13 * knownBase, per: 1, skew: true}),
		// Issue 10: waiters of another scope (same wake keys and dependency
		// keys as the target scope's), and dependency registrations there.
		d(distribution{what: "dependency waiters of another scope", scope: OtherScope, state: "waiting_dependency", at: backlog, source: "wait:", wake: "wake:", lanes: 100, idBase: 15 * noise, ordinalBase: 14 * knownBase, per: 1}),
		d(distribution{what: "dependency registrations of another scope", scope: OtherScope, state: "dependency_registration", at: backlog, source: "wait:", wake: "wake:", lanes: 100, idBase: 16 * noise, ordinalBase: 14*knownBase + MaxScale, per: 1}),
		// Issue 35: registrations of the target scope left behind by
		// crashed workers (scale / 2, all long past any grace), beside its
		// `scale` waiters in the same hour: a page over the waiters must not
		// read them, and the pass's registration read must not grow with
		// them.
		d(distribution{what: "old dependency registrations", state: "dependency_registration", at: backlog, source: "stuck:", wake: "stuck:", lanes: 100, idBase: 26 * noise, ordinalBase: oldRegistrationBase, per: 0.5, skew: true}),
		// One projection's history: `scale` terminal generations, each with
		// its event, all of one projection key (the input and boundary
		// reads must not grow with it).
		// Issue 13: dead letters of the target scope, in the due backlog's
		// hour (their run_after is their terminal time), for the
		// dead-letter pages; the statistics count them.
		d(distribution{what: "dead letters", state: "dead", at: backlog, source: "failed:", lanes: 1000, idBase: 19 * noise, ordinalBase: 9 * knownBase, per: 1, skew: true}),
		d(distribution{what: "one projection with `scale` terminal generations", state: "completed", at: backlog, source: "hist:", lanes: 1, proj: ProjectionHistoryKey, projSame: true, idBase: 17 * noise, ordinalBase: 14*knownBase + 2*MaxScale, per: 1, skew: true}),
	}
}

// MaxScale is the largest scale the generators can seed.
const MaxScale = 100_000

// Seed fills an empty, migrated database with the fixture at scale, makes
// the scope rows consistent with it (next enqueue ordinal past every seeded
// ordinal), records the seeding clock, and analyzes the tables. Progress
// goes to progress.
func Seed(ctx context.Context, db *sql.DB, scale int64, progress io.Writer) error {
	if scale < 1 || scale > MaxScale {
		return fmt.Errorf("plancheck: scale %d outside 1..%d", scale, MaxScale)
	}
	started := time.Now()
	q := gen.New(db)
	for _, s := range []struct {
		id  string
		gen int64
	}{{TargetScope, targetGen}, {OtherScope, targetGen}} {
		if err := q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: s.id, ActiveGeneration: s.gen}); err != nil {
			return fmt.Errorf("plancheck: seed scope %s: %w", s.id, err)
		}
	}
	conn, err := db.Conn(ctx) // the session setting below holds per connection
	if err != nil {
		return fmt.Errorf("plancheck: seed connection: %w", err)
	}
	defer conn.Close()
	for _, name := range []string{"AllowExplicitIDs", "CreateFixtureTable", "RecordSeedClock"} {
		if _, err := execSeed(ctx, conn, name, map[string]any{"future_lead_seconds": int64(futureLead / time.Second)}); err != nil {
			return fmt.Errorf("plancheck: %s: %w", name, err)
		}
	}
	var futureBase time.Time
	if err := conn.QueryRowContext(ctx, seedStatements()["FutureBase"]).Scan(&futureBase); err != nil {
		return fmt.Errorf("plancheck: read the fixture's future base: %w", err)
	}
	var rows int64
	for _, d := range distributions(scale) {
		base := pastBase
		if d.at.future {
			base = futureBase
		}
		n, err := execSeed(ctx, conn, "SeedWorkItems", map[string]any{
			"id_base": d.idBase, "scope_id": d.scope, "generation": d.generation, "work_type": d.workType,
			"queue_class": d.queueClass, "state": d.state, "time_base": base.Add(d.at.offset),
			"spacing_micros":     d.at.spread.Microseconds() / d.count,
			"source_lane_prefix": d.source, "target_lane_prefix": d.target, "lanes": d.lanes,
			"ordinal_base": d.ordinalBase, "projection_prefix": d.proj, "projection_active": boolInt(d.projActive),
			"projection_same": boolInt(d.projSame),
			"wake_prefix":     d.wake, "count": d.count,
		})
		if err != nil {
			return fmt.Errorf("plancheck: seed %s: %w", d.what, err)
		}
		rows += n
		if _, err := execSeed(ctx, conn, "SeedEvents", map[string]any{
			// Events for the rows (event_id = work_id), so event reads have data.
			"id_base": d.idBase, "scope_id": d.scope, "generation": d.generation,
			"key_prefix": fmt.Sprintf("%s:", eventKeyPrefix(d)), "count": d.count,
			"projection_prefix": d.proj, "projection_same": boolInt(d.projSame),
		}); err != nil {
			return fmt.Errorf("plancheck: seed events of %s: %w", d.what, err)
		}
	}
	for _, s := range []struct {
		prefix string
		count  int64
	}{{IdleScopePrefix, IdleScopes}, {NoiseScopePrefix, min(scale, 10_000)}} {
		if _, err := execSeed(ctx, conn, "SeedIdleScopes", map[string]any{"prefix": s.prefix, "count": s.count}); err != nil {
			return fmt.Errorf("plancheck: seed idle scopes %s: %w", s.prefix, err)
		}
	}
	if _, err := execSeed(ctx, conn, "SeedGroupWakeEndpoints", map[string]any{"endpoint_id": GroupEndpoint,
		"from_scope_id": IdleScopePrefix, "before_scope_id": NoiseScopePrefix}); err != nil {
		return fmt.Errorf("plancheck: seed the group's wake endpoints: %w", err)
	}
	for _, s := range []struct {
		scope, prefix string
	}{{TargetScope, "wake:"}, {TargetScope, "known-wake:"}, {OtherScope, "wake:"}} {
		if _, err := execSeed(ctx, conn, "SeedSatisfiedDependencies", map[string]any{"scope_id": s.scope, "prefix": s.prefix}); err != nil {
			return fmt.Errorf("plancheck: seed satisfied dependencies of %s: %w", s.scope, err)
		}
	}
	for _, s := range []struct {
		scope       string
		count, live int64
	}{{TargetScope, 8, 3}, {OtherScope, min(scale, 10_000), min(scale, 10_000) / 2}} {
		if _, err := execSeed(ctx, conn, "SeedWakeEndpoints", map[string]any{"scope_id": s.scope, "count": s.count, "live": s.live}); err != nil {
			return fmt.Errorf("plancheck: seed wake endpoints of %s: %w", s.scope, err)
		}
	}
	for _, s := range []struct {
		scope string
		count int64
	}{{TargetScope, 6 * 60 * 4}, {OtherScope, min(scale, 10_000)}} {
		if _, err := execSeed(ctx, conn, "SeedHistory", map[string]any{"scope_id": s.scope, "count": s.count}); err != nil {
			return fmt.Errorf("plancheck: seed history of %s: %w", s.scope, err)
		}
	}
	for _, s := range []struct {
		scope, limit string
		count, ended int64
	}{{TargetScope, "deliver", 1000, 100}, {TargetScope, "mail", min(scale, 10_000), 0}, {OtherScope, "deliver", min(scale, 10_000), min(scale, 10_000)}} {
		if _, err := execSeed(ctx, conn, "SeedRateWindows", map[string]any{"scope_id": s.scope, "limit_name": s.limit, "first_index": RateWindowBase, "count": s.count, "ended": s.ended}); err != nil {
			return fmt.Errorf("plancheck: seed rate windows of %s/%s: %w", s.scope, s.limit, err)
		}
	}
	for _, r := range receiptDistributions(scale) {
		base := pastBase
		if r.at.future {
			base = futureBase
		}
		if _, err := execSeed(ctx, conn, "SeedReceipts", map[string]any{
			"id_base": r.idBase, "scope_id": r.scope, "delivery_prefix": r.what + ":", "route_class": r.class,
			"router_status": r.status, "time_base": base.Add(r.at.offset), "spacing_micros": r.at.spread.Microseconds() / r.count,
			"count": r.count,
		}); err != nil {
			return fmt.Errorf("plancheck: seed receipts (%s): %w", r.what, err)
		}
	}
	if _, err := execSeed(ctx, conn, "AdmitSeededOrdinals", map[string]any{"next_ordinal": int64(maxSeededOrdinal + 1)}); err != nil {
		return fmt.Errorf("plancheck: set the scopes' next ordinal: %w", err)
	}
	for _, table := range []string{"scope", "event", "work_item", "dependency_satisfied", "wake_endpoint", "ingress_receipt", "queue_history", "rate_window"} {
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
			return fmt.Errorf("plancheck: analyze %s: %w", table, err)
		}
	}
	fmt.Fprintf(progress, "plancheck: seeded scale %d: %d work items in %s\n", scale, rows, time.Since(started).Round(time.Millisecond))
	return nil
}

// ErrStaleFixture reports a fixture checked so long after seeding that rows
// meant to be in the future came due: its measurements would describe a
// different fixture. Seed it again.
var ErrStaleFixture = errors.New("plancheck: stale fixture")

// Verify checks, just before measuring, that a seeded fixture is still what
// the cases assume: every row meant to be due is due, every row meant to be
// in the future (not-due retries, live leases) still is, with a margin, and
// the scopes' next enqueue ordinal is past every seeded row.
func Verify(ctx context.Context, db *sql.DB) error {
	var futureBase, now time.Time
	if err := db.QueryRowContext(ctx, seedStatements()["FutureBase"]).Scan(&futureBase); err != nil {
		return fmt.Errorf("plancheck: not a seeded fixture (no plancheck_fixture row): %w", err)
	}
	if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil {
		return fmt.Errorf("plancheck: read the database clock: %w", err)
	}
	const margin = 10 * time.Minute
	if left := futureBase.Sub(now); left < margin {
		return fmt.Errorf("%w: its future rows start %s from now (want at least %s): it was seeded %s ago; seed it again",
			ErrStaleFixture, left.Round(time.Second), margin, (futureLead - left).Round(time.Second))
	}
	var maxOrdinal, next int64
	if err := db.QueryRowContext(ctx, seedStatements()["FixtureOrdinals"], TargetScope, TargetScope).Scan(&maxOrdinal, &next); err != nil {
		return fmt.Errorf("plancheck: read the fixture's ordinals: %w", err)
	}
	if next <= maxOrdinal {
		return fmt.Errorf("%w: the scope's next enqueue ordinal %d is not past its largest ordinal %d", ErrStaleFixture, next, maxOrdinal)
	}
	return nil
}

func eventKeyPrefix(d distribution) string {
	if d.idBase == knownBase {
		return "known"
	}
	return fmt.Sprintf("rows%d", d.idBase)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// execSeed runs one named statement of seed.sql on conn.
func execSeed(ctx context.Context, conn *sql.Conn, name string, args map[string]any) (int64, error) {
	stmt, ok := seedStatements()[name]
	if !ok {
		return 0, fmt.Errorf("no generator %s in fixtures/seed.sql", name)
	}
	query, bound, err := Bind(stmt, args)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	res, err := conn.ExecContext(ctx, query, bound...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func seedStatements() map[string]string {
	out := map[string]string{}
	for _, st := range queries.Parse("fixtures/seed.sql", []byte(seedSQL)) {
		out[st.Name] = st.SQL
	}
	return out
}

// CountDistribution counts the rows a seeded fixture holds of the
// distribution named what (see distributions), to show a skew is there.
func CountDistribution(ctx context.Context, db *sql.DB, what string) (int64, error) {
	for _, d := range distributions(1) {
		if d.what != what {
			continue
		}
		var n int64
		err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM work_item WHERE work_id >= ? AND work_id < ?", d.idBase, d.idBase+9_000_000).Scan(&n)
		return n, err
	}
	return 0, fmt.Errorf("plancheck: no distribution %q", what)
}
