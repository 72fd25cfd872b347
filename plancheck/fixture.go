package plancheck

import (
	"context"
	"database/sql"
	_ "embed"
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
	TargetScope = "plan/target"
	OtherScope  = "plan/other"
	targetGen   = 2
	knownBase   = 1_000_000 // ids and ordinals of the target scope's interesting rows
)

// Values are the fixture facts cases can name as "$key" arguments.
func Values() map[string]any {
	return map[string]any{
		"scope":              TargetScope,
		"generation":         int64(targetGen),
		"head_work_id":       int64(knownBase),             // a due pending lane head
		"head_ordinal":       int64(knownBase),             // its lane ordinal
		"blocked_work_id":    int64(knownBase + 100),       // a blocked follower
		"blocked_ordinal":    int64(knownBase + 100),       // its lane ordinal
		"processing_work_id": int64(knownBase + 200),       // a leased row
		"event_id":           int64(knownBase),             // the head's event
		"idempotency_key":    "known:0",                    // that event's key
		"lane":               "lane:0",                     // the head's source lane
		"target_lane":        "acct:0",                     // the head's target lane
		"wake_key":           "wake:0",                     // a dependency wake key
		"lease_token":        int64(0),                     // seeded rows' token
		"next_ordinal":       int64(knownBase + 1_000_000), // past every seeded ordinal
	}
}

// distribution is one kind of seeded row.
type distribution struct {
	what                 string
	scope                string
	generation           int64
	state                string
	dueInSeconds         int64
	source, target, proj string
	projActive           bool
	wake                 string
	lanes                int64
	idBase, ordinalBase  int64
	count                int64
	leaseInSeconds       int64
	scaled               bool // count is the scale, not a constant
	workType, queueClass string
}

// distributions are the fixture: a constant set of interesting rows in the
// target scope, and `scale` rows of every kind of noise the seeds name.
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
		if x.scaled {
			x.count = scale
		}
		return x
	}
	const noise = 10_000_000
	return []distribution{
		// The target scope's interesting rows (constant at every scale).
		d(distribution{what: "lane heads", scope: TargetScope, generation: targetGen, state: "pending", source: "lane:", target: "acct:", idBase: knownBase, ordinalBase: knownBase, count: 20}),
		d(distribution{what: "blocked followers of the heads", scope: TargetScope, generation: targetGen, state: "blocked", source: "lane:", target: "acct:", idBase: knownBase + 100, ordinalBase: knownBase + 100, count: 20}),
		d(distribution{what: "leased rows", scope: TargetScope, generation: targetGen, state: "processing", source: "run:", leaseInSeconds: 600, idBase: knownBase + 200, ordinalBase: knownBase + 200, count: 10}),
		d(distribution{what: "expired leases", scope: TargetScope, generation: targetGen, state: "processing", source: "stale:", leaseInSeconds: -60, idBase: knownBase + 300, ordinalBase: knownBase + 300, count: 5}),
		d(distribution{what: "retries in backoff", scope: TargetScope, generation: targetGen, state: "pending", dueInSeconds: 600, source: "retry:", idBase: knownBase + 400, ordinalBase: knownBase + 400, count: 5}),
		d(distribution{what: "dependency waiters", scope: TargetScope, generation: targetGen, state: "waiting_dependency", source: "dep:", wake: "wake:", idBase: knownBase + 500, ordinalBase: knownBase + 500, count: 10}),

		// Noise, `scale` rows each, placed where a careless plan would read it.
		d(distribution{what: "other scopes", scope: OtherScope, generation: targetGen, state: "pending", source: "lane:", target: "acct:", idBase: 1 * noise, ordinalBase: knownBase, scaled: true}),
		d(distribution{what: "other generations", scope: TargetScope, generation: targetGen - 1, state: "pending", source: "lane:", target: "acct:", idBase: 2 * noise, ordinalBase: 0, scaled: true}),
		d(distribution{what: "terminal history in the same lanes", scope: TargetScope, generation: targetGen, state: "completed", source: "lane:", target: "acct:", idBase: 3 * noise, ordinalBase: 0, scaled: true}),
		d(distribution{what: "processing rows", scope: TargetScope, generation: targetGen, state: "processing", source: "busy:", leaseInSeconds: 600, lanes: 1000, idBase: 4 * noise, ordinalBase: 2 * knownBase, scaled: true}),
		d(distribution{what: "blocked followers in the same lanes", scope: TargetScope, generation: targetGen, state: "blocked", source: "lane:", target: "acct:", idBase: 5 * noise, ordinalBase: 3 * knownBase, scaled: true}),
		d(distribution{what: "inactive projection successors", scope: TargetScope, generation: targetGen, state: "blocked", proj: "proj:", source: "proj:", idBase: 6 * noise, ordinalBase: 4 * knownBase, scaled: true}),
		d(distribution{what: "dependency waiters", scope: TargetScope, generation: targetGen, state: "waiting_dependency", source: "wait:", wake: "wake:", lanes: 100, idBase: 7 * noise, ordinalBase: 5 * knownBase, scaled: true}),
		d(distribution{what: "same scope, other lanes, due", scope: TargetScope, generation: targetGen, state: "pending", source: "other:", lanes: 1000, idBase: 8 * noise, ordinalBase: 6 * knownBase, scaled: true}),
		d(distribution{what: "same scope, other lanes, not due", scope: TargetScope, generation: targetGen, state: "pending", dueInSeconds: 3600, source: "later:", lanes: 1000, idBase: 9 * noise, ordinalBase: 7 * knownBase, scaled: true}),
	}
}

// MaxScale is the largest scale the generators can seed.
const MaxScale = 100_000

// Seed fills an empty, migrated database with the fixture at scale and
// analyzes the tables. Progress goes to progress.
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
	if _, err := execSeed(ctx, conn, "AllowExplicitIDs", nil); err != nil {
		return fmt.Errorf("plancheck: %w", err)
	}
	var rows int64
	for _, d := range distributions(scale) {
		n, err := execSeed(ctx, conn, "SeedWorkItems", map[string]any{
			"id_base": d.idBase, "scope_id": d.scope, "generation": d.generation, "work_type": d.workType,
			"queue_class": d.queueClass, "state": d.state, "due_in_seconds": d.dueInSeconds,
			"source_lane_prefix": d.source, "target_lane_prefix": d.target, "lanes": d.lanes,
			"ordinal_base": d.ordinalBase, "projection_prefix": d.proj, "projection_active": boolInt(d.projActive),
			"lease_in_seconds": d.leaseInSeconds, "wake_prefix": d.wake, "count": d.count,
		})
		if err != nil {
			return fmt.Errorf("plancheck: seed %s: %w", d.what, err)
		}
		rows += n
		if d.scaled || d.idBase == knownBase {
			// Events for the rows (event_id = work_id), so event reads have data.
			if _, err := execSeed(ctx, conn, "SeedEvents", map[string]any{
				"id_base": d.idBase, "scope_id": d.scope, "generation": d.generation,
				"key_prefix": fmt.Sprintf("%s:", eventKeyPrefix(d)), "count": d.count,
			}); err != nil {
				return fmt.Errorf("plancheck: seed events of %s: %w", d.what, err)
			}
		}
	}
	for _, table := range []string{"scope", "event", "work_item"} {
		if _, err := db.ExecContext(ctx, "ANALYZE TABLE "+table); err != nil {
			return fmt.Errorf("plancheck: analyze %s: %w", table, err)
		}
	}
	fmt.Fprintf(progress, "plancheck: seeded scale %d: %d work items in %s\n", scale, rows, time.Since(started).Round(time.Millisecond))
	return nil
}

func eventKeyPrefix(d distribution) string {
	if d.idBase == knownBase {
		return "known"
	}
	return fmt.Sprintf("noise%d", d.idBase)
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
