package workqueue

import (
	"slices"
	"testing"
)

// Every length from 1 to MaxCompleteBatch maps to one of nine, each a
// power of two at least as long, holding the ids in order and then only
// the last one again.
func TestPaddedIDsBoundTheStatementTexts(t *testing.T) {
	t.Parallel()
	lengths := map[int]bool{}
	for n := 1; n <= MaxCompleteBatch; n++ {
		ids := make([]int64, n)
		for i := range ids {
			ids[i] = int64(100 + i)
		}
		got := paddedIDs(ids)
		lengths[len(got)] = true
		if len(got) < n || len(got)&(len(got)-1) != 0 || len(got) >= 2*n {
			t.Fatalf("%d ids padded to %d", n, len(got))
		}
		if !slices.Equal(got[:n], ids) {
			t.Fatalf("%d ids: the ids changed: %v", n, got[:n])
		}
		for _, id := range got[n:] {
			if id != ids[n-1] {
				t.Fatalf("%d ids padded with %d, want the last id %d", n, id, ids[n-1])
			}
		}
	}
	if len(lengths) != 9 {
		t.Fatalf("%d distinct lengths, want 9 (1 to 256)", len(lengths))
	}
	if got := paddedIDs(nil); len(got) != 0 {
		t.Fatalf("no ids padded to %v", got)
	}
}
