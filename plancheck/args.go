package plancheck

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Clock is what time placeholders resolve against on one database: its
// NOW(6) and, for a fixture plancheck seeded, the base of its future rows.
type Clock struct {
	Now        time.Time
	FutureBase time.Time // zero for a database plancheck did not seed
}

// ReadClock reads db's clock (and fixture record, if any).
func ReadClock(ctx context.Context, db *sql.DB) (Clock, error) {
	var c Clock
	if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&c.Now); err != nil {
		return c, fmt.Errorf("plancheck: read the database clock: %w", err)
	}
	err := db.QueryRowContext(ctx, seedStatements()["FutureBase"]).Scan(&c.FutureBase)
	if err != nil && !errors.Is(err, sql.ErrNoRows) && !strings.Contains(err.Error(), "doesn't exist") {
		return c, fmt.Errorf("plancheck: read the fixture record: %w", err)
	}
	return c, nil
}

// ResolveArgs turns a case's arguments into values for one database.
// Strings name placeholders, inside lists too:
//
//   - "$name": a fixture value (see Values), or an override in values;
//   - "@now", "@now-2s": the database's NOW(6), plus or minus a duration;
//   - "@past+30m": the fixture's due backlog (the year 2000) plus a duration;
//   - "@future+2m": the fixture's future rows' base plus a duration;
//   - "@in:future+2m", "@in:now+1s": the microseconds from the database's
//     now to that time (for statements that take an offset from NOW(6)).
//
// JSON numbers become int64 (the catalog's numeric parameters are integers).
func ResolveArgs(args, values map[string]any, clock Clock) (map[string]any, error) {
	out := make(map[string]any, len(args))
	var bad error
	var one func(v any) any
	one = func(v any) any {
		switch x := v.(type) {
		case string:
			if strings.HasPrefix(x, "$") {
				if val, ok := values[x[1:]]; ok {
					return val
				}
				bad = fmt.Errorf("argument %q: no fixture value %s", x, x[1:])
				return x
			}
			if strings.HasPrefix(x, "@") {
				val, err := clock.resolve(x)
				if err != nil {
					bad = err
					return x
				}
				return val
			}
			return x
		case []any:
			l := make([]any, len(x))
			for i := range x {
				l[i] = one(x[i])
			}
			return l
		case float64:
			return int64(x)
		}
		return v
	}
	for k, v := range args {
		out[k] = one(v)
	}
	return out, bad
}

func (c Clock) resolve(spec string) (any, error) {
	rest, micros := strings.CutPrefix(spec[1:], "in:")
	anchor, offset := rest, ""
	if i := strings.IndexAny(rest, "+-"); i >= 0 {
		anchor, offset = rest[:i], rest[i:]
	}
	var base time.Time
	switch anchor {
	case "now":
		base = c.Now
	case "past":
		base = pastBase
	case "future":
		// A database plancheck did not seed has no record: its future starts
		// where a fresh fixture's would.
		base = c.FutureBase
		if base.IsZero() {
			base = c.Now.Add(futureLead)
		}
	default:
		return nil, fmt.Errorf("argument %q: want @now, @past or @future, optionally ±duration, or @in: before one of them", spec)
	}
	if offset != "" {
		d, err := time.ParseDuration(offset)
		if err != nil {
			return nil, fmt.Errorf("argument %q: %w", spec, err)
		}
		base = base.Add(d)
	}
	if micros {
		return base.Sub(c.Now).Microseconds(), nil
	}
	return base, nil
}

// resolveOn resolves a case's arguments for one database.
func resolveOn(ctx context.Context, db *sql.DB, args, values map[string]any) (map[string]any, error) {
	clock, err := ReadClock(ctx, db)
	if err != nil {
		return nil, err
	}
	return ResolveArgs(args, values, clock)
}
