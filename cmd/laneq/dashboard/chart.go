package dashboard

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/laneq/laneq/runtime/inspect"
)

// Charts are server-rendered SVG (no script, no Node toolchain): the
// geometry is computed here and the template only places it, so a page
// renders the same in any browser and under the Content-Security-Policy
// (classes style it from style.css; no inline style).

// Chart geometry, in SVG user units.
const (
	chartMinutes  = 180 // the window: the last three hours
	chartBarWidth = 4
	chartWidth    = chartMinutes * chartBarWidth
	chartHeight   = 100
	dueHeight     = 50
)

// HistoryWindow is how far back the scope page's charts look.
const HistoryWindow = chartMinutes * time.Minute

// bar is one segment of a minute's stacked bar.
type bar struct {
	X, Y, W, H int
	Class      string // completed, failed, dead
	Title      string // the tooltip
}

// dot is a point of the due line.
type dot struct {
	X, Y  int
	Title string
}

// tick is an axis label.
type tick struct {
	X     int
	Label string
}

// classChart is one queue class's charts over the window.
type classChart struct {
	Class              string
	Width, Height      int
	DueHeight          int
	Bars               []bar
	Peak               int64 // attempts in the busiest minute: the bar chart's top
	DueLine            string
	DueDots            []dot         // the line's points (a lone minute shows as a dot)
	DuePeak            time.Duration // the due line's top
	Ticks              []tick
	Completed, Failed  int64 // totals over the window
	Dead               int64
	FirstMinute, Until time.Time
}

// charts builds one chart per class from a scope's history, over the
// chartMinutes minutes ending with the minute of now.
func charts(points []inspect.HistoryPoint, now time.Time) []classChart {
	end := now.UTC().Truncate(time.Minute)
	start := end.Add(-(chartMinutes - 1) * time.Minute)
	type minute struct {
		completed, failed, dead int64
		due                     time.Duration
		seen                    bool
	}
	byClass := map[string]*[chartMinutes]minute{}
	for _, p := range points {
		i := int(p.Minute.Sub(start) / time.Minute)
		if i < 0 || i >= chartMinutes {
			continue
		}
		m := byClass[p.QueueClass]
		if m == nil {
			m = new([chartMinutes]minute)
			byClass[p.QueueClass] = m
		}
		m[i].completed += p.Completed
		m[i].failed += p.Failed
		m[i].dead += p.Dead
		m[i].due = max(m[i].due, p.MaxDue)
		m[i].seen = true
	}
	classes := make([]string, 0, len(byClass))
	for c := range byClass {
		classes = append(classes, c)
	}
	sort.Strings(classes)
	var out []classChart
	for _, class := range classes {
		mins := byClass[class]
		ch := classChart{Class: class, Width: chartWidth, Height: chartHeight, DueHeight: dueHeight, FirstMinute: start, Until: end.Add(time.Minute)}
		for _, m := range mins {
			ch.Peak = max(ch.Peak, m.completed+m.failed+m.dead)
			ch.DuePeak = max(ch.DuePeak, m.due)
			ch.Completed += m.completed
			ch.Failed += m.failed
			ch.Dead += m.dead
		}
		var line []string
		for i, m := range mins {
			x := i * chartBarWidth
			at := start.Add(time.Duration(i) * time.Minute)
			if ch.Peak > 0 {
				y := chartHeight
				for _, seg := range []struct {
					n     int64
					class string
				}{{m.completed, "completed"}, {m.failed, "failed"}, {m.dead, "dead"}} {
					if seg.n == 0 {
						continue
					}
					h := max(int(seg.n*chartHeight/ch.Peak), 1)
					y -= h
					ch.Bars = append(ch.Bars, bar{X: x, Y: y, W: chartBarWidth - 1, H: h, Class: seg.class,
						Title: fmt.Sprintf("%s UTC: %d %s", at.Format("15:04"), seg.n, seg.class)})
				}
			}
			if m.seen && ch.DuePeak > 0 {
				y := dueHeight - int(int64(m.due)*int64(dueHeight-2)/int64(ch.DuePeak)) - 1
				line = append(line, fmt.Sprintf("%d,%d", x+chartBarWidth/2, y))
				ch.DueDots = append(ch.DueDots, dot{X: x + chartBarWidth/2, Y: y,
					Title: fmt.Sprintf("%s UTC: oldest due %s when claimed", at.Format("15:04"), m.due.Round(time.Millisecond))})
			}
		}
		ch.DueLine = strings.Join(line, " ")
		for i := 0; i < chartMinutes; i += 30 {
			ch.Ticks = append(ch.Ticks, tick{X: i * chartBarWidth, Label: start.Add(time.Duration(i) * time.Minute).Format("15:04")})
		}
		out = append(out, ch)
	}
	return out
}
