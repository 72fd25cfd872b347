// Command plancheck is laneq's main job: it finds or starts a TiDB (see
// internal/tidbenv for the order), seeds one migrated database per scale
// with the plan-check fixture, runs EXPLAIN ANALYZE for every case of
// queries/plancheck.json, prints a report, writes it as Markdown and JSON,
// and exits 1 when any statement fails a rule or has no case.
package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

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
	churn := flag.Int("churn", 5000, "items to push through the claim path for the churned fixture (0: no churn check)")
	accept := flag.String("accept", "", "write this run's plan shapes to this golden file (queries/plancheck.golden.json) instead of comparing")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ok, err := run(ctx, *scales, *large, *out, *keep, *accept, *churn)
	if err != nil {
		fmt.Fprintf(os.Stderr, "plancheck: %v\n", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
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

func run(ctx context.Context, scaleList string, large bool, outDir string, keep bool, accept string, churn int) (bool, error) {
	scales, err := parseScales(scaleList, large)
	if err != nil {
		return false, err
	}
	stmts, err := plancheck.CatalogStatements()
	if err != nil {
		return false, err
	}
	cases, err := plancheck.LoadCases(queries.PlanCases)
	if err != nil {
		return false, err
	}
	opts, err := tidbenv.OptionsFromEnv()
	if err != nil {
		return false, err
	}
	opts.Progress = os.Stderr
	srv, err := tidbenv.Start(ctx, opts)
	if err != nil {
		return false, err
	}
	defer srv.Close()
	fmt.Fprintf(os.Stderr, "plancheck: TiDB %s (%s: %s)\n", srv.Version, srv.Kind, srv.Detail)

	suffix := make([]byte, 3)
	if _, err := rand.Read(suffix); err != nil {
		return false, fmt.Errorf("random database suffix: %w", err)
	}
	var dbs []plancheck.ScaleDB
	var churned *sql.DB
	fixtures := append([]int(nil), scales...)
	if churn > 0 { // one more fixture at the largest scale, to churn
		fixtures = append(fixtures, scales[len(scales)-1])
	}
	for i, scale := range fixtures {
		name := fmt.Sprintf("laneq_plancheck_%s_%d", hex.EncodeToString(suffix), scale)
		isChurned := i == len(scales)
		if isChurned {
			name += "_churned"
		}
		if err := srv.CreateDatabase(ctx, name); err != nil {
			return false, err
		}
		if !keep {
			defer func() {
				dropCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := srv.DropDatabase(dropCtx, name); err != nil {
					fmt.Fprintf(os.Stderr, "plancheck: %v\n", err)
				}
			}()
		}
		db, err := srv.Open(name)
		if err != nil {
			return false, err
		}
		defer db.Close()
		if _, err := schema.Up(ctx, db); err != nil {
			return false, err
		}
		if err := plancheck.Seed(ctx, db, int64(scale), os.Stderr); err != nil {
			return false, err
		}
		if isChurned {
			if err := plancheck.Churn(ctx, db, churn, os.Stderr); err != nil {
				return false, err
			}
			churned = db
			continue
		}
		dbs = append(dbs, plancheck.ScaleDB{Scale: scale, DB: db})
	}
	rep, err := plancheck.Check(ctx, stmts, cases, dbs, churned, os.Stderr)
	if err != nil {
		return false, err
	}
	rep.Server = "TiDB " + srv.Version + " (" + string(srv.Kind) + ")"
	if accept != "" {
		if err := writeGolden(rep.Golden(), accept); err != nil {
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
	if err := writeFiles(rep, outDir); err != nil {
		return false, err
	}
	return rep.Pass(), nil
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
