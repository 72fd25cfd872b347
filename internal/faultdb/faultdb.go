// Package faultdb opens a MySQL-protocol *sql.DB that injects faults at
// chosen statements: TiDB's deadlock (1213) or lock-wait timeout (1205)
// answered instead of running the statement, a connection dropped before it
// was sent, or a reply lost after the statement ran (it committed, the
// caller cannot know). Tests use it to prove what laneq does at each of
// those boundaries; a rule can also run a callback at a statement (cancel a
// context, move a fence) to make an interleaving happen exactly there. A
// Proxy in front of the server makes connections half-open (a statement
// sent, no reply and no error ever), for proving that a wait is bounded.
package faultdb

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/internal/sqlwrap"
)

// Fault is what happens at a matching statement.
type Fault int

const (
	// Pass lets the statement run (after the rule's Before callback).
	Pass Fault = iota
	// Deadlock answers with TiDB's error 1213 without running it.
	Deadlock
	// LockWaitTimeout answers with error 1205 without running it.
	LockWaitTimeout
	// DropBefore fails with a dropped connection before sending it.
	DropBefore
	// ReplyLost runs it, then fails with a dropped connection: the
	// statement took effect, the caller sees an error of unknown outcome.
	ReplyLost
)

func (f Fault) String() string {
	return [...]string{"pass", "deadlock", "lock wait timeout", "drop before", "reply lost"}[f]
}

// Rule faults statements named Statement (their sqlc name, or BEGIN,
// COMMIT, ROLLBACK): it lets Skip of them through, then applies Fault to
// the next Times (default 1).
type Rule struct {
	Statement string
	Skip      int
	Times     int
	Fault     Fault
	// Before, when set, runs at each faulted statement before anything else.
	Before func(ctx context.Context)
}

// Injector holds the rules of one DB; it is safe for concurrent use.
type Injector struct {
	mu    sync.Mutex
	rules []*rule
}

type rule struct {
	Rule
	seen, fired int
}

// Add installs a rule.
func (in *Injector) Add(r Rule) {
	if r.Times == 0 {
		r.Times = 1
	}
	in.mu.Lock()
	in.rules = append(in.rules, &rule{Rule: r})
	in.mu.Unlock()
}

// Fired reports how many statements the rules for statement faulted.
func (in *Injector) Fired(statement string) int {
	in.mu.Lock()
	defer in.mu.Unlock()
	n := 0
	for _, r := range in.rules {
		if r.Statement == statement {
			n += r.fired
		}
	}
	return n
}

// match returns the rule that faults this statement, if any.
func (in *Injector) match(query string) *rule {
	name := sqlwrap.Name(query)
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, r := range in.rules {
		if r.Statement != name {
			continue
		}
		r.seen++
		if r.seen > r.Skip && r.fired < r.Times {
			r.fired++
			return r
		}
	}
	return nil
}

// Before applies a matching rule's callback and pre-send faults
// (sqlwrap.Hook).
func (in *Injector) Before(ctx context.Context, query string, _ []driver.NamedValue) (any, error) {
	r := in.match(query)
	if r == nil {
		return nil, nil
	}
	if r.Before != nil {
		r.Before(ctx)
	}
	switch r.Fault {
	case Deadlock:
		return nil, &mysql.MySQLError{Number: 1213, Message: "Deadlock found when trying to get lock; try restarting transaction (injected)"}
	case LockWaitTimeout:
		return nil, &mysql.MySQLError{Number: 1205, Message: "Lock wait timeout exceeded; try restarting transaction (injected)"}
	case DropBefore:
		return nil, fmt.Errorf("faultdb: connection dropped before %s: %w", sqlwrap.Name(query), mysql.ErrInvalidConn)
	}
	return r.Fault, nil
}

// After loses the reply of a statement a ReplyLost rule matched
// (sqlwrap.Hook).
func (in *Injector) After(_ context.Context, _ string, note any, err error) error {
	if note == ReplyLost && err == nil {
		return mysql.ErrInvalidConn
	}
	return err
}

// Open returns a DB for dsn whose statements pass through a new Injector.
func Open(dsn string) (*sql.DB, *Injector, error) {
	in := &Injector{}
	db, err := sqlwrap.Open(dsn, in)
	if err != nil {
		return nil, nil, err
	}
	return db, in, nil
}
