package plancheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// Golden is the committed brief plan shape of every case (operators by depth
// with their access objects; no row counts or timings) at one scale, so a
// changed plan is reviewed like changed code.
type Golden struct {
	Scale  int               `json:"scale"`
	Shapes map[string]string `json:"shapes"`
}

// LoadGolden parses queries/plancheck.golden.json; empty input is no golden.
func LoadGolden(b []byte) (Golden, error) {
	if len(strings.TrimSpace(string(b))) == 0 {
		return Golden{}, nil
	}
	var g Golden
	if err := json.Unmarshal(b, &g); err != nil {
		return Golden{}, fmt.Errorf("plancheck: golden plans: %w", err)
	}
	return g, nil
}

// Golden records this run's shapes at its largest fixture's scale.
func (r Report) Golden() Golden {
	g := Golden{Shapes: map[string]string{}}
	if len(r.Scales) > 0 {
		g.Scale = r.Scales[len(r.Scales)-1]
	}
	for _, res := range r.Results {
		g.Shapes[res.Query] = res.Shape
	}
	return g
}

// WriteJSON writes the golden file, keys sorted for stable diffs.
func (g Golden) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(g) // encoding/json sorts map keys
}

// CompareGolden adds a violation to every result whose shape at the golden
// scale is missing from the golden file or differs from it. Runs whose
// largest scale is not the golden one (e.g. -large, or databases plancheck
// did not seed) skip the comparison.
func (r *Report) CompareGolden(g Golden) {
	if len(r.Scales) == 0 || g.Scale == 0 || g.Scale != r.Scales[len(r.Scales)-1] {
		return
	}
	for i := range r.Results {
		res := &r.Results[i]
		want, ok := g.Shapes[res.Query]
		switch {
		case !ok:
			res.Violations = append(res.Violations, fmt.Sprintf("%s: no golden plan shape; review the plan and run `make plancheck-accept`", res.Query))
		case sameShape(want) != sameShape(res.Shape):
			res.Violations = append(res.Violations, fmt.Sprintf("%s: the plan shape changed at scale %d; review and run `make plancheck-accept` if intended:\n%s",
				res.Query, g.Scale, shapeDiff(want, res.Shape)))
		}
	}
}

// sameShape is a shape as the comparison reads it: HashAgg and StreamAgg
// are one operator, Agg. Which of the two TiDB picks for a COUNT over a
// LIMITed index read changed between two runs of the same fixture
// (ClassStatsCapped's arms), and neither reads anything the other does not:
// the shape is there to catch a changed read (an index, a full scan, a join
// order), not the aggregation's algorithm.
func sameShape(shape string) string {
	return strings.NewReplacer("HashAgg", "Agg", "StreamAgg", "Agg").Replace(shape)
}

// shapeDiff shows removed and added plan lines.
func shapeDiff(old, cur string) string {
	oldLines, curLines := strings.Split(strings.TrimSpace(old), "\n"), strings.Split(strings.TrimSpace(cur), "\n")
	count := func(lines []string) map[string]int {
		m := map[string]int{}
		for _, l := range lines {
			m[l]++
		}
		return m
	}
	inOld, inCur := count(oldLines), count(curLines)
	var out []string
	for _, l := range oldLines {
		if inCur[l] == 0 {
			out = append(out, "      - "+l)
		}
	}
	for _, l := range curLines {
		if inOld[l] == 0 {
			out = append(out, "      + "+l)
		}
	}
	return strings.Join(out, "\n")
}
