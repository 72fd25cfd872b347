package bench

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

// workload is a run's events, in enqueue order, and what the verifier
// expects of them.
type workload struct {
	scopes []string
	events []scopedEvent
	// perEvent counts events whose work is one item each (deliver and
	// consume); projection events collapse into generations.
	perEvent   int
	projection int // projection events
	consumers  int // dependency consumers
	sameTarget int // events of same-target bursts
	multiTgt   int // events of multi-target bursts
	free       int // events in no lane (consumers aside)
	limited    int // of those, events of the rate-limited work type
	stubborn   int // events whose first attempt ignores its context
	// stubbornLaned counts the stubborn events in a lane: heads their
	// followers must wait for.
	stubbornLaned int
	// periodic and rateLimit are the spec's: what the verifier checks of
	// ticks and of the limited work type.
	periodic  time.Duration
	rateLimit int
}

// Shape is what a workload holds, for the report.
type Shape struct {
	Events      int `json:"events"`
	Free        int `json:"free"`
	Projection  int `json:"projection"`
	Consumers   int `json:"dependency_consumers"`
	SameTarget  int `json:"same_target_burst"`
	MultiTarget int `json:"multi_target_burst"`
	Limited     int `json:"rate_limited"`
	Stubborn    int `json:"stubborn"`
	// StubbornLaned is the stubborn events in a lane (the rest are in none).
	StubbornLaned int `json:"stubborn_laned"`
}

func (w workload) shape() Shape {
	return Shape{Events: len(w.events), Free: w.free, Projection: w.projection, Consumers: w.consumers,
		SameTarget: w.sameTarget, MultiTarget: w.multiTgt, Limited: w.limited, Stubborn: w.stubborn, StubbornLaned: w.stubbornLaned}
}

type scopedEvent struct {
	scope string
	event workqueue.Event
}

type eventKind int

const (
	kindFree eventKind = iota
	kindLaned
	kindProjection
	kindConsumer
)

// spread scatters lane numbers, so that which lanes are projection lanes
// does not line up with which events are free or consumers (both chosen
// by event number).
func spread(n int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "lane/%d", n)
	return h.Sum64()
}

// stubbornEvent says whether event i is one of the one in every that
// ignore their context: chosen by a hash of the event's number, like
// spread, so stubborn events fall in lanes and in none whatever FreeEvery
// is.
func stubbornEvent(i, every int) bool {
	if every <= 0 {
		return false
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "stubborn/%d", i)
	return h.Sum64()%uint64(every) == 0
}

// scopeName is the bench's name of scope i.
func scopeName(i int) string { return fmt.Sprintf("bench-%d", i) }

// buildWorkload lays out s.Items events deterministically. laneless strips
// what the naive claim has no notion of: lanes, projections, dependencies.
func buildWorkload(s Spec, laneless bool) workload {
	w := workload{periodic: s.Periodic, rateLimit: s.RateLimit}
	for i := range s.Scopes {
		w.scopes = append(w.scopes, scopeName(i))
	}
	kinds := make([]eventKind, s.Items)
	for i := range kinds {
		lane := i % s.SourceLanes
		switch {
		case laneless:
			kinds[i] = kindFree
		case s.DependencyEvery > 0 && i%s.DependencyEvery == s.DependencyEvery-1:
			kinds[i] = kindConsumer
		case s.FreeEvery > 0 && i%s.FreeEvery == 0:
			kinds[i] = kindFree
		case s.ProjectionEvery > 0 && spread(lane)%uint64(s.ProjectionEvery) == 0:
			kinds[i] = kindProjection
		default:
			kinds[i] = kindLaned
		}
	}
	stubborn := make([]bool, s.Items)
	for i := range stubborn {
		stubborn[i] = !laneless && stubbornEvent(i, s.StubbornEvery)
	}
	// Each consumer's producer is the next per-event deliver event of its
	// scope (or the previous one at the end): usually later, so consumers
	// really wait; sometimes earlier, so some find their key satisfied.
	// Never a stubborn event: the bench cancels those, and a cancelled
	// producer would leave its consumer waiting for ever.
	satisfies := map[int]string{}
	for i, k := range kinds {
		if k != kindConsumer {
			continue
		}
		producer := -1
		for _, step := range []int{s.Scopes, -s.Scopes} {
			for j := i + step; j >= 0 && j < len(kinds); j += step {
				if (kinds[j] == kindFree || kinds[j] == kindLaned) && satisfies[j] == "" && !stubborn[j] {
					producer = j
					break
				}
			}
			if producer >= 0 {
				break
			}
		}
		if producer < 0 {
			kinds[i] = kindFree // nobody could satisfy it: plain work
			continue
		}
		satisfies[producer] = fmt.Sprintf("dep-%d", i)
	}
	for i, k := range kinds {
		ev := workqueue.Event{
			IdempotencyKey: fmt.Sprintf("ev-%d", i),
			RouteID:        "bench", RouteVersion: 1, EventKind: "bench",
			SourceKind: "bench", SourceID: fmt.Sprintf("src-%d", i%s.SourceLanes),
		}
		p := payload{Satisfies: satisfies[i], Stubborn: stubborn[i]}
		ev.Payload, _ = json.Marshal(p)
		work := workqueue.Work{WorkType: typeDeliver, QueueClass: s.Classes[i%len(s.Classes)]}
		switch k {
		case kindFree:
			if s.RateLimit > 0 && s.LimitedEvery > 0 && w.free%s.LimitedEvery == 0 {
				work.WorkType = typeLimited
				if s.RateKeys > 0 {
					work.RateKey = fmt.Sprintf("key-%d", w.limited%s.RateKeys)
				}
				w.limited++
			}
			w.free++
		case kindConsumer:
			key := fmt.Sprintf("dep-%d", i)
			work.WorkType = typeConsume
			work.WaitFor = &workqueue.Dependency{WakeKey: key, Keys: []string{key}}
			w.consumers++
		case kindProjection:
			work.WorkType = typeProject
			work.SourceLane = fmt.Sprintf("src-%d", i%s.SourceLanes)
			work.Projection = true
			w.projection++
		case kindLaned:
			work.SourceLane = fmt.Sprintf("src-%d", i%s.SourceLanes)
			burst := i / s.BurstSize
			switch burst % 10 {
			case 0: // same-target burst: every event of the burst to one target
				work.TargetLane = fmt.Sprintf("tgt-%d", (burst/10)%s.TargetLanes)
				w.sameTarget++
			case 5: // multi-target burst: the burst's events over every target
				work.TargetLane = fmt.Sprintf("tgt-%d", i%s.TargetLanes)
				w.multiTgt++
			}
		}
		if k != kindProjection {
			w.perEvent++
		}
		if stubborn[i] {
			w.stubborn++
			if work.SourceLane != "" || work.TargetLane != "" {
				w.stubbornLaned++
			}
		}
		ev.Work = []workqueue.Work{work}
		w.events = append(w.events, scopedEvent{scope: w.scopes[i%s.Scopes], event: ev})
	}
	return w
}
