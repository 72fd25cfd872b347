package workqueue

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/internal/tidbtest"
)

func TestLoadDataEscapesWhatTheFormatReads(t *testing.T) {
	t.Parallel()
	var d loadData
	d.row(nil, "a\tb\nc\\d\x00e\rf\x1ag\xff", []byte(`\N`), int64(-7), sql.NullString{}, sql.NullString{String: "x", Valid: true},
		sql.NullInt64{}, sql.NullInt64{Int64: 9, Valid: true}, []byte(nil), []byte{})
	want := `\N` + "\t" + `a\tb\nc\\d\0e\rf\Zg` + "\xff\t" + `\\N` + "\t-7\t" + `\N` + "\tx\t" + `\N` + "\t9\t" + `\N` + "\t\n"
	if got := d.buf.String(); got != want {
		t.Fatalf("row encoded as %q, want %q", got, want)
	}
	if d.rows != 1 {
		t.Fatalf("rows = %d, want 1", d.rows)
	}
}

// What a load would skip or alter instead of failing makes the load fail
// with ErrLoadIncomplete, and the transaction it ran in keeps nothing.
func TestLoadFailsClosedOnSkippedOrAlteredRows(t *testing.T) {
	t.Parallel()
	db := tidbtest.NewDB(t)
	ctx := context.Background()
	event := func(key, sourceID string) gen.InsertEventParams {
		return gen.InsertEventParams{ScopeID: "s", Generation: 1, SourceID: sourceID, IdempotencyKey: key,
			PayloadHash: make([]byte, 32), Payload: []byte("{}")}
	}
	fill := func(d *loadData, rows ...gen.InsertEventParams) {
		for _, r := range rows {
			d.event(r)
		}
	}
	for name, rows := range map[string][]gen.InsertEventParams{
		"duplicate key":  {event("k", ""), event("other", ""), event("k", "")},
		"value too long": {event("k", strings.Repeat("x", 256))},
		"invalid UTF-8":  {event("k\xff", "")},
	} {
		t.Run(name, func(t *testing.T) {
			tx, err := db.BeginTx(ctx, readCommitted)
			if err != nil {
				t.Fatal(err)
			}
			var d loadData
			fill(&d, rows...)
			err = d.load(ctx, tx, loadEvents)
			if !errors.Is(err, ErrLoadIncomplete) {
				t.Fatalf("load: %v, want ErrLoadIncomplete", err)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM event").Scan(&n); err != nil || n != 0 {
				t.Fatalf("%d events left after the rollback (%v)", n, err)
			}
		})
	}
	// The same load with clean rows writes them all.
	tx, err := db.BeginTx(ctx, readCommitted)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var d loadData
	fill(&d, event("k", ""), event("k ", ""))
	if err := d.load(ctx, tx, loadEvents); err != nil {
		t.Fatalf("clean load: %v", err)
	}
}
