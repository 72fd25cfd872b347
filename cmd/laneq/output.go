package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"text/tabwriter"
)

// table collects a command's human output: aligned rows and free lines.
type table struct {
	w *tabwriter.Writer
}

func (t *table) row(cells ...string) {
	for i, c := range cells {
		cells[i] = strings.Map(func(r rune) rune { // a key must not break the table
			if r == '\t' || r == '\n' || r == '\r' {
				return ' '
			}
			return r
		}, c)
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) line(format string, args ...any) {
	t.w.Flush()
	fmt.Fprintf(t.w, format+"\n", args...)
}

// emit prints v as JSON with --json, else what human writes, as a table.
func (c *cli) emit(v any, human func(*table)) error {
	if c.json {
		enc := json.NewEncoder(c.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return fmt.Errorf("write JSON: %w", err)
		}
		return nil
	}
	t := &table{w: tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)}
	human(t)
	return t.w.Flush()
}

// progress writes a progress line to stderr (never to the output a script
// reads).
func (c *cli) progress(msg string) {
	fmt.Fprintln(c.stderr, msg)
}
