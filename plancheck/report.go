package plancheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func (r Result) verdict() string { return verdict(r.Pass()) }

// times is a hot case's median per fixture, then on the churned fixture.
func (r Result) times(sep string) string {
	if len(r.MedianMs) == 0 {
		return "-"
	}
	parts := make([]string, len(r.MedianMs))
	for i, m := range r.MedianMs {
		parts[i] = fmt.Sprintf("%.2f", m)
	}
	s := strings.Join(parts, sep)
	if n := len(r.MedianMs); n > 1 && r.MedianMs[0] > 0 {
		s += fmt.Sprintf(" (x%.1f)", r.MedianMs[n-1]/r.MedianMs[0])
	}
	if r.ChurnedMs > 0 {
		s += fmt.Sprintf("%s(churned %.2f)", sep, r.ChurnedMs)
	}
	return s
}

func (r Report) counts() (passed, failed int) {
	for _, res := range r.Results {
		if res.Pass() {
			passed++
		} else {
			failed++
		}
	}
	for _, tr := range r.Traced {
		if !tr.Pass() {
			failed++
		}
	}
	return passed, failed + len(r.Uncovered)
}

// problems lists every violation and every statement without a case.
func (r Report) problems() []string {
	var out []string
	for _, res := range r.Results {
		out = append(out, res.Violations...)
	}
	for _, tr := range r.Traced {
		out = append(out, tr.Violations...)
	}
	for _, q := range r.Uncovered {
		out = append(out, fmt.Sprintf("%s: no plan-check case: add one to queries/plancheck.json", q))
	}
	return out
}

func (r Report) fixtureHeader(prefix, sep string) string {
	parts := make([]string, len(r.Fixtures))
	for i, f := range r.Fixtures {
		parts[i] = prefix + f
	}
	return strings.Join(parts, sep)
}

// requestUnits is a case's RU per fixture, or "-" per fixture when the
// server reported none.
func (r Result) requestUnits(fixtures int, sep string) string {
	parts := make([]string, fixtures)
	for i := range parts {
		parts[i] = "-"
		if i < len(r.RU) {
			parts[i] = fmt.Sprintf("%.2f", r.RU[i])
		}
	}
	return strings.Join(parts, sep)
}

func joinRows(v []int64, sep string) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, sep)
}

// WriteText writes the terminal tables: one line per case with rows read,
// request units (one execution) and, for hot cases, median milliseconds on
// every fixture, the scan operators at the largest, and the verdict; then
// the runtime's traced calls; then every violation in full.
func (r Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "\nlaneq plancheck — %s — %d cases on %s\n\n", r.Server, len(r.Results), strings.Join(r.Fixtures, ", "))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "CASE\t%s\t%s\tMEDIAN ms (hot)\tSCAN OPERATORS (largest)\tVERDICT\n", r.fixtureHeader("ROWS ", "\t"), r.fixtureHeader("RU ", "\t"))
	n := len(r.Fixtures)
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", res.Query, joinRows(res.RowsRead, "\t"), res.requestUnits(n, "\t"), res.times(" / "), res.Operators, res.verdict())
	}
	for _, q := range r.Uncovered {
		fmt.Fprintf(tw, "%s\t%s\t-\t(no plan-check case)\tFAIL\n", q, strings.Repeat("-\t", 2*n-1)+"-")
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Traced) > 0 {
		fmt.Fprintf(w, "\ntraced: the runtime's own calls on the churned fixture, explained with the arguments it sent\n\n")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintf(tw, "STATEMENT\tCALLS\tEXPLAINED\tMAX ROWS\tMEDIAN ms\tSLOWEST CALL'S ARGUMENTS\tVERDICT\n")
		for _, tr := range r.Traced {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%.2f\t%s\t%s\n", tr.Query, tr.Calls, tr.Explained, tr.RowsRead, tr.MedianMs, orDash(tr.Args), verdict(tr.Pass()))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	passed, failed := r.counts()
	if problems := r.problems(); len(problems) > 0 {
		fmt.Fprintf(w, "\nviolations:\n")
		for _, p := range problems {
			fmt.Fprintf(w, "  - %s\n", p)
		}
	}
	fmt.Fprintf(w, "\nplancheck: %d passed, %d failed\n", passed, failed)
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// WriteMarkdown writes the report for a CI job summary or a PR comment.
func (r Report) WriteMarkdown(w io.Writer) error {
	passed, failed := r.counts()
	status := "✅ every statement passed"
	if failed > 0 {
		status = fmt.Sprintf("❌ %d failed", failed)
	}
	fmt.Fprintf(w, "## laneq plancheck: %s\n\n%s — %d cases on %s.\n\n", status, r.Server, len(r.Results), strings.Join(r.Fixtures, ", "))
	n := len(r.Fixtures)
	fmt.Fprintf(w, "| case | %s | %s | median ms (hot) | scan operators (largest) | verdict |\n|---|%s---:|---|---|\n",
		r.fixtureHeader("rows ", " | "), r.fixtureHeader("RU ", " | "), strings.Repeat("---:|", 2*n))
	for _, res := range r.Results {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s | %s |\n", res.Query, joinRows(res.RowsRead, " | "), res.requestUnits(n, " | "), res.times(" / "), res.Operators, res.verdict())
	}
	for _, q := range r.Uncovered {
		fmt.Fprintf(w, "| `%s` | %s | - | no plan-check case | FAIL |\n", q, strings.TrimSuffix(strings.Repeat("- | ", 2*n), " | "))
	}
	if len(r.Traced) > 0 {
		fmt.Fprintf(w, "\n### Traced: the runtime's own calls, with the arguments it sent\n\n")
		fmt.Fprintf(w, "| statement | calls | explained | max rows | median ms | slowest call's arguments | verdict |\n|---|---:|---:|---:|---:|---|---|\n")
		for _, tr := range r.Traced {
			fmt.Fprintf(w, "| `%s` | %d | %d | %d | %.2f | `%s` | %s |\n", tr.Query, tr.Calls, tr.Explained, tr.RowsRead, tr.MedianMs, orDash(tr.Args), verdict(tr.Pass()))
		}
	}
	if problems := r.problems(); len(problems) > 0 {
		fmt.Fprintf(w, "\n### Violations\n\n")
		for _, p := range problems {
			fmt.Fprintf(w, "- %s\n", p)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed.\n", passed, failed)
	return nil
}

// WriteJSON writes the report for tools.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
