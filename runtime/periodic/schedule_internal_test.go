package periodic

import (
	"errors"
	"testing"
	"time"

	"github.com/laneq/laneq/runtime/workqueue"
)

func must(t *testing.T, s Schedule) *Schedule {
	t.Helper()
	if s.Event == nil {
		s.Event = func(time.Time) (workqueue.Event, error) { return workqueue.Event{}, nil }
	}
	if err := s.compile(); err != nil {
		t.Fatalf("compile %+v: %v", s, err)
	}
	return &s
}

// Fixed intervals tick on the multiples of Every since the epoch; a cron
// expression ticks in its zone, also across a daylight-saving change;
// latest finds the last tick at or before a time, for sparse expressions
// too.
func TestTicks(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		s            Schedule
		t            string
		next, latest string
	}{
		{"every 1s, between", Schedule{Every: time.Second}, "2026-12-07T10:00:00.4Z", "2026-12-07T10:00:01Z", "2026-12-07T10:00:00Z"},
		{"every 1s, on a tick", Schedule{Every: time.Second}, "2026-12-07T10:00:01Z", "2026-12-07T10:00:02Z", "2026-12-07T10:00:01Z"},
		{"every 90s", Schedule{Every: 90 * time.Second}, "2026-12-07T10:00:00Z", "2026-12-07T10:01:30Z", "2026-12-07T10:00:00Z"},
		{"every 1s before the epoch", Schedule{Every: time.Second}, "1969-12-31T23:59:59.5Z", "1970-01-01T00:00:00Z", "1969-12-31T23:59:59Z"},
		{"cron in UTC", Schedule{Cron: "30 2 * * *"}, "2026-12-07T10:00:00Z", "2026-12-08T02:30:00Z", "2026-12-07T02:30:00Z"},
		{"cron in Location", Schedule{Cron: "0 9 * * *", Location: berlin}, "2026-12-07T10:00:00Z", "2026-12-08T08:00:00Z", "2026-12-07T08:00:00Z"},
		{"cron with CRON_TZ", Schedule{Cron: "CRON_TZ=America/New_York 0 9 * * *"}, "2026-12-07T10:00:00Z", "2026-12-07T14:00:00Z", "2026-12-06T14:00:00Z"},
		// Berlin leaves summer time on 2026-10-25: 09:00 is 07:00Z before and 08:00Z after.
		{"cron across a DST change", Schedule{Cron: "0 9 * * *", Location: berlin}, "2026-10-24T12:00:00Z", "2026-10-25T08:00:00Z", "2026-10-24T07:00:00Z"},
		{"yearly, latest months back", Schedule{Cron: "0 0 1 1 *"}, "2026-12-07T10:00:00Z", "2027-01-01T00:00:00Z", "2026-01-01T00:00:00Z"},
		{"with seconds", Schedule{Cron: "*/15 * * * * *"}, "2026-12-07T10:00:07Z", "2026-12-07T10:00:15Z", "2026-12-07T10:00:00Z"},
	} {
		s := must(t, Schedule{Name: "s", Cron: tc.s.Cron, Every: tc.s.Every, Location: tc.s.Location})
		now := at(tc.t)
		if got := s.next(now); !got.Equal(at(tc.next)) {
			t.Errorf("%s: next(%s) = %s, want %s", tc.name, tc.t, got.UTC(), tc.next)
		}
		if got := s.latest(now); !got.Equal(at(tc.latest)) {
			t.Errorf("%s: latest(%s) = %s, want %s", tc.name, tc.t, got.UTC(), tc.latest)
		}
	}
	// The key is the instant in UTC, whatever the zone the tick is read in.
	s := must(t, Schedule{Name: "report", Cron: "0 9 * * *", Location: berlin})
	if k := s.key(at("2026-12-07T08:00:00Z").In(berlin)); k != "periodic/report/2026-12-07T08:00:00.000000Z" {
		t.Errorf("key = %q", k)
	}
}

// Bad schedules are refused with workqueue.ErrInvalid.
func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	ev := func(time.Time) (workqueue.Event, error) { return workqueue.Event{}, nil }
	for _, s := range []Schedule{
		{Name: "", Every: time.Second, Event: ev},
		{Name: "has space", Every: time.Second, Event: ev},
		{Name: "trailing ", Every: time.Second, Event: ev},
		{Name: "x", Event: ev},
		{Name: "x", Every: time.Second, Cron: "* * * * *", Event: ev},
		{Name: "x", Every: 500 * time.Millisecond, Event: ev},
		{Name: "x", Cron: "@every 5s", Event: ev},
		{Name: "x", Cron: "61 * * * *", Event: ev},
		{Name: "x", Cron: "CRON_TZ=Nowhere/Atlantis 0 * * * *", Event: ev},
		{Name: "x", Cron: "0 0 30 2 *", Event: ev}, // February 30th never comes
		{Name: "x", Every: time.Second},
		{Name: "x", Every: time.Second, Event: ev, Missed: Missed(7)},
	} {
		if err := s.compile(); !errors.Is(err, workqueue.ErrInvalid) {
			t.Errorf("%+v: compile = %v, want ErrInvalid", s, err)
		}
	}
}
