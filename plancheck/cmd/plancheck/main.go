// Command plancheck is laneq's main job: it finds or starts a TiDB (see
// internal/tidbenv for the order), seeds one migrated database per scale
// with the plan-check fixture (skewed distributions included), churns a copy
// of the largest through runtime/worker while recording the statements it
// sends, runs EXPLAIN ANALYZE for every case of queries/plancheck.json and
// for the runtime's recorded calls, prints a report, writes it as Markdown
// and JSON, and exits 1 when any statement fails a rule or has no case.
// With -dsn and -database it checks your own databases instead (a copy of
// production data, say), without seeding.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/tidbenv"
	"github.com/laneq/laneq/plancheck"
	"github.com/laneq/laneq/queries"
	"github.com/laneq/laneq/schema"
)

func main() {
	scales := flag.String("scales", "100,10000", "comma-separated fixture scales (rows of each noise distribution)")
	large := flag.Bool("large", false, "also check at scale 100000")
	out := flag.String("out", "plancheck/out", "directory for report.md and report.json")
	keep := flag.Bool("keep", false, "keep the scratch databases after the run (for inspection)")
	churn := flag.Int("churn", 5000, "items to push through runtime/worker for the churned fixture, whose calls are traced (0: no churn or trace check)")
	runs := flag.Int("runs", plancheck.DefaultRuns, "timed runs per median (after one warm-up run)")
	accept := flag.String("accept", "", "write this run's plan shapes to this golden file (queries/plancheck.golden.json) instead of comparing")
	dsn := flag.String("dsn", "", "check databases of an existing TiDB instead of seeding fixtures (with -database)")
	databases := flag.String("database", "", "with -dsn: comma-separated databases to check, smallest first (no seeding, no churn); two or more also get the scale and time rules")
	valuesFile := flag.String("values", "", "JSON object overriding the fixture values cases name as \"$name\" (for your own databases)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	cfg := config{scales: *scales, large: *large, outDir: *out, keep: *keep, accept: *accept, churn: *churn, runs: *runs,
		dsn: *dsn, databases: *databases, valuesFile: *valuesFile}
	ok, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "plancheck: %v\n", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

type config struct {
	scales                     string
	large, keep                bool
	outDir, accept             string
	churn, runs                int
	dsn, databases, valuesFile string
}

func parseScales(s string, large bool) ([]int, error) {
	var out []int
	for _, part := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 1 || n > plancheck.MaxScale {
			return nil, fmt.Errorf("-scales: %q is not a scale in 1..%d", part, plancheck.MaxScale)
		}
		out = append(out, n)
	}
	if large {
		out = append(out, plancheck.MaxScale)
	}
	if len(out) < 2 {
		return nil, fmt.Errorf("-scales: give at least two scales, so growth with the backlog shows")
	}
	return out, nil
}

func run(ctx context.Context, cfg config) (bool, error) {
	stmts, err := plancheck.CatalogStatements()
	if err != nil {
		return false, err
	}
	cases, err := plancheck.LoadCases(queries.PlanCases)
	if err != nil {
		return false, err
	}
	opts := plancheck.Options{Runs: cfg.runs, Progress: os.Stderr}
	if cfg.valuesFile != "" {
		b, err := os.ReadFile(cfg.valuesFile)
		if err != nil {
			return false, fmt.Errorf("-values: %w", err)
		}
		if err := json.Unmarshal(b, &opts.Values); err != nil {
			return false, fmt.Errorf("-values %s: %w", cfg.valuesFile, err)
		}
	}
	var fixtures []plancheck.Fixture
	var server string
	if cfg.dsn != "" || cfg.databases != "" {
		if cfg.dsn == "" || cfg.databases == "" {
			return false, fmt.Errorf("-dsn and -database go together")
		}
		var closeAll func()
		fixtures, closeAll, server, err = openOwn(ctx, cfg.dsn, cfg.databases)
		if err != nil {
			return false, err
		}
		defer closeAll()
	} else {
		scales, err := parseScales(cfg.scales, cfg.large)
		if err != nil {
			return false, err
		}
		tidbOpts, err := tidbenv.OptionsFromEnv()
		if err != nil {
			return false, err
		}
		tidbOpts.Progress = os.Stderr
		srv, err := tidbenv.Start(ctx, tidbOpts)
		if err != nil {
			return false, err
		}
		defer srv.Close()
		fmt.Fprintf(os.Stderr, "plancheck: TiDB %s (%s: %s)\n", srv.Version, srv.Kind, srv.Detail)
		server = "TiDB " + srv.Version + " (" + string(srv.Kind) + ")"
		var cleanup func()
		fixtures, cleanup, err = seedFixtures(ctx, srv, scales, cfg, &opts)
		defer cleanup()
		if err != nil {
			return false, err
		}
	}
	rep, err := plancheck.Check(ctx, stmts, cases, fixtures, opts)
	if err != nil {
		return false, err
	}
	rep.Server = server
	if cfg.accept != "" {
		if err := writeGolden(rep.Golden(), cfg.accept); err != nil {
			return false, err
		}
	} else {
		golden, err := plancheck.LoadGolden(queries.PlanGolden)
		if err != nil {
			return false, err
		}
		rep.CompareGolden(golden)
	}
	if err := rep.WriteText(os.Stdout); err != nil {
		return false, err
	}
	if err := writeFiles(rep, cfg.outDir); err != nil {
		return false, err
	}
	return rep.Pass(), nil
}

// seedFixtures creates and seeds one database per scale and, with -churn, a
// copy of the largest that the runtime churns while a Trace records its
// calls. cleanup drops them (unless -keep) and closes the pools.
func seedFixtures(ctx context.Context, srv *tidbenv.Server, scales []int, cfg config, opts *plancheck.Options) ([]plancheck.Fixture, func(), error) {
	var undo []func()
	cleanup := func() {
		for i := len(undo) - 1; i >= 0; i-- {
			undo[i]()
		}
	}
	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return nil, cleanup, fmt.Errorf("random database suffix: %w", err)
	}
	open := func(name string, scale int) (*sql.DB, error) {
		if err := srv.CreateDatabase(ctx, name); err != nil {
			return nil, err
		}
		if !cfg.keep {
			undo = append(undo, func() {
				dropCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := srv.DropDatabase(dropCtx, name); err != nil {
					fmt.Fprintf(os.Stderr, "plancheck: %v\n", err)
				}
			})
		}
		db, err := srv.Open(name)
		if err != nil {
			return nil, err
		}
		undo = append(undo, func() { db.Close() })
		if _, err := schema.Up(ctx, db); err != nil {
			return nil, err
		}
		return db, plancheck.Seed(ctx, db, int64(scale), os.Stderr)
	}
	var fixtures []plancheck.Fixture
	for _, scale := range scales {
		db, err := open(fmt.Sprintf("laneq_plancheck_%s_%d", hex.EncodeToString(suffix), scale), scale)
		if err != nil {
			return nil, cleanup, err
		}
		fixtures = append(fixtures, plancheck.Fixture{Name: fmt.Sprintf("scale %d", scale), Scale: scale, DB: db})
	}
	if cfg.churn <= 0 {
		return fixtures, cleanup, nil
	}
	largest := scales[len(scales)-1]
	name := fmt.Sprintf("laneq_plancheck_%s_%d_churned", hex.EncodeToString(suffix), largest)
	db, err := open(name, largest)
	if err != nil {
		return nil, cleanup, err
	}
	trace := plancheck.NewTrace(plancheck.DefaultTraceKeep)
	traced, err := trace.Open(srv.DSN(name))
	if err != nil {
		return nil, cleanup, err
	}
	undo = append(undo, func() { traced.Close() })
	if err := plancheck.Churn(ctx, traced, plancheck.WorkloadOptions{Items: cfg.churn, Progress: os.Stderr}); err != nil {
		return nil, cleanup, err
	}
	opts.Churned, opts.Trace = db, trace
	return fixtures, cleanup, nil
}

// openOwn opens the user's databases on dsn, unseeded.
func openOwn(ctx context.Context, dsn, databases string) ([]plancheck.Fixture, func(), string, error) {
	var dbs []*sql.DB
	closeAll := func() {
		for _, db := range dbs {
			db.Close()
		}
	}
	var fixtures []plancheck.Fixture
	for _, name := range strings.Split(databases, ",") {
		name = strings.TrimSpace(name)
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			return nil, closeAll, "", fmt.Errorf("-dsn: %w", err)
		}
		cfg.DBName = name
		cfg.ParseTime, cfg.ClientFoundRows, cfg.InterpolateParams, cfg.Loc = true, true, true, time.UTC
		if cfg.Params == nil {
			cfg.Params = map[string]string{}
		}
		cfg.Params["time_zone"] = "'+00:00'"
		if _, set := cfg.Params["tidb_opt_fix_control"]; !set { // as workqueue.OpenDB
			cfg.Params["tidb_opt_fix_control"] = "'44830:ON'"
		}
		db, err := sql.Open("mysql", cfg.FormatDSN())
		if err != nil {
			return nil, closeAll, "", err
		}
		dbs = append(dbs, db)
		if err := db.PingContext(ctx); err != nil {
			return nil, closeAll, "", fmt.Errorf("database %s: %w", name, err)
		}
		fixtures = append(fixtures, plancheck.Fixture{Name: name, DB: db})
	}
	var version string
	if err := dbs[0].QueryRowContext(ctx, "SELECT VERSION()").Scan(&version); err != nil {
		return nil, closeAll, "", err
	}
	return fixtures, closeAll, "TiDB " + version + " (your databases)", nil
}

func writeGolden(g plancheck.Golden, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if err := g.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	fmt.Fprintf(os.Stderr, "plancheck: accepted %d plan shapes at scale %d into %s\n", len(g.Shapes), g.Scale, path)
	return nil
}

func writeFiles(rep plancheck.Report, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for name, write := range map[string]func(*os.File) error{
		"report.md":   func(f *os.File) error { return rep.WriteMarkdown(f) },
		"report.json": func(f *os.File) error { return rep.WriteJSON(f) },
	} {
		path := filepath.Join(dir, name)
		f, err := os.Create(path)
		if err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", path, err)
		}
		fmt.Fprintf(os.Stderr, "plancheck: wrote %s\n", path)
	}
	return nil
}
