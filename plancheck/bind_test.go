package plancheck

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestBindExpandsEmbed: sqlc compiles sqlc.embed(e) into e's column list, so
// the statement plancheck explains must read the same columns; TiDB has no
// function by that name and refuses it.
func TestBindExpandsEmbed(t *testing.T) {
	sql, args, err := Bind(`SELECT w.work_id, sqlc.embed(e), sqlc.embed( s ) FROM work_item w JOIN event e ON e.event_id = w.event_id JOIN scope s ON s.scope_id = w.scope_id WHERE w.scope_id = sqlc.arg(scope_id) LIMIT ?`,
		map[string]any{"scope_id": "tenant", "limit": 5})
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT w.work_id, e.*, s.* FROM work_item w JOIN event e ON e.event_id = w.event_id JOIN scope s ON s.scope_id = w.scope_id WHERE w.scope_id = ? LIMIT ?`
	if diff := cmp.Diff(want, sql); diff != "" {
		t.Fatalf("bound SQL (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]any{"tenant", 5}, args); diff != "" {
		t.Fatalf("args (-want +got):\n%s", diff)
	}
}
