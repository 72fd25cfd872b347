// Package queries embeds the SQL catalog that sqlc compiles into ../gen, so
// tools such as plancheck can enumerate every named statement.
package queries

import (
	"bufio"
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strings"
)

//go:embed *.sql
var files embed.FS

// BenchSchema creates the bench's own tables (bench/schema.sql) in a bench
// database; `laneq bench` runs it after laneq's migrations. Never part of
// laneq's schema.
//
//go:embed bench/schema.sql
var BenchSchema string

// PlanCases is queries/plancheck.json: a plan-check case for every named
// statement (see package plancheck). It lives beside the SQL so a statement
// and its case change together.
//
//go:embed plancheck.json
var PlanCases []byte

// PlanGolden is queries/plancheck.golden.json: the reviewed plan shape of
// every case (written by make plancheck-accept).
//
//go:embed plancheck.golden.json
var PlanGolden []byte

// Statement is one named statement of the catalog.
type Statement struct {
	Name string // sqlc name, e.g. InsertEvent
	Kind string // sqlc command, e.g. :one, :exec
	File string // file it is declared in
	Line int    // line of its "-- name:" annotation
	SQL  string // the statement as written, with sqlc.arg() markers, without comments or ";"
}

var nameLine = regexp.MustCompile(`^--\s*name:\s*(\w+)\s+(:\w+)\s*$`)

// Statements lists every named statement of the catalog, sorted by name.
func Statements() ([]Statement, error) {
	paths, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("queries: list catalog files: %w", err)
	}
	seen := map[string]Statement{}
	var out []Statement
	for _, p := range paths {
		b, err := files.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("queries: read %s: %w", p, err)
		}
		for _, st := range Parse(p, b) {
			if prev, dup := seen[st.Name]; dup {
				return nil, fmt.Errorf("queries: %s declared twice (%s:%d and %s:%d)", st.Name, prev.File, prev.Line, p, st.Line)
			}
			seen[st.Name] = st
			out = append(out, st)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Parse splits sqlc-annotated SQL (file named file) into its named
// statements, in file order, without comments or the trailing ";".
func Parse(file string, src []byte) []Statement {
	var out []Statement
	var cur *Statement
	var body []string
	flush := func() {
		if cur != nil {
			cur.SQL = strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")
			out = append(out, *cur)
		}
		body = nil
	}
	sc := bufio.NewScanner(bytes.NewReader(src))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		m := nameLine.FindStringSubmatch(text)
		if m == nil {
			if cur != nil && !strings.HasPrefix(strings.TrimSpace(text), "--") {
				body = append(body, text)
			}
			continue
		}
		flush()
		cur = &Statement{Name: m[1], Kind: m[2], File: file, Line: line}
	}
	flush()
	return out
}
