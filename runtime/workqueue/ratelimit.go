package workqueue

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/laneq/laneq/gen"
)

// RateShare is what TakeRateShare granted.
type RateShare struct {
	Granted int       // starts granted to the caller in the window (0 when it was spent)
	Used    int       // the window's starts granted to everyone, this share included
	DBNow   time.Time // the database's clock during the grant
	// NotCurrent: by the database's clock the window is not the current
	// one (the caller's estimate of that clock is off); nothing was
	// granted.
	NotCurrent bool
}

// TakeRateShare takes up to want starts of window windowIndex (windows of
// windowMicros since the epoch) of the rate limit name in scope, whose
// budget is quota starts: one READ COMMITTED transaction that creates the
// window's row if needed, locks it, and adds the share
// (queries/ratelimit.sql). Takers of one window serialize on its row; the
// sum granted never passes quota. A window that is not the current one by
// the database's clock, read under the lock, grants nothing (NotCurrent):
// starts are only ever granted in the window they fall in.
func (qu *Queue) TakeRateShare(ctx context.Context, scope, name string, windowIndex, windowMicros int64, want, quota int) (RateShare, error) {
	if want < 1 || quota < 1 || windowMicros < 1 {
		return RateShare{}, invalidf("rate share: want %d, quota %d and window %dus must be positive", want, quota, windowMicros)
	}
	var out RateShare
	key := gen.LockRateWindowParams{ScopeID: scope, LimitName: name, WindowIndex: windowIndex}
	ends := sql.NullInt64{Int64: (windowIndex + 1) * windowMicros, Valid: true}
	err := qu.inTx(ctx, fmt.Sprintf("take a share of rate limit %q", name), readCommitted, func(ctx context.Context, q *gen.Queries) error {
		out = RateShare{}
		if err := q.EnsureRateWindow(ctx, gen.EnsureRateWindowParams{ScopeID: scope, LimitName: name, WindowIndex: windowIndex, EndsMicros: ends}); err != nil {
			return fmt.Errorf("ensure window: %w", err)
		}
		row, err := q.LockRateWindow(ctx, key)
		if err != nil {
			return fmt.Errorf("lock window: %w", err)
		}
		out.DBNow = time.UnixMicro(row.NowMicros).UTC()
		if floorDiv(row.NowMicros, windowMicros) != windowIndex {
			out.NotCurrent = true
			return nil
		}
		out.Granted = min(want, quota-int(row.Granted))
		out.Used = int(row.Granted)
		if out.Granted <= 0 {
			out.Granted = 0
			return nil
		}
		out.Used += out.Granted
		_, err = q.GrantRateShare(ctx, gen.GrantRateShareParams{Share: int32(out.Granted), ScopeID: scope, LimitName: name, WindowIndex: windowIndex})
		return err
	})
	return out, err
}

// PruneEndedRateWindows deletes up to PruneRateWindowsBatch of scope's
// rate-limit windows, of every limit and key, that ended more than kept
// ago by the database's clock, and returns how many it deleted: a full
// batch means more may be left.
func (qu *Queue) PruneEndedRateWindows(ctx context.Context, scope string, kept time.Duration) (int64, error) {
	n, err := qu.q.PruneEndedRateWindows(ctx, gen.PruneEndedRateWindowsParams{ScopeID: scope, KeptMicros: kept.Microseconds()})
	if err != nil {
		return 0, fmt.Errorf("workqueue: prune ended rate-limit windows of scope %q: %w", scope, err)
	}
	return n, nil
}

// PruneRateWindowsBatch is the most rows one PruneEndedRateWindows deletes
// (the statement's LIMIT).
const PruneRateWindowsBatch = 1000

// Defer gives a claimed item back unrun, due after delay by the database's
// clock, without counting the attempt (a rate limit's budget ran out
// between its claim and its start). A cancelled item is refused with a
// *CancelRequestedError, as by Release.
func (qu *Queue) Defer(ctx context.Context, l Lease, delay time.Duration) error {
	began := time.Now()
	err := qu.releaseFor(ctx, l, delay)
	if err == nil {
		qu.announceLease(ctx, l, true, began) // due later: others arm their due timers
	}
	return err
}

// floorDiv is a / b rounded down (b > 0), also for a < 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
