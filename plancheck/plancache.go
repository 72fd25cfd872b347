package plancheck

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// planCacheRuns bounds how often PlanCached runs a statement before it
// calls its plan uncached. One uncached run after the first proves nothing:
// a statistics update or a schema change elsewhere in the instance (other
// tests create databases all the time) invalidates a cached plan without a
// warning. A statement TiDB cannot cache usually says why on its first run.
const planCacheRuns = 5

// PlanCached runs a bound statement as a prepared statement on one session
// and reports whether TiDB took a later run's plan from its prepared plan
// cache and, when it did not, the reason TiDB gave. Each run is rolled back.
//
// The runtime executes every catalog statement prepared (internal/prepcache)
// so that claim-path statements skip the optimizer; a hot statement whose
// plan TiDB will not cache pays the optimizer on every claim or finish.
func PlanCached(ctx context.Context, db *sql.DB, query string, args []any) (cached bool, reason string, err error) {
	conn, err := db.Conn(ctx) // the plan cache is per session
	if err != nil {
		return false, "", err
	}
	defer conn.Close()
	st, err := conn.PrepareContext(ctx, query)
	if err != nil {
		return false, "", fmt.Errorf("prepare: %w", err)
	}
	defer st.Close()
	// Each run in its own transaction: a table this transaction already
	// wrote is read through its uncommitted changes, which TiDB never
	// takes a cached plan for.
	for run := range planCacheRuns {
		if _, err := conn.ExecContext(ctx, "BEGIN"); err != nil {
			return false, "", err
		}
		var fromCache int
		err := func() error {
			defer conn.ExecContext(ctx, "ROLLBACK") //nolint:errcheck // the check must change nothing
			rows, err := st.QueryContext(ctx, args...)
			if err != nil {
				return fmt.Errorf("execute: %w", err)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if run == 0 {
				reason, err = planCacheWarning(ctx, conn)
				return err
			}
			return conn.QueryRowContext(ctx, "SELECT @@last_plan_from_cache").Scan(&fromCache)
		}()
		switch {
		case err != nil:
			return false, "", err
		case fromCache == 1:
			return true, "", nil
		}
	}
	if reason == "" {
		reason = fmt.Sprintf("TiDB gave no reason; no run of %d took a cached plan", planCacheRuns)
	}
	return false, reason, nil
}

// planCacheWarning returns the session's warning that says why a plan was
// not cached, if any.
func planCacheWarning(ctx context.Context, conn *sql.Conn) (string, error) {
	rows, err := conn.QueryContext(ctx, "SHOW WARNINGS")
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var found string
	for rows.Next() {
		var level, msg string
		var code int
		if err := rows.Scan(&level, &code, &msg); err != nil {
			return "", err
		}
		if strings.Contains(msg, "plan-cache") || strings.Contains(msg, "plan cache") {
			found = msg
		}
	}
	return found, rows.Err()
}
