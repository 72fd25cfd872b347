// Package serverusage reads what TiDB itself counted for the statements run
// in one database: request units (RU, what TiDB Cloud bills and resource
// groups limit) and keys processed, summed over its statement summary
// (information_schema.statements_summary_history: every window the server
// keeps, the current one included, so a window that rotates during a
// measurement loses nothing).
//
// A measurement takes two readings and subtracts them (Usage.Sub): the
// statements that set a database up are left out, and so are the two reads
// themselves (they touch no storage and cost no RU).
//
// Keys are what TiKV reports per coprocessor request (total keys scanned,
// processed keys). The embedded engine (unistore) reports none, so Keys is
// 0 there and only RU is measured; plancheck's rows read are the keys
// figure on that engine.
package serverusage

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// Usage is what the server counted for one database's statements.
type Usage struct {
	Executions int64   // statements executed
	ReadRU     float64 // request units for reads
	WriteRU    float64 // request units for writes
	TotalKeys  float64 // keys scanned, delete markers included (TiKV only)
	Processed  float64 // keys processed (TiKV only)
}

// RU is the statements' request units, read and write.
func (u Usage) RU() float64 { return u.ReadRU + u.WriteRU }

// Sub returns what was counted between an earlier reading and u.
func (u Usage) Sub(earlier Usage) Usage {
	return Usage{
		Executions: u.Executions - earlier.Executions,
		ReadRU:     u.ReadRU - earlier.ReadRU,
		WriteRU:    u.WriteRU - earlier.WriteRU,
		TotalKeys:  u.TotalKeys - earlier.TotalKeys,
		Processed:  u.Processed - earlier.Processed,
	}
}

// PerItem is a Usage divided by the items it served.
type PerItem struct {
	Statements, ReadRU, WriteRU, TotalKeys, Processed float64
}

// RU is the request units per item, read and write.
func (p PerItem) RU() float64 { return p.ReadRU + p.WriteRU }

// PerItem divides every figure by items.
func (u Usage) PerItem(items int) PerItem {
	n := float64(max(items, 1))
	return PerItem{
		Statements: float64(u.Executions) / n,
		ReadRU:     u.ReadRU / n, WriteRU: u.WriteRU / n,
		TotalKeys: u.TotalKeys / n, Processed: u.Processed / n,
	}
}

// Enable makes the server keep a summary entry for every statement of a
// measurement: the default of 3,000 entries is shared by every database of
// the server, and a test server holds hundreds of databases, each with its
// own entries; an evicted entry would drop out of the sums. It needs the
// SUPER or SYSTEM_VARIABLES_ADMIN privilege and changes the whole server.
func Enable(ctx context.Context, db *sql.DB) error {
	for _, set := range []string{
		"SET GLOBAL tidb_enable_stmt_summary = ON",
		"SET GLOBAL tidb_stmt_summary_max_stmt_count = 32767",
	} {
		if _, err := db.ExecContext(ctx, set); err != nil {
			return fmt.Errorf("serverusage: %s: %w", set, err)
		}
	}
	return nil
}

// Read sums the statement summary of db's database (its DSN's), every
// window the server keeps (statements_summary_history holds the current
// window too). The averages the summary keeps are multiplied back by
// their execution counts.
func Read(ctx context.Context, db *sql.DB) (Usage, error) { return ReadExcept(ctx, db, "") }

// ReadExcept is Read without the statements whose normalized text (the
// summary's digest_text: lower case, names in backquotes, literals as ?)
// matches the LIKE pattern text ("": none left out): a harness's own
// bookkeeping beside what it measures. The text, not the summary's table
// list: TiDB leaves table_names empty for some statements (an UPDATE with
// an IN list, seen on v8.5.6), which a table pattern would count.
func ReadExcept(ctx context.Context, db *sql.DB, text string) (Usage, error) {
	var u Usage
	const sums = `SELECT COALESCE(SUM(exec_count), 0),
	COALESCE(SUM(exec_count * avg_request_unit_read), 0),
	COALESCE(SUM(exec_count * avg_request_unit_write), 0),
	COALESCE(SUM(exec_count * avg_total_keys), 0),
	COALESCE(SUM(exec_count * avg_processed_keys), 0)
FROM information_schema.statements_summary_history
WHERE schema_name = DATABASE()
  AND (? = '' OR digest_text NOT LIKE ?)`
	err := db.QueryRowContext(ctx, sums, text, text).Scan(&u.Executions, &u.ReadRU, &u.WriteRU, &u.TotalKeys, &u.Processed)
	if err != nil {
		return Usage{}, fmt.Errorf("serverusage: read the statement summary: %w", err)
	}
	return u, nil
}

// Statement is one statement's share of what the server counted: its
// normalized text (abridged), executions, server time and RU.
type Statement struct {
	Text       string
	Executions int64
	Latency    time.Duration // summed over executions: parse, plan, execution, commit
	RU         float64
}

// Top returns the n statements of db's database that took the most server
// time, most first: where the server's own work went (a statement-level
// profile). Counted from the first statement the summary kept, so take it
// on a database that ran only what is measured, or compare with an earlier
// call.
func Top(ctx context.Context, db *sql.DB, n int) ([]Statement, error) {
	const top = `SELECT LEFT(digest_text, 72), SUM(exec_count), SUM(sum_latency),
	SUM(exec_count * (avg_request_unit_read + avg_request_unit_write))
FROM information_schema.statements_summary_history
WHERE schema_name = DATABASE()
GROUP BY digest, LEFT(digest_text, 72)
ORDER BY SUM(sum_latency) DESC
LIMIT ?`
	rows, err := db.QueryContext(ctx, top, n)
	if err != nil {
		return nil, fmt.Errorf("serverusage: read the top statements: %w", err)
	}
	defer rows.Close()
	var out []Statement
	for rows.Next() {
		var s Statement
		var ns int64
		if err := rows.Scan(&s.Text, &s.Executions, &ns, &s.RU); err != nil {
			return nil, fmt.Errorf("serverusage: read the top statements: %w", err)
		}
		s.Latency = time.Duration(ns)
		out = append(out, s)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("serverusage: read the top statements: %w", err)
	}
	return out, nil
}
