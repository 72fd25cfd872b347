package queries

import (
	"embed"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// Loads are hand-written LOAD DATA statements in queries/load that sqlc
// cannot compile (see load/events.sql for why they exist). The runtime
// streams rows into them; plancheck runs each once on its fixture.
//
//go:embed load/*.sql
var loadFiles embed.FS

// Load is one statement of queries/load.
type Load struct {
	Name    string   // file name without ".sql", e.g. "events"
	SQL     string   // the statement without comments or ";"
	Reader  string   // the reader handler it names: 'Reader::<Reader>'
	Table   string   // the table it loads into
	Columns []string // each row's fields, in order ("@name" for a user variable)
}

var (
	loadReader  = regexp.MustCompile(`'Reader::(\w+)'`)
	loadTable   = regexp.MustCompile(`(?i)INTO\s+TABLE\s+(\w+)`)
	loadColumns = regexp.MustCompile(`(?is)LINES\s+TERMINATED\s+BY\s+'[^']*'\s*\(([^)]*)\)`)
)

// Loads lists the statements of queries/load, sorted by name.
func Loads() ([]Load, error) {
	paths, err := fs.Glob(loadFiles, "load/*.sql")
	if err != nil {
		return nil, fmt.Errorf("queries: list load statements: %w", err)
	}
	var out []Load
	for _, p := range paths {
		b, err := loadFiles.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("queries: read %s: %w", p, err)
		}
		l, err := parseLoad(strings.TrimSuffix(path.Base(p), ".sql"), string(b))
		if err != nil {
			return nil, fmt.Errorf("queries: %s: %w", p, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// LoadNamed returns the statement of queries/load/<name>.sql.
func LoadNamed(name string) (Load, error) {
	all, err := Loads()
	if err != nil {
		return Load{}, err
	}
	for _, l := range all {
		if l.Name == name {
			return l, nil
		}
	}
	return Load{}, fmt.Errorf("queries: no load statement %q", name)
}

func parseLoad(name, src string) (Load, error) {
	var body []string
	for _, line := range strings.Split(src, "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "--") {
			body = append(body, line)
		}
	}
	l := Load{Name: name, SQL: strings.TrimSuffix(strings.TrimSpace(strings.Join(body, "\n")), ";")}
	if m := loadReader.FindAllStringSubmatch(l.SQL, -1); len(m) == 1 {
		l.Reader = m[0][1]
	} else {
		return Load{}, fmt.Errorf("want exactly one 'Reader::<name>' file name, found %d", len(m))
	}
	if m := loadTable.FindStringSubmatch(l.SQL); m != nil {
		l.Table = m[1]
	} else {
		return Load{}, fmt.Errorf("no INTO TABLE")
	}
	m := loadColumns.FindStringSubmatch(l.SQL)
	if m == nil {
		return Load{}, fmt.Errorf("no column list after LINES TERMINATED BY")
	}
	for _, c := range strings.Split(m[1], ",") {
		l.Columns = append(l.Columns, strings.TrimSpace(c))
	}
	return l, nil
}
