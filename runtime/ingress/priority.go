package ingress

import (
	"context"
	"sync"
	"time"
)

// priority orders a router's class loops: Classes[0] first. A loop holds
// back its materializing transaction while a loop of an earlier class is
// in a turn (it has claimed receipts and not yet finished them), so an
// earlier class's transaction waits for at most the one later-class
// transaction already in flight, never for a stream of them. The hold is
// bounded (maxHold): a steady stream of earlier-class work slows later
// classes, it never stops them.
type priority struct {
	mu      sync.Mutex
	busy    []int         // per class rank: turns in progress
	changed chan struct{} // closed and replaced on every change
	maxHold time.Duration
}

func newPriority(classes int, maxHold time.Duration) *priority {
	return &priority{busy: make([]int, classes), changed: make(chan struct{}), maxHold: maxHold}
}

// enter and leave bracket a turn of the class of rank.
func (p *priority) enter(rank int) { p.add(rank, 1) }
func (p *priority) leave(rank int) { p.add(rank, -1) }

func (p *priority) add(rank, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.busy[rank] += d
	close(p.changed)
	p.changed = make(chan struct{})
}

// wait returns once no class before rank is in a turn, after maxHold, or
// when ctx ends.
func (p *priority) wait(ctx context.Context, rank int) {
	var deadline <-chan time.Time
	for {
		p.mu.Lock()
		ahead := false
		for _, n := range p.busy[:rank] {
			ahead = ahead || n > 0
		}
		changed := p.changed
		p.mu.Unlock()
		if !ahead {
			return
		}
		if deadline == nil {
			t := time.NewTimer(p.maxHold)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-deadline:
			return
		case <-ctx.Done():
			return
		}
	}
}
