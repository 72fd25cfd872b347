package workqueue

import (
	"cmp"
	"math/rand/v2"
	"slices"
)

// Claimers of one scope in several processes read the same due rows in the
// same order, so when their turns overlap they CAS the same candidates and
// all but one come back with nothing: a wasted scan and CAS each, and the
// loser's CAS waits on the winner's locks. A claimer that loses candidates
// therefore spreads out: it scans `spread` blocks of the rows it wants and
// claims its own block first. A claimer that never lost claims the first
// block (plain claim order); the first loss moves a claimer to the second
// block, so two claimers whose turns run in lockstep take disjoint rows from
// then on (each block is a run of rows in claim order, and rows claimed are
// gone from the next scan). Losses that continue pick another block, and
// then widen the spread, up to maxSpread blocks; calmTurnsToNarrow turns in
// a row without a loss halve it again. The rest of the window fills a claim
// whose block came up short, so a claim comes back short only when the
// window held fewer due rows than it wanted: that is what tells the caller
// nothing more is due. Ownership is still decided only by the row CAS, and
// the cursor passes only a class's leading candidates that a claim took,
// so rows left to other blocks are read again, never skipped.
const (
	maxSpread         = 4
	calmTurnsToNarrow = 64
	lossesToWiden     = 3 // consecutive lossy claims before the spread doubles
)

// partition is the block of a claim window a claimer takes first.
type partition struct{ spread, block int }

// ContentionStats is what a Claimer saw of other claimers.
type ContentionStats struct {
	// LostCAS counts fresh candidates another claimer took first.
	LostCAS uint64
	// Spread is how many blocks of wanted rows the next fresh claim reads
	// (1: plain claim order).
	Spread int
}

// Contention reports the claimer's losses so far and its current spread.
func (c *Claimer) Contention() ContentionStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return ContentionStats{LostCAS: c.lost, Spread: max(c.spread, 1)}
}

func (c *Claimer) partition() partition {
	c.mu.Lock()
	defer c.mu.Unlock()
	return partition{spread: max(c.spread, 1), block: c.block}
}

// noteLosses moves the claimer's block after a fresh claim lost lost
// candidates (see the comment on maxSpread).
func (c *Claimer) noteLosses(lost int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lost == 0 {
		c.lossRun = 0
		if c.spread > 1 {
			if c.calm++; c.calm >= calmTurnsToNarrow {
				c.spread, c.calm = c.spread/2, 0
				c.block %= c.spread
			}
		}
		return
	}
	c.lost += uint64(lost)
	c.calm = 0
	c.lossRun++
	switch {
	case c.spread <= 1:
		c.spread, c.block = 2, 1 // the claimer that won keeps the first block
	case c.lossRun >= lossesToWiden && c.spread < maxSpread:
		c.spread, c.lossRun = c.spread*2, 0
		c.block = rand.IntN(c.spread)
	default:
		c.block = rand.IntN(c.spread)
	}
}

// choose keeps at most want of cands (in claim order): the claimer's block
// first, then the rows after it, then the latest rows before it (the first
// block is the one a claimer that never lost takes), back in claim order.
func choose(cands []candidate, want int, part partition) []candidate {
	if part.spread <= 1 || len(cands) <= want {
		return cands[:min(len(cands), want)]
	}
	lo := min(part.block*want, len(cands))
	hi := min(lo+want, len(cands))
	out := slices.Clone(cands[lo:hi])
	for i := hi; i < len(cands) && len(out) < want; i++ {
		out = append(out, cands[i])
	}
	for i := lo - 1; i >= 0 && len(out) < want; i-- {
		out = append(out, cands[i])
	}
	slices.SortFunc(out, claimOrder)
	return out
}

// claimOrder orders candidates as ClaimCandidates does.
func claimOrder(a, b candidate) int {
	return cmp.Or(a.row.RunAfter.Compare(b.row.RunAfter), cmp.Compare(a.row.LaneOrdinal, b.row.LaneOrdinal), cmp.Compare(a.row.WorkID, b.row.WorkID))
}
