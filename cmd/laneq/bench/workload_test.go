package bench

import (
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// The workload has what the spec asks for: every consumer's key is
// satisfied by exactly one producer event of its scope, bursts hit target
// lanes, projection lanes hold only projection work, and the laneless
// variant has no lanes, projections or dependencies at all.
func TestWorkloadShape(t *testing.T) {
	spec, err := Spec{Items: 5000, Scopes: 2}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	w := buildWorkload(spec, false)
	sh := w.shape()
	if sh.Events != 5000 || sh.Free == 0 || sh.Projection == 0 || sh.Consumers == 0 || sh.SameTarget == 0 || sh.MultiTarget == 0 {
		t.Fatalf("shape %+v: every kind of event should be there", sh)
	}
	producers := map[string]string{} // key -> scope
	targets := map[string]bool{}
	for _, se := range w.events {
		var p payload
		if err := json.Unmarshal(se.event.Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.Satisfies != "" {
			if _, dup := producers[p.Satisfies]; dup {
				t.Fatalf("two producers for %s", p.Satisfies)
			}
			producers[p.Satisfies] = se.scope
		}
		wk := se.event.Work[0]
		if wk.TargetLane != "" {
			targets[wk.TargetLane] = true
		}
		if wk.Projection && (wk.SourceLane == "" || wk.TargetLane != "" || wk.WaitFor != nil) {
			t.Fatalf("projection work %+v", wk)
		}
	}
	for _, se := range w.events {
		wk := se.event.Work[0]
		if wk.WaitFor == nil {
			continue
		}
		if scope, ok := producers[wk.WaitFor.WakeKey]; !ok || scope != se.scope || wk.SourceLane != "" {
			t.Fatalf("consumer %s: producer in %q (found %v), lane %q", se.event.IdempotencyKey, scope, ok, wk.SourceLane)
		}
	}
	if len(targets) != spec.TargetLanes {
		t.Fatalf("target lanes hit: %v, want %d", targets, spec.TargetLanes)
	}
	for _, se := range buildWorkload(spec, true).events {
		if wk := se.event.Work[0]; wk.SourceLane != "" || wk.TargetLane != "" || wk.Projection || wk.WaitFor != nil {
			t.Fatalf("laneless workload has %+v", wk)
		}
	}
}

func TestFaultSchedule(t *testing.T) {
	got := FaultPlan{Kills: 3, Freezes: 1, TiDBPauses: 1, Drops: 1}.schedule()
	want := []string{faultKill, faultFreeze, faultPause, faultDrop, faultKill, faultKill}
	if !slices.Equal(got, want) {
		t.Fatalf("schedule %v, want %v", got, want)
	}
	if _, err := (Spec{Lease: 3e9, Faults: FaultPlan{Freeze: 1e9}}).WithDefaults(); err == nil {
		t.Fatal("a freeze shorter than the lease was accepted")
	}
}

// With --rate-keys, the limited events take the keys in turn (so every
// key's budget is exercised) and no other event carries a rate key; the
// keys need a limit to mean anything.
func TestWorkloadRateKeys(t *testing.T) {
	spec, err := Spec{Items: 600, FreeEvery: 2, LimitedEvery: 1, RateLimit: 20, RateKeys: 3}.WithDefaults()
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for _, se := range buildWorkload(spec, false).events {
		wk := se.event.Work[0]
		if (wk.WorkType == typeLimited) != (wk.RateKey != "") {
			t.Fatalf("work type %q with rate key %q", wk.WorkType, wk.RateKey)
		}
		if wk.RateKey != "" {
			perKey[wk.RateKey]++
		}
	}
	if len(perKey) != 3 || perKey["key-0"]-perKey["key-2"] > 1 || perKey["key-0"] < 50 {
		t.Fatalf("limited events per key %v, want 3 keys taken in turn", perKey)
	}
	if _, err := (Spec{RateKeys: 3}).WithDefaults(); err == nil {
		t.Fatal("rate keys without a rate limit were accepted")
	}
}

// With --stubborn-every, about one event in N is stubborn, in lanes and in
// none (the hash does not follow FreeEvery), and none is a dependency's
// producer: the bench cancels stubborn items, and a cancelled producer
// would leave its consumer waiting for ever. The laneless baseline
// workload has none. The mix's defaults make a stubborn handler overrun
// its deadline and its abandonment; cancels need stubborn items.
func TestWorkloadStubborn(t *testing.T) {
	for _, freeEvery := range []int{2, 10} {
		spec, err := Spec{Items: 2000, FreeEvery: freeEvery, StubbornEvery: 10}.WithDefaults()
		if err != nil {
			t.Fatal(err)
		}
		w := buildWorkload(spec, false)
		if w.stubborn < 150 || w.stubborn > 250 || w.stubbornLaned == 0 || w.stubbornLaned == w.stubborn {
			t.Fatalf("free every %d: %d stubborn events, %d of them in lanes: want about 200, in lanes and in none", freeEvery, w.stubborn, w.stubbornLaned)
		}
		for _, se := range w.events {
			var p payload
			if err := json.Unmarshal(se.event.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if p.Stubborn && p.Satisfies != "" {
				t.Fatalf("stubborn event %s satisfies %s", se.event.IdempotencyKey, p.Satisfies)
			}
		}
		if n := buildWorkload(spec, true).stubborn; n != 0 {
			t.Fatalf("laneless baseline workload has %d stubborn events", n)
		}
		if spec.HandlerDeadline != 2*time.Second || spec.AbandonAfter != time.Second || spec.StubbornFor <= spec.HandlerDeadline+spec.AbandonAfter {
			t.Fatalf("deadline %s, abandon after %s, stubborn for %s: a stubborn handler must outlive its abandonment past the deadline",
				spec.HandlerDeadline, spec.AbandonAfter, spec.StubbornFor)
		}
	}
	if _, err := (Spec{Cancels: 2}).WithDefaults(); err == nil {
		t.Fatal("cancels without stubborn events were accepted")
	}
}
