package workqueue

import (
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// TestLockWaitTimeoutsAreTransient: a lock wait that ran out is worth
// running the transaction again for, whether TiDB numbers it 1205 or, as
// the embedded engine does, 1105 "lock wait timeout"; any other 1105 is
// not.
func TestLockWaitTimeoutsAreTransient(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded; try restarting transaction"}, true},
		{fmt.Errorf("lock scope: %w", &mysql.MySQLError{Number: 1105, Message: "lock wait timeout"}), true},
		{&mysql.MySQLError{Number: 1105, Message: "other error: something else"}, false},
		{&mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
