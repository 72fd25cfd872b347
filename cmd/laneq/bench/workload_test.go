package bench

import (
	"encoding/json"
	"slices"
	"testing"
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
