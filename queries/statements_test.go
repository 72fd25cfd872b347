package queries_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/queries"
)

// TestStatementsMatchGeneratedMethods proves the catalog listing that
// plancheck relies on sees exactly the statements sqlc compiled into gen/.
func TestStatementsMatchGeneratedMethods(t *testing.T) {
	t.Parallel()
	stmts, err := queries.Statements()
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, s := range stmts {
		listed = append(listed, s.Name)
	}

	files, err := filepath.Glob("../gen/*.sql.go")
	if err != nil {
		t.Fatal(err)
	}
	var generated []string
	fset := token.NewFileSet()
	for _, f := range files {
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv != nil && fn.Name.IsExported() {
				generated = append(generated, fn.Name.Name)
			}
		}
	}
	sort.Strings(generated)
	if len(listed) == 0 {
		t.Fatal("the catalog lists no statements")
	}
	if diff := cmp.Diff(generated, listed); diff != "" {
		t.Fatalf("catalog listing vs generated methods (-gen +listed):\n%s", diff)
	}
}
