package workqueue

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/store"
)

var (
	// ErrLeaseLost reports that a lease-fenced call changed nothing: the
	// lease token moved on (the item was reclaimed after the lease expired,
	// or already finished). The caller no longer owns the item and must not
	// act on it further.
	ErrLeaseLost = errors.New("workqueue: lease lost")
	// ErrUnknownScope reports a scope with no scope row (see EnsureScope).
	ErrUnknownScope = errors.New("workqueue: unknown scope")
	// ErrGenerationNotAhead reports a SetGeneration refused because the
	// scope's active generation is already past the one asked for (a late or
	// racing call): the fence only moves forward. Every such error is a
	// *GenerationError; RollbackGeneration moves the fence back on purpose.
	ErrGenerationNotAhead = errors.New("workqueue: generation not ahead of the active one")
	// ErrInvalid wraps every input validation failure.
	ErrInvalid = errors.New("workqueue: invalid input")
	// ErrConflict reports that a unique key was taken by a writer that did
	// not go through Enqueue's locks; the whole enqueue rolled back.
	ErrConflict = errors.New("workqueue: conflicting writer")
	// ErrLoadIncomplete reports a batch load (a large enqueue) that wrote
	// fewer rows than it sent, or wrote them with warnings: a duplicate key
	// from a writer that bypassed Enqueue's locks, or a value validation let
	// through and the load would have cut. The whole enqueue rolled back.
	ErrLoadIncomplete = errors.New("workqueue: batch load incomplete")
	// ErrNothingCommitted marks a Claim error after which the claim is known
	// to have changed nothing durable: it failed before any write, or TiDB
	// answered its write with an error (an autocommit statement that fails
	// is rolled back). A claim error without it may have committed.
	ErrNothingCommitted = errors.New("workqueue: nothing committed")
)

// GenerationError is SetGeneration's refusal to move a scope's generation
// fence back: Requested is below Active, the generation the scope row held
// when the refusal was read. It matches ErrGenerationNotAhead (errors.Is).
type GenerationError struct {
	Scope     string
	Active    int64
	Requested int64
}

func (e *GenerationError) Error() string {
	return fmt.Sprintf("workqueue: scope %q is at generation %d, refusing to move it back to %d (a late or racing set-generation; RollbackGeneration rolls back on purpose)",
		e.Scope, e.Active, e.Requested)
}

// Unwrap makes a GenerationError match ErrGenerationNotAhead.
func (e *GenerationError) Unwrap() error { return ErrGenerationNotAhead }

func nothingCommitted(err error) error { return fmt.Errorf("%w: %w", ErrNothingCommitted, err) }

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}

// MySQL and TiDB error numbers laneq reacts to.
const (
	errUnknown            = 1105
	errDuplicateEntry     = 1062
	errLockWaitTimeout    = 1205
	errDeadlock           = 1213
	errWriteConflictTiDB  = 8005
	errTxnRetryable       = 8022
	errInfoSchemaExpired  = 8027
	errInfoSchemaChanged  = 8028
	errPDServerTimeout    = 9001
	errTiKVServerTimeout  = 9002
	errTiKVServerBusy     = 9003
	errResolveLockTimeout = 9004
	errRegionUnavailable  = 9005
	errWriteConflict      = 9007
	errTiKVStoreLimit     = 9008
)

// serverRejected reports that TiDB answered the statement with an error.
// For an autocommit statement (and for a transaction laneq then rolls back)
// that means nothing committed: TiDB rolls a failed statement back, and when
// a commit's outcome is undetermined it closes the connection instead of
// answering, which surfaces as a connection error, not a server error.
func serverRejected(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me)
}

// transient reports errors worth running a statement or transaction again
// for: TiDB broke a deadlock or a lock wait timed out (1205, or 1105 "lock
// wait timeout" as the embedded unistore engine reports a pessimistic
// lock's wait running out), a write conflicted,
// the schema moved under the statement, the storage layer was busy or
// unavailable for a moment, or the connection failed. Every laneq write is
// safe to run again: each is idempotent or fenced by a compare-and-swap, and
// a write whose reply was lost is resolved by reading the row back.
func transient(err error) bool {
	switch store.Errno(err) {
	case errUnknown:
		return lockWaitTimedOut(err)
	case errLockWaitTimeout, errDeadlock, errWriteConflictTiDB, errTxnRetryable, errInfoSchemaExpired,
		errInfoSchemaChanged, errPDServerTimeout, errTiKVServerTimeout, errTiKVServerBusy,
		errResolveLockTimeout, errRegionUnavailable, errWriteConflict, errTiKVStoreLimit:
		return true
	}
	return connectionLost(err)
}

// lockWaitTimedOut reports a 1105 whose message is TiDB's lock wait
// timeout: the same event as 1205, under the generic error number.
func lockWaitTimedOut(err error) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && strings.Contains(strings.ToLower(me.Message), "lock wait timeout")
}

// connectionLost reports errors of the connection rather than the
// statement: the statement may or may not have reached the server, and a
// write may or may not have committed.
func connectionLost(err error) bool {
	if serverRejected(err) {
		return false
	}
	var netErr net.Error
	return errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.As(err, &netErr)
}
