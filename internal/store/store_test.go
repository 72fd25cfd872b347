package store_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/sqlcount"
	"github.com/laneq/laneq/internal/store"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestMain(m *testing.M) { os.Exit(tidbtest.Main(m)) }

func TestConversions(t *testing.T) {
	t.Parallel()
	if got := store.Micros(1500 * time.Microsecond); got != 1500 {
		t.Errorf("Micros(1.5ms) = %d, want 1500", got)
	}
	if got := store.Micros(1999 * time.Nanosecond); got != 1 {
		t.Errorf("Micros(1.999µs) = %d, want 1 (whole microseconds)", got)
	}
	if got := store.FromMicros(1500); got != 1500*time.Microsecond {
		t.Errorf("FromMicros(1500) = %s, want 1.5ms", got)
	}
	if got := store.NullString(""); got.Valid {
		t.Errorf("NullString(\"\") = %+v, want NULL", got)
	}
	if got := store.NullString("k"); !got.Valid || got.String != "k" {
		t.Errorf("NullString(\"k\") = %+v, want \"k\"", got)
	}
	if got := store.Errno(errors.Join(errors.New("x"), &mysql.MySQLError{Number: 1213})); got != 1213 {
		t.Errorf("Errno of a wrapped 1213 = %d", got)
	}
	if got := store.Errno(errors.New("x")); got != 0 {
		t.Errorf("Errno of a non-MySQL error = %d, want 0", got)
	}
}

// TestStorePreparesUnlessTextProtocol: a Store's statements, on the pool
// and in a transaction, run prepared (SessionSettings, prepared by the
// check, at most once more per connection); with TextProtocol nothing is
// prepared.
func TestStorePreparesUnlessTextProtocol(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	for _, text := range []bool{false, true} {
		db, c, err := sqlcount.Open(dsn)
		if err != nil {
			t.Fatal(err)
		}
		db.SetMaxOpenConns(2) // a transaction's statement is prepared on the pool first (prepcache)
		st, err := store.New(db, store.Options{TextProtocol: text})
		if err != nil {
			db.Close()
			t.Fatalf("TextProtocol %v: %v", text, err)
		}
		ctx := context.Background()
		prepared := c.Statements() - c.Executed() // by the session check
		for range 3 {
			if _, err := st.Queries().SessionSettings(ctx); err != nil {
				t.Fatal(err)
			}
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.InTx(tx).SessionSettings(ctx); err != nil {
			t.Fatal(err)
		}
		_ = tx.Rollback()
		after := c.Statements() - c.Executed()
		switch {
		case text && after != 0:
			t.Errorf("TextProtocol: %d statements prepared, want none", after)
		case !text && (prepared == 0 || after-prepared > 2):
			t.Errorf("%d prepares by the check and %d after it, want some and then at most one per connection", prepared, after-prepared)
		}
		if st.DB() != db || st.WriteTimeout() != store.DefaultWriteTimeout {
			t.Errorf("DB or WriteTimeout not kept: %v", st.WriteTimeout())
		}
		db.Close()
	}
}

// TestNewRefusesABadSession: New runs the session check; its errors are
// the *SessionError values workqueue re-exports.
func TestNewRefusesABadSession(t *testing.T) {
	t.Parallel()
	_, dsn := tidbtest.NewDBWithDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Params["time_zone"] = "'-05:00'"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, err = store.New(db, store.Options{})
	var se *store.SessionError
	if !errors.As(err, &se) || se.Setting != "time_zone" || !errors.Is(err, store.ErrSessionSettings) {
		t.Fatalf("New on a -05:00 session: %v, want a *SessionError for time_zone", err)
	}
	// A write timeout at or below the session's lock wait is refused.
	good, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	if _, err := store.New(good, store.Options{WriteTimeout: 2 * time.Second}); !errors.As(err, &se) || se.Setting != "innodb_lock_wait_timeout" {
		t.Fatalf("New with WriteTimeout 2s: %v, want a *SessionError for innodb_lock_wait_timeout", err)
	}
}
