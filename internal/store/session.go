package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/laneq/laneq/gen"
)

// The session check's errors keep the "workqueue:" prefix they had when
// the check lived in runtime/workqueue, which re-exports them.

// ErrSessionSettings is matched (errors.Is) by every *SessionError.
var ErrSessionSettings = errors.New("workqueue: unusable session settings")

// ErrOptimisticMode is matched by the *SessionError for tidb_txn_mode:
// in TiDB's optimistic mode READ COMMITTED silently becomes REPEATABLE READ,
// and a finishing transaction could miss a concurrent finisher's commit.
var ErrOptimisticMode = errors.New("workqueue: TiDB sessions must use pessimistic transactions (tidb_txn_mode)")

// SessionError names a connection setting laneq cannot work with, what the
// session has and what it needs. New returns one per bad setting, joined.
type SessionError struct {
	Setting string // DSN parameter or session variable, e.g. "time_zone"
	Got     string
	Want    string
	Why     string
}

func (e *SessionError) Error() string {
	return fmt.Sprintf("workqueue: session setting %s is %q, want %s: %s", e.Setting, e.Got, e.Want, e.Why)
}

func (e *SessionError) Is(target error) bool {
	return target == ErrSessionSettings || (target == ErrOptimisticMode && e.Setting == "tidb_txn_mode")
}

// ErrPreReleaseSchema reports tables migrated by a pre-release laneq, whose
// key columns used PAD SPACE collations ('k' and 'k ' the same key). The
// migrations were reworked before the first release and goose records them
// as applied, so schema.Up cannot repair such a database: create it again.
var ErrPreReleaseSchema = errors.New("workqueue: tables from a pre-release laneq compare keys ignoring trailing spaces; create the database again")

// errUnknownTimeZone is the MySQL error of a time_zone the server does not
// know (the DSN's, set at connect).
const errUnknownTimeZone = 1298

// utcZones are time_zone values that are UTC all year.
var utcZones = map[string]bool{
	"+00:00": true, "+0:00": true, "-00:00": true, "UTC": true, "Etc/UTC": true, "GMT": true, "Etc/GMT": true,
	"Universal": true, "Etc/Universal": true, "Zulu": true, "Etc/Zulu": true, "GMT0": true, "Etc/GMT0": true,
	"Etc/GMT+0": true, "Etc/GMT-0": true, "UCT": true, "Etc/UCT": true,
}

// sessionCheckScope is a scope id no caller can use (workqueue refuses
// control characters in scope ids): the clientFoundRows check writes it in
// a transaction it rolls back.
const sessionCheckScope = "\x01laneq-session-check"

// Check verifies the settings every laneq statement relies on, on one
// connection of the pool (all of a pool's connections share its DSN), and
// that the tables compare keys exactly (see ErrPreReleaseSchema):
//
//   - parseTime=true and loc=UTC: DATETIME columns scan into UTC times;
//   - clientFoundRows=true: RowsAffected counts matched rows, which is what
//     a compare-and-swap that may rewrite a value with itself needs;
//   - a session time zone that is UTC all year: stored times are NOW(6);
//   - pessimistic transactions (tidb_txn_mode);
//   - a lock-wait timeout below WriteTimeout (see
//     workqueue.DefaultLockWaitTimeout).
//
// New runs it; it writes nothing that stays.
func (st *Store) Check(ctx context.Context) error {
	var errs []error
	s, err := st.q.SessionSettings(ctx)
	if err != nil {
		if Errno(err) == errUnknownTimeZone { // the DSN's time_zone, set at connect
			return &SessionError{Setting: "time_zone", Got: "a zone this TiDB does not know", Want: "'+00:00'",
				Why: err.Error()}
		}
		if strings.Contains(err.Error(), "Scan") {
			return &SessionError{Setting: "parseTime", Got: "false", Want: "true",
				Why: "DATETIME columns must scan into time.Time (" + err.Error() + ")"}
		}
		return fmt.Errorf("workqueue: read session settings: %w", err)
	}
	if loc := s.DbNow.Location(); loc != time.UTC {
		errs = append(errs, &SessionError{Setting: "loc", Got: loc.String(), Want: "UTC",
			Why: "stored times are UTC; the driver must read them as UTC"})
	}
	zone, system := fmt.Sprintf("%s", s.TimeZone), fmt.Sprintf("%s", s.SystemTimeZone)
	effective := zone
	if strings.EqualFold(zone, "SYSTEM") {
		effective = system
	}
	// NOW() and UTC_TIMESTAMP() are read a moment apart and rounded to whole
	// seconds, so they may differ by one; a zone's offset is whole minutes.
	if !utcZones[effective] || s.UtcOffsetSeconds < -1 || s.UtcOffsetSeconds > 1 {
		got := zone
		if zone != effective {
			got = fmt.Sprintf("%s (%s)", zone, system)
		}
		errs = append(errs, &SessionError{Setting: "time_zone", Got: got, Want: "'+00:00' (DSN time_zone=%27%2B00%3A00%27)",
			Why: "due times and leases are NOW(6); sessions in two zones would disagree about them by the offset"})
	}
	if mode := fmt.Sprintf("%s", s.TxnMode); strings.EqualFold(mode, "optimistic") {
		errs = append(errs, &SessionError{Setting: "tidb_txn_mode", Got: mode, Want: "pessimistic",
			Why: "READ COMMITTED, which finishing and enqueueing rely on, becomes REPEATABLE READ in optimistic mode"})
	}
	if wait := time.Duration(s.LockWaitTimeoutSeconds) * time.Second; wait >= st.writeTimeout {
		want := fmt.Sprintf("below WriteTimeout (%s): DSN innodb_lock_wait_timeout=%d", st.writeTimeout,
			max(int(st.writeTimeout/2/time.Second), 1))
		if st.writeTimeout <= time.Second {
			want = fmt.Sprintf("below WriteTimeout (%s), which must then be above 1s, the least lock wait TiDB allows", st.writeTimeout)
		}
		errs = append(errs, &SessionError{Setting: "innodb_lock_wait_timeout", Got: wait.String(), Want: want,
			Why: "a write given up at WriteTimeout closes its connection, and TiDB keeps its transaction's locks until the lock wait ends"})
	}
	if err := st.checkFoundRows(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (st *Store) checkFoundRows(ctx context.Context) error {
	tx, err := st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("workqueue: session check: begin: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // the check writes nothing that may stay
	q := st.InTx(tx)
	if err := q.EnsureScope(ctx, gen.EnsureScopeParams{ScopeID: sessionCheckScope, ActiveGeneration: 1}); err != nil {
		return fmt.Errorf("workqueue: session check: %w", err)
	}
	n, err := q.RewriteScopeUnchanged(ctx, sessionCheckScope)
	if err != nil {
		return fmt.Errorf("workqueue: session check: %w", err)
	}
	// The same row, asked for with a trailing space: found only when the
	// key column pads spaces. (A read of the columns every schema since the
	// first has, so that a pre-release table is named as such, not as a
	// missing column.)
	if _, err := q.LockScopeForEnqueue(ctx, sessionCheckScope+" "); err == nil {
		return ErrPreReleaseSchema
	} else if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("workqueue: session check: %w", err)
	}
	if n != 1 {
		return &SessionError{Setting: "clientFoundRows", Got: "false", Want: "true",
			Why: "compare-and-swap updates must count matched rows, not changed rows"}
	}
	return nil
}
