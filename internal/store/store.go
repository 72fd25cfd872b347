// Package store is laneq's one way onto the database: a pool whose sessions
// passed the session check, and the catalog's statements on it, run as
// server-side prepared statements (see internal/prepcache) unless the text
// protocol is asked for. workqueue.New, stats.New, inspect.New and
// ingress.New each build their statements through it, so each runs the
// session check once and prepares its statements the same way.
//
// It also holds the tiny conversions every runtime package needs between Go
// values and the catalog's parameters (NullString, Micros, FromMicros).
package store

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/prepcache"
)

// DefaultWriteTimeout is Options.WriteTimeout when zero (and
// workqueue.Config.WriteTimeout's default).
const DefaultWriteTimeout = 10 * time.Second

// checkTimeout bounds the session check New runs.
const checkTimeout = 10 * time.Second

// Options configures a Store. Zero fields take the documented defaults.
type Options struct {
	// TextProtocol sends every statement as text instead of preparing it
	// once per connection (workqueue.Config.TextProtocol).
	TextProtocol bool
	// WriteTimeout is the bound of one write's run; the session check
	// refuses a lock-wait timeout at or above it. Default
	// DefaultWriteTimeout.
	WriteTimeout time.Duration
}

// Store is a checked pool and the catalog's statements on it. It is safe
// for concurrent use.
type Store struct {
	db           *sql.DB
	prep         *prepcache.DB // db, running statements prepared; nil with TextProtocol
	q            *gen.Queries  // on prep, or on db with TextProtocol
	writeTimeout time.Duration
}

// New returns a Store on db after checking its sessions (see Check): the
// error is a *SessionError for each setting db's connections get wrong
// (joined), ErrPreReleaseSchema, or a failure to run the check.
func New(db *sql.DB, opts Options) (*Store, error) {
	if opts.WriteTimeout == 0 {
		opts.WriteTimeout = DefaultWriteTimeout
	}
	st := &Store{db: db, writeTimeout: opts.WriteTimeout}
	if !opts.TextProtocol {
		st.prep = prepcache.New(db, 0)
		st.q = gen.New(st.prep)
	} else {
		st.q = gen.New(db)
	}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := st.Check(ctx); err != nil {
		return nil, err
	}
	return st, nil
}

// DB is the pool.
func (st *Store) DB() *sql.DB { return st.db }

// Queries are the catalog's statements on the pool.
func (st *Store) Queries() *gen.Queries { return st.q }

// InTx returns the catalog's statements inside tx (a transaction of the
// Store's pool), prepared like Queries.
func (st *Store) InTx(tx *sql.Tx) *gen.Queries {
	if st.prep != nil {
		return gen.New(st.prep.Tx(tx))
	}
	return st.q.WithTx(tx)
}

// WriteTimeout is the bound of one write's run the session check held the
// lock-wait timeout against.
func (st *Store) WriteTimeout() time.Duration { return st.writeTimeout }

// NullString is s as a nullable column: NULL when s is empty.
func NullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Micros is d in whole microseconds, the unit of the catalog's *_micros
// parameters.
func Micros(d time.Duration) int64 { return d.Microseconds() }

// FromMicros is a count of microseconds (a *_micros column) as a Duration.
func FromMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

// Errno is the MySQL error number of err (a *mysql.MySQLError anywhere in
// its chain), or 0 when TiDB did not answer with an error.
func Errno(err error) uint16 {
	var me *mysql.MySQLError
	if errors.As(err, &me) {
		return me.Number
	}
	return 0
}
