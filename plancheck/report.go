package plancheck

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

func (r Result) verdict() string {
	if r.Pass() {
		return "ok"
	}
	return "FAIL"
}

// times is "fresh/churned" milliseconds for a timed hot case, else "-".
func (r Result) times() string {
	if r.ChurnedMs == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f/%.2f", r.FreshMs, r.ChurnedMs)
}

func (r Report) counts() (passed, failed int) {
	for _, res := range r.Results {
		if res.Pass() {
			passed++
		} else {
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
	for _, q := range r.Uncovered {
		out = append(out, fmt.Sprintf("%s: no plan-check case: add one to queries/plancheck.json", q))
	}
	return out
}

func (r Report) scaleHeader(sep string) string {
	parts := make([]string, len(r.Scales))
	for i, s := range r.Scales {
		parts[i] = fmt.Sprintf("ROWS@%d", s)
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

// WriteText writes the terminal table: one line per case with rows read at
// every scale, the scan operators at the largest scale, and the verdict,
// then every violation in full.
func (r Report) WriteText(w io.Writer) error {
	fmt.Fprintf(w, "\nlaneq plancheck — %s — %d cases, scales %v\n\n", r.Server, len(r.Results), r.Scales)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "STATEMENT\t%s\tFRESH/CHURNED ms\tSCAN OPERATORS (largest scale)\tVERDICT\n", r.scaleHeader("\t"))
	for _, res := range r.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Query, joinRows(res.RowsRead, "\t"), res.times(), res.Operators, res.verdict())
	}
	for _, q := range r.Uncovered {
		fmt.Fprintf(tw, "%s\t%s\t-\t(no plan-check case)\tFAIL\n", q, strings.Repeat("-\t", len(r.Scales)-1)+"-")
	}
	if err := tw.Flush(); err != nil {
		return err
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

// WriteMarkdown writes the report for a CI job summary or a PR comment.
func (r Report) WriteMarkdown(w io.Writer) error {
	passed, failed := r.counts()
	status := "✅ every statement passed"
	if failed > 0 {
		status = fmt.Sprintf("❌ %d failed", failed)
	}
	fmt.Fprintf(w, "## laneq plancheck: %s\n\n%s — %d cases, scales %v.\n\n", status, r.Server, len(r.Results), r.Scales)
	fmt.Fprintf(w, "| statement | %s | fresh/churned ms | scan operators (largest scale) | verdict |\n|---|%s---:|---|---|\n",
		r.scaleHeader(" | "), strings.Repeat("---:|", len(r.Scales)))
	for _, res := range r.Results {
		fmt.Fprintf(w, "| `%s` | %s | %s | %s | %s |\n", res.Query, joinRows(res.RowsRead, " | "), res.times(), res.Operators, res.verdict())
	}
	for _, q := range r.Uncovered {
		fmt.Fprintf(w, "| `%s` | %s | - | no plan-check case | FAIL |\n", q, strings.TrimSuffix(strings.Repeat("- | ", len(r.Scales)), " | "))
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
