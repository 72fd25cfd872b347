package scheduler

import (
	"fmt"
	"slices"
)

// Profile names a queue-class allocation of a scope's executors.
type Profile string

const (
	// ProfileReserved (the default) keeps a quarter of the executors for
	// latency classes only, a quarter for bulk classes only, and shares the
	// rest across every class without preference.
	ProfileReserved Profile = "reserved"
	// ProfileDefaultHeavy keeps a quarter latency-only, a quarter all-class
	// preferring bulk (a bulk liveness floor), and the middle half all-class
	// without preference, borrowable by whichever class is oldest.
	ProfileDefaultHeavy Profile = "default-heavy"
)

// Classes names the queue classes a profile allocates.
type Classes struct {
	// Latency classes must not wait behind a bulk backlog. Default
	// ["interactive", "default"].
	Latency []string
	// Bulk classes. Default ["bulk"].
	Bulk []string
}

func (c Classes) withDefaults() Classes {
	if len(c.Latency) == 0 {
		c.Latency = []string{"interactive", "default"}
	}
	if len(c.Bulk) == 0 {
		c.Bulk = []string{"bulk"}
	}
	return c
}

func (c Classes) all() []string {
	return append(slices.Clone(c.Latency), c.Bulk...)
}

// Shape is a group of executors with one claim eligibility: a claim for a
// shape asks only for its classes, with its preference, for its free slots.
type Shape struct {
	Name      string
	Executors int
	// QueueClasses the shape may run, and the Preferred subset it tries
	// first (work-conserving).
	QueueClasses []string
	Preferred    []string
}

// Shapes returns the executor shapes of profile for n executors. Below four
// executors a profile cannot reserve a quarter, so every executor is
// all-class without preference.
func Shapes(profile Profile, n int, classes Classes) ([]Shape, error) {
	if n < 1 {
		return nil, fmt.Errorf("scheduler: at least one executor is required, got %d", n)
	}
	classes = classes.withDefaults()
	if dup := overlap(classes.Latency, classes.Bulk); dup != "" {
		return nil, fmt.Errorf("scheduler: queue class %q is both a latency and a bulk class", dup)
	}
	all := classes.all()
	if n < 4 {
		switch profile {
		case ProfileReserved, ProfileDefaultHeavy:
			return []Shape{{Name: "shared", Executors: n, QueueClasses: all}}, nil
		}
	}
	quarter := n / 4
	switch profile {
	case ProfileReserved:
		return []Shape{
			{Name: "latency", Executors: quarter, QueueClasses: classes.Latency},
			{Name: "shared", Executors: n - 2*quarter, QueueClasses: all},
			{Name: "bulk", Executors: quarter, QueueClasses: classes.Bulk},
		}, nil
	case ProfileDefaultHeavy:
		return []Shape{
			{Name: "latency", Executors: quarter, QueueClasses: classes.Latency},
			{Name: "shared", Executors: n - 2*quarter, QueueClasses: all},
			{Name: "bulk-preferred", Executors: quarter, QueueClasses: all, Preferred: classes.Bulk},
		}, nil
	}
	return nil, fmt.Errorf("scheduler: unknown queue profile %q (want %q or %q)", profile, ProfileReserved, ProfileDefaultHeavy)
}

func overlap(a, b []string) string {
	for _, x := range a {
		if slices.Contains(b, x) {
			return x
		}
	}
	return ""
}
