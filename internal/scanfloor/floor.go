// Package scanfloor is the one scan floor of laneq's due-ordered claim
// scans: the worker's Claimer keeps one per queue class over
// work_item.run_after (and one over expired leases), the receipt router
// one per route class over receipt.next_attempt_at.
//
// A floor works because every transition into a claim range places its row
// at or after the database's current time: a row that becomes claimable
// sorts after everything a scanner already consumed, so the next scan can
// start past the MVCC delete markers of earlier claims. Only a transition
// still committing when a scan ran (or a TiDB server whose clock runs
// behind) can land before the floor, and by no more than a straggler
// window: scans start that far behind it. Later stragglers are found by
// scanning from the front again (Reset), which each user does on its probe
// or backstop. A floor only delays a row, never duplicates or reorders
// one: ownership is still the row CAS.
package scanfloor

import "time"

// Front is before every due time laneq writes: where a scan without a
// floor starts.
var Front = time.Unix(0, 0).UTC()

// DefaultStragglerWindow is how far behind its floor a scan starts unless
// configured otherwise: a transition whose statement began before the
// consumed row's but committed after it is still found.
const DefaultStragglerWindow = 2 * time.Second

// Floor is where a range was consumed through. The zero Floor has none:
// its scans start at Front.
type Floor struct {
	known bool
	at    time.Time // due time the range was consumed through
	// seen is the database time of the scan that set the floor, when the
	// user records it: every row that committed before it and sorts
	// before the floor was consumed.
	seen time.Time
}

// Known says whether the floor was set since it was made or Reset.
func (f Floor) Known() bool { return f.known }

// At is the due time the range was consumed through (zero when unknown).
func (f Floor) At() time.Time { return f.at }

// Start is where the next scan begins: Front without a floor; else
// straggler before the floor, or, when the scan that set it was recorded,
// straggler before that scan's time if that is still before the floor.
// A row that committed after that scan set its due time no more than
// straggler before the scan, so a range consumed behind the scan's time (a
// backlog) is read from the floor itself, not over the delete markers that
// the last straggler window of its claims left.
func (f Floor) Start(straggler time.Duration) time.Time {
	switch {
	case !f.known:
		return Front
	case f.seen.IsZero():
		return f.at.Add(-straggler)
	default:
		return earliest(f.at, f.seen.Add(-straggler))
	}
}

// Set places the floor at at, consumed by a scan at database time seen
// (zero when the user does not record it). It may move the floor back: to
// the first candidate a scan left behind.
func (f *Floor) Set(at, seen time.Time) { f.known, f.at, f.seen = true, at, seen }

// Advance places the floor at at unless it already lies past it: for
// users whose consumed due times only ever move forward.
func (f *Floor) Advance(at time.Time) {
	if !f.known || at.After(f.at) {
		f.Set(at, time.Time{})
	}
}

// Lower moves a known floor back to t when t is before it: a writer known
// to have placed rows at t or later committed after the floor was set.
func (f *Floor) Lower(t time.Time) {
	if f.known && t.Before(f.at) {
		f.at = t
	}
}

// Reset drops the floor: the next scan starts at Front.
func (f *Floor) Reset() { *f = Floor{} }

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
