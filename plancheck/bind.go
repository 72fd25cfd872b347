package plancheck

import (
	"fmt"
	"regexp"
	"strings"
)

// sqlcParam matches sqlc's parameter markers and sqlc's bare "?" (which it
// names "limit" in LIMIT ?).
var sqlcParam = regexp.MustCompile(`sqlc\.(arg|narg|slice)\(\s*(\w+)\s*\)|\?`)

// sqlcEmbed matches sqlc.embed(alias), which sqlc compiles into the alias's
// column list; alias.* reads the same columns from the same table.
var sqlcEmbed = regexp.MustCompile(`sqlc\.embed\(\s*(\w+)\s*\)`)

// Bind turns a catalog statement into executable SQL and arguments, taking
// each parameter's value from args by its sqlc name. A slice parameter takes
// a list and expands to one placeholder per element; sqlc.embed(alias)
// becomes alias.*.
func Bind(stmtSQL string, args map[string]any) (string, []any, error) {
	var out []any
	var missing []string
	var bindErr error
	sql := sqlcEmbed.ReplaceAllString(stmtSQL, "$1.*")
	sql = sqlcParam.ReplaceAllStringFunc(sql, func(m string) string {
		sub := sqlcParam.FindStringSubmatch(m)
		kind, name := sub[1], sub[2]
		if m == "?" {
			kind, name = "arg", "limit"
		}
		v, ok := args[name]
		if !ok {
			missing = append(missing, name)
			return "?"
		}
		if kind != "slice" {
			out = append(out, v)
			return "?"
		}
		list, ok := v.([]any)
		if !ok || len(list) == 0 {
			bindErr = fmt.Errorf("slice parameter %q needs a non-empty list, got %v", name, v)
			return "?"
		}
		out = append(out, list...)
		return strings.TrimSuffix(strings.Repeat("?, ", len(list)), ", ")
	})
	if len(missing) > 0 {
		return "", nil, fmt.Errorf("no value for parameter(s) %s", strings.Join(missing, ", "))
	}
	if bindErr != nil {
		return "", nil, bindErr
	}
	return sql, out, nil
}
