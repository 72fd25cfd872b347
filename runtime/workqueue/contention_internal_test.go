package workqueue

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func window(n int) []candidate {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	out := make([]candidate, n)
	for i := range out {
		out[i] = candidate{row: scanned{WorkID: int64(100 + i), RunAfter: base.Add(time.Duration(i) * time.Millisecond), LaneOrdinal: int64(i)}}
	}
	return out
}

func workIDs(cs []candidate) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.row.WorkID
	}
	return out
}

// TestChooseTakesItsBlockFirst: a spread claim takes its own block of the
// window, fills a short block from the rows after it, then from the latest
// rows before it (the first block is the uncontended claimer's), and keeps
// claim order; an unspread claim is the window's first rows.
func TestChooseTakesItsBlockFirst(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		window int
		want   int
		part   partition
		ids    []int64
	}{
		{"plain order", 10, 3, partition{spread: 1}, []int64{100, 101, 102}},
		{"second block", 10, 3, partition{spread: 2, block: 1}, []int64{103, 104, 105}},
		{"first block", 10, 3, partition{spread: 2, block: 0}, []int64{100, 101, 102}},
		{"last of four", 12, 3, partition{spread: 4, block: 3}, []int64{109, 110, 111}},
		{"short block fills from the latest before it", 4, 3, partition{spread: 2, block: 1}, []int64{101, 102, 103}},
		{"window past the blocks", 3, 3, partition{spread: 2, block: 1}, []int64{100, 101, 102}},
		{"block beyond a short window", 5, 2, partition{spread: 4, block: 3}, []int64{103, 104}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := workIDs(choose(window(tc.window), tc.want, tc.part))
			if diff := cmp.Diff(tc.ids, got); diff != "" {
				t.Fatalf("chosen ids (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNoteLossesSpreadsAndNarrows walks the spread through its rules: the
// first loss takes the second of two blocks, lossesToWiden lossy claims in a
// row double the spread (never past maxSpread), and calmTurnsToNarrow claims
// without a loss halve it.
func TestNoteLossesSpreadsAndNarrows(t *testing.T) {
	t.Parallel()
	c := &Claimer{}
	if p := c.partition(); p != (partition{spread: 1}) {
		t.Fatalf("a new claimer: %+v, want plain order", p)
	}
	c.noteLosses(0)
	if p := c.partition(); p.spread != 1 {
		t.Fatalf("after a claim without loss: spread %d, want 1", p.spread)
	}
	c.noteLosses(5)
	if p := c.partition(); p != (partition{spread: 2, block: 1}) {
		t.Fatalf("after the first loss: %+v, want the second of two blocks", p)
	}
	for range lossesToWiden {
		c.noteLosses(1)
	}
	if p := c.partition(); p.spread != 4 || p.block < 0 || p.block >= 4 {
		t.Fatalf("after %d more lossy claims: %+v, want a block of four", lossesToWiden, p)
	}
	for range 4 * lossesToWiden {
		c.noteLosses(1)
	}
	if p := c.partition(); p.spread != maxSpread {
		t.Fatalf("spread %d after many losses, want the cap %d", p.spread, maxSpread)
	}
	for range calmTurnsToNarrow - 1 {
		c.noteLosses(0)
	}
	if p := c.partition(); p.spread != maxSpread {
		t.Fatalf("spread %d one calm claim short of narrowing, want %d", p.spread, maxSpread)
	}
	c.noteLosses(0)
	if p := c.partition(); p.spread != maxSpread/2 || p.block >= maxSpread/2 {
		t.Fatalf("after %d calm claims: %+v, want spread %d", calmTurnsToNarrow, p, maxSpread/2)
	}
	if got := c.Contention().LostCAS; got != 5+uint64(5*lossesToWiden) {
		t.Fatalf("LostCAS %d, want %d", got, 5+5*lossesToWiden)
	}
}
