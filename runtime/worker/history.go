package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// history counts, in memory, what this worker did per minute and work
// kind, and writes it at maintenance (see HistoryConfig). Recording is a
// map update under a mutex on the claim and finish paths: no statement.
type history struct {
	off       bool
	retention time.Duration
	writer    string // this process's rows: owner and a random tag

	mu        sync.Mutex
	pending   map[historyKey]*workqueue.HistorySample
	lastPrune time.Time
}

type historyKey struct {
	minute          time.Time
	class, workType string
}

// historyPendingMinutes bounds what a worker keeps unwritten while the
// database refuses its writes: older minutes are dropped (and logged).
const historyPendingMinutes = 60

// historyFlushTimeout bounds the flush a stopping worker makes.
const historyFlushTimeout = 5 * time.Second

// historyPruneEvery and historyPruneBatch bound a writer's deletes.
const (
	historyPruneEvery  = time.Hour
	historyPruneBatch  = 1000
	historyPruneRounds = 20
)

func newHistory(cfg HistoryConfig, owner string) (*history, error) {
	if cfg.Retention == 0 {
		cfg.Retention = DefaultHistoryRetention
	}
	if cfg.Retention < time.Hour {
		return nil, &ConfigError{"History.Retention", cfg.Retention.String(), "want at least 1h"}
	}
	tag := make([]byte, 6)
	_, _ = rand.Read(tag) // crypto/rand.Read never fails (Go 1.24+)
	name := []byte(owner)
	if len(name) > workqueue.MaxHistoryWriter-len(tag)*2-1 {
		name = name[:workqueue.MaxHistoryWriter-len(tag)*2-1]
	}
	for i, b := range name { // the column is ASCII
		if b < 0x21 || b > 0x7e {
			name[i] = '_'
		}
	}
	return &history{off: cfg.Off, retention: cfg.Retention, writer: string(name) + "#" + hex.EncodeToString(tag),
		pending: map[historyKey]*workqueue.HistorySample{}}, nil
}

func (h *history) sample(now time.Time, class, workType string) *workqueue.HistorySample {
	k := historyKey{now.UTC().Truncate(time.Minute), class, workType}
	s := h.pending[k]
	if s == nil {
		s = &workqueue.HistorySample{Minute: k.minute, QueueClass: class, WorkType: workType}
		h.pending[k] = s
	}
	return s
}

// claimed records how long the claimed items had been due.
func (h *history) claimed(now time.Time, items []workqueue.Claimed) {
	if h.off || len(items) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range items {
		s := h.sample(now, c.QueueClass, c.WorkType)
		s.MaxDue = max(s.MaxDue, c.DueFor)
	}
}

// finished counts a durable outcome.
func (h *history) finished(now time.Time, c workqueue.Claimed, outcome Outcome) {
	if h.off {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch outcome {
	case OutcomeCompleted, OutcomeSkipped, OutcomeCancelled: // ended without failing, as the scope's terminal counts see them
		h.sample(now, c.QueueClass, c.WorkType).Completed++
	case OutcomeRetried:
		h.sample(now, c.QueueClass, c.WorkType).Failed++
	case OutcomeDead:
		h.sample(now, c.QueueClass, c.WorkType).Dead++
	}
}

// take removes and returns the samples of minutes before until (all of
// them when until is zero), oldest first, dropping those older than the
// pending bound.
func (h *history) take(until time.Time) (out []workqueue.HistorySample, dropped int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	oldest := until.Add(-historyPendingMinutes * time.Minute)
	for k, s := range h.pending {
		if !until.IsZero() && !k.minute.Before(until.UTC().Truncate(time.Minute)) {
			continue
		}
		delete(h.pending, k)
		if !until.IsZero() && k.minute.Before(oldest) {
			dropped++
			continue
		}
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Minute.Before(out[j].Minute) })
	return out, dropped
}

// putBack returns samples a failed write did not store, to be written
// with the next flush.
func (h *history) putBack(samples []workqueue.HistorySample) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range samples {
		p := h.sample(s.Minute, s.QueueClass, s.WorkType)
		p.Completed += s.Completed
		p.Failed += s.Failed
		p.Dead += s.Dead
		p.MaxDue = max(p.MaxDue, s.MaxDue)
	}
}

// flush writes the minutes that ended before now (every pending minute
// when final), then prunes old rows at most once an hour. It costs nothing
// when nothing is pending. A failed write keeps the samples for the next
// flush.
func (w *Worker) flushHistory(ctx context.Context, final bool) error {
	h := w.history
	if h.off {
		return nil
	}
	now := w.clock.Now()
	until := now
	if final {
		until = time.Time{}
	}
	samples, dropped := h.take(until)
	if dropped > 0 {
		w.log.Warn("history minutes dropped: the database refused their writes for an hour", "minutes", dropped)
	}
	if len(samples) == 0 {
		return nil
	}
	if written, err := w.q.RecordHistory(ctx, w.cfg.Scope, h.writer, samples); err != nil {
		h.putBack(samples[written:]) // the upserts add: only what was not written goes back
		return fmt.Errorf("write history: %w", err)
	}
	h.mu.Lock()
	prune := now.Sub(h.lastPrune) >= historyPruneEvery
	if prune {
		h.lastPrune = now
	}
	h.mu.Unlock()
	// Batches until the old rows are gone (a bounded number a flush): an
	// hour of a busy scope's writers can leave more than one batch.
	for round := 0; prune && round < historyPruneRounds; round++ {
		n, err := w.q.PruneHistory(ctx, w.cfg.Scope, now.Add(-h.retention), historyPruneBatch)
		if err != nil {
			return fmt.Errorf("prune history: %w", err)
		}
		if n < historyPruneBatch {
			break
		}
	}
	return nil
}
