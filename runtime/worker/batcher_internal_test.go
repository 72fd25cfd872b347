package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/laneq/laneq/runtime/workqueue"
)

// scriptedWrites records each batch the leaseBatcher writes; the first write
// blocks until release is closed, so completions arriving meanwhile queue
// up behind it. Work ids divisible by 7 fail with ErrLeaseLost.
type scriptedWrites struct {
	entered chan struct{}
	release chan struct{}

	mu      sync.Mutex
	batches [][]int64
}

func (s *scriptedWrites) write(_ context.Context, leases []workqueue.Lease) []error {
	s.mu.Lock()
	first := len(s.batches) == 0
	ids := make([]int64, len(leases))
	for i, l := range leases {
		ids[i] = l.WorkID
	}
	s.batches = append(s.batches, ids)
	s.mu.Unlock()
	if first {
		close(s.entered)
		<-s.release
	}
	errs := make([]error, len(leases))
	for i, l := range leases {
		if l.WorkID%7 == 0 {
			errs[i] = fmt.Errorf("%w: work %d", workqueue.ErrLeaseLost, l.WorkID)
		}
	}
	return errs
}

// While one write is in flight, completions queue; the next write takes
// them together (bounded by max), each caller gets its own item's result
// only after its batch was written, and no item is written twice.
func TestCompleterGroupCommitsWhileAWriteIsInFlight(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max, waiting int
		wantBatches  []int // sizes
	}{
		{max: 64, waiting: 20, wantBatches: []int{1, 20}},
		{max: 8, waiting: 20, wantBatches: []int{1, 8, 8, 4}},
	} {
		t.Run(fmt.Sprintf("max=%d", tc.max), func(t *testing.T) {
			s := &scriptedWrites{entered: make(chan struct{}), release: make(chan struct{})}
			c := newLeaseBatcher(s.write, tc.max, 1)
			results := make([]error, tc.waiting+1)
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); results[0] = c.do(context.Background(), workqueue.Lease{WorkID: 1000}) }()
			<-s.entered // the first write is in flight
			for i := 1; i <= tc.waiting; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					results[i] = c.do(context.Background(), workqueue.Lease{WorkID: int64(i)})
				}()
			}
			// Every waiter has queued once pending holds them all.
			for {
				c.mu.Lock()
				n := len(c.pending)
				c.mu.Unlock()
				if n == tc.waiting {
					break
				}
				runtime.Gosched()
			}
			close(s.release)
			wg.Wait()
			var sizes []int
			seen := map[int64]int{}
			for _, b := range s.batches {
				sizes = append(sizes, len(b))
				for _, id := range b {
					seen[id]++
				}
			}
			if !slices.Equal(sizes, tc.wantBatches) {
				t.Fatalf("batch sizes %v, want %v", sizes, tc.wantBatches)
			}
			if len(seen) != tc.waiting+1 {
				t.Fatalf("%d distinct items written, want %d", len(seen), tc.waiting+1)
			}
			for id, n := range seen {
				if n != 1 {
					t.Fatalf("work %d written %d times", id, n)
				}
			}
			for i, err := range results {
				id := int64(i)
				if i == 0 {
					id = 1000
				}
				if lost := errors.Is(err, workqueue.ErrLeaseLost); lost != (id%7 == 0) {
					t.Fatalf("work %d: %v", id, err)
				}
			}
			if c.writing != 0 || len(c.pending) != 0 {
				t.Fatalf("leaseBatcher left writing=%v with %d pending", c.writing, len(c.pending))
			}
		})
	}
}
