package tidbtest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/laneq/laneq/internal/tidbenv"
	"github.com/laneq/laneq/schema"
)

// Migrating a database costs about two seconds on the embedded engine (27
// goose migrations, each DDL a schema-version round); emptying one costs a
// tenth of that. So a test binary keeps the migrated databases its tests
// gave back and hands them to the next test: a database is used by one test
// at a time, parallel tests get one each, and the pool grows to the number
// of tests running at once.
//
// A database goes back to the pool only when it is exactly as migrated: the
// test's connections are closed, the set of tables, columns and indexes is
// the one it was created with, and every table but goose's version table
// has been emptied. Anything else (a test that altered the schema, a row
// locked by a straggler past the lock wait) drops it instead.

// resetBatch bounds the DELETE that empties a table; a table with more rows
// than this is truncated (a DDL, slower for small tables, constant for big
// ones, and it also resets the table's statistics and AUTO_INCREMENT).
const resetBatch = 500

type pooledDB struct {
	name  string
	shape string // fingerprint of tables, columns and indexes when created
}

var pool struct {
	mu    sync.Mutex
	free  []pooledDB
	all   []string // every pooled database, dropped at Main's end
	admin *sql.DB
}

// takePooled returns a migrated, empty database nobody else is using.
func takePooled(ctx context.Context, srv *tidbenv.Server) (pooledDB, error) {
	pool.mu.Lock()
	if n := len(pool.free); n > 0 {
		p := pool.free[n-1]
		pool.free = pool.free[:n-1]
		pool.mu.Unlock()
		return p, nil
	}
	pool.mu.Unlock()
	name := "laneq_p_" + randomHex(6)
	if err := createMigrated(ctx, srv, name); err != nil {
		// Leave nothing half-made behind.
		_ = srv.DropDatabase(context.Background(), name)
		return pooledDB{}, err
	}
	admin, err := adminDB(srv)
	if err != nil {
		return pooledDB{}, err
	}
	shape, err := schemaShape(ctx, admin, name)
	if err != nil {
		_ = srv.DropDatabase(context.Background(), name)
		return pooledDB{}, err
	}
	pool.mu.Lock()
	pool.all = append(pool.all, name)
	pool.mu.Unlock()
	return pooledDB{name: name, shape: shape}, nil
}

// giveBack empties p and returns it to the pool, or drops it when it cannot
// be restored to exactly what takePooled hands out.
func giveBack(srv *tidbenv.Server, p pooledDB) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := reset(ctx, srv, p); err != nil {
		if dropErr := srv.DropDatabase(ctx, p.name); dropErr != nil {
			return fmt.Errorf("tidbtest: %v; then drop: %w", err, dropErr)
		}
		pool.mu.Lock()
		for i, n := range pool.all {
			if n == p.name {
				pool.all = append(pool.all[:i], pool.all[i+1:]...)
				break
			}
		}
		pool.mu.Unlock()
		return nil
	}
	pool.mu.Lock()
	pool.free = append(pool.free, p)
	pool.mu.Unlock()
	return nil
}

func reset(ctx context.Context, srv *tidbenv.Server, p pooledDB) error {
	admin, err := adminDB(srv)
	if err != nil {
		return err
	}
	shape, err := schemaShape(ctx, admin, p.name)
	if err != nil {
		return err
	}
	if shape != p.shape {
		return fmt.Errorf("the test changed the schema of %s", p.name)
	}
	conn, err := admin.Conn(ctx)
	if err != nil {
		return fmt.Errorf("reset %s: %w", p.name, err)
	}
	defer conn.Close()
	// A straggler holding a row lock makes the DELETE wait; give up soon
	// and drop the database instead.
	if _, err := conn.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 5"); err != nil {
		return fmt.Errorf("reset %s: %w", p.name, err)
	}
	for _, table := range tablesOf(p.shape) {
		if table == schema.VersionTable {
			continue
		}
		q := quote(p.name) + "." + quote(table)
		res, err := conn.ExecContext(ctx, fmt.Sprintf("DELETE FROM %s LIMIT %d", q, resetBatch+1))
		if err != nil {
			return fmt.Errorf("reset %s: %w", q, err)
		}
		if n, _ := res.RowsAffected(); n > resetBatch {
			if _, err := conn.ExecContext(ctx, "TRUNCATE TABLE "+q); err != nil {
				return fmt.Errorf("reset %s: %w", q, err)
			}
		}
	}
	return nil
}

// schemaShape fingerprints the tables, columns and indexes of database, one
// line per column and per index column, sorted.
func schemaShape(ctx context.Context, admin *sql.DB, database string) (string, error) {
	rows, err := admin.QueryContext(ctx, `
SELECT CONCAT('c ', table_name, ' ', column_name, ' ', column_type, ' ', is_nullable) AS line
  FROM information_schema.columns WHERE table_schema = ?
UNION ALL
SELECT CONCAT('i ', table_name, ' ', index_name, ' ', seq_in_index, ' ', column_name, ' ', non_unique)
  FROM information_schema.statistics WHERE table_schema = ?
ORDER BY line`, database, database)
	if err != nil {
		return "", fmt.Errorf("tidbtest: read the schema of %s: %w", database, err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return "", fmt.Errorf("tidbtest: read the schema of %s: %w", database, err)
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("tidbtest: read the schema of %s: %w", database, err)
	}
	return b.String(), nil
}

// tablesOf lists the tables a shape names, in order.
func tablesOf(shape string) []string {
	var tables []string
	seen := map[string]bool{}
	for _, line := range strings.Split(shape, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "c" || seen[f[1]] {
			continue
		}
		seen[f[1]] = true
		tables = append(tables, f[1])
	}
	return tables
}

func adminDB(srv *tidbenv.Server) (*sql.DB, error) {
	pool.mu.Lock()
	defer pool.mu.Unlock()
	if pool.admin == nil {
		db, err := srv.Open("")
		if err != nil {
			return nil, err
		}
		pool.admin = db
	}
	return pool.admin, nil
}

// dropPooled drops every pooled database; Main calls it after the tests.
func dropPooled(srv *tidbenv.Server) {
	pool.mu.Lock()
	names := pool.all
	pool.all, pool.free = nil, nil
	admin := pool.admin
	pool.admin = nil
	pool.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range names {
		if err := srv.DropDatabase(ctx, name); err != nil {
			fmt.Fprintf(os.Stderr, "tidbtest: %v\n", err)
		}
	}
	if admin != nil {
		admin.Close()
	}
}

func quote(name string) string { return "`" + strings.ReplaceAll(name, "`", "``") + "`" }

// newPooledDB is NewDBWithDSN's body: a database from the pool, a
// connection pool of the test's own, and its return when the test ends.
func newPooledDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	srv := Server(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := takePooled(ctx, srv)
	if err != nil {
		t.Fatalf("tidbtest: %v", err)
	}
	db, err := srv.Open(p.name)
	if err != nil {
		t.Fatalf("tidbtest: %v", err)
	}
	// Registered first, so it runs after every cleanup the test registers
	// later (clients, workers, child processes): nothing of the test is
	// still writing when the database is emptied.
	t.Cleanup(func() {
		db.Close()
		if err := giveBack(srv, p); err != nil {
			t.Errorf("%v", err)
		}
	})
	return db, srv.DSN(p.name)
}
