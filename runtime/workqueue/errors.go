package workqueue

import (
	"errors"
	"fmt"

	"github.com/go-sql-driver/mysql"
)

var (
	// ErrLeaseLost reports that a lease-fenced call changed nothing: the
	// lease token moved on (the item was reclaimed after the lease expired,
	// or already finished). The caller no longer owns the item and must not
	// act on it further.
	ErrLeaseLost = errors.New("workqueue: lease lost")
	// ErrUnknownScope reports a scope with no scope row (see EnsureScope).
	ErrUnknownScope = errors.New("workqueue: unknown scope")
	// ErrInvalid wraps every input validation failure.
	ErrInvalid = errors.New("workqueue: invalid input")
	// ErrConflict reports that a unique key was taken by a writer that did
	// not go through Enqueue's locks; the whole enqueue rolled back.
	ErrConflict = errors.New("workqueue: conflicting writer")
	// ErrNothingCommitted marks a Claim error raised before the claim wrote
	// anything (reading the scope or scanning candidates failed): the
	// caller knows ownership did not change. A claim error without it may
	// have committed (a CAS whose reply was lost).
	ErrNothingCommitted = errors.New("workqueue: nothing committed")
)

func nothingCommitted(err error) error { return fmt.Errorf("%w: %w", ErrNothingCommitted, err) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// MySQL error numbers laneq reacts to.
const (
	errDuplicateEntry  = 1062
	errLockWaitTimeout = 1205
	errDeadlock        = 1213
)

func mysqlErrno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}

// retryableTx reports errors after which a whole transaction may be run again:
// TiDB aborted it to break a deadlock, or a lock wait timed out. Every
// transaction in this package is safe to re-run (idempotent or CAS-fenced).
func retryableTx(err error) bool {
	switch mysqlErrno(err) {
	case errDeadlock, errLockWaitTimeout:
		return true
	}
	return false
}
