package workqueue

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/go-sql-driver/mysql"

	"github.com/laneq/laneq/gen"
	"github.com/laneq/laneq/queries"
)

// loadMinRows is the smallest batch of new rows (events, or work items)
// that enqueue writes with one LOAD DATA statement (queries/load) instead
// of one INSERT per row. A load costs three statements (the load, its
// warning check, the id read-back) however many rows it carries; below
// this, per-row inserts are as few statements and a lone interactive
// enqueue keeps its two-statement path.
var loadMinRows = 4

// The batch materializer's statements, and the fields each row carries in
// their column order. Both are checked when the package loads: a statement
// whose columns drift from the encoder below fails every test at once.
var (
	loadEvents = mustLoad("events", []string{
		"receipt_id", "scope_id", "generation", "route_id", "route_version", "event_kind",
		"source_kind", "source_id", "delivery_sequence", "enqueue_ordinal",
		"idempotency_key", "payload_hash", "payload", "projection_key",
	})
	loadWorkItems = mustLoad("work_items", []string{
		"event_id", "scope_id", "generation", "work_type", "queue_class", "state", "priority",
		"source_lane_key", "target_lane_key", "lane_ordinal", "projection_key",
		"projection_active_key", "projection_queued_key", "dependency_wake_key",
		"dependency_keys", "unique_live_key", "rate_key", "@refused_by_work_id",
		"failure_class", "failure_summary", "@delay_micros",
	})
)

func mustLoad(name string, columns []string) queries.Load {
	l, err := queries.LoadNamed(name)
	if err != nil {
		panic(err)
	}
	if !slices.Equal(l.Columns, columns) {
		panic(fmt.Sprintf("workqueue: queries/load/%s.sql loads columns %q, the encoder writes %q", name, l.Columns, columns))
	}
	return l
}

// insertEvents writes new events in order and returns their ids: by one
// load when there are loadMinRows or more and raw (the transaction itself)
// is given, else one InsertEvent each.
func insertEvents(ctx context.Context, q *gen.Queries, raw *sql.Tx, rows []gen.InsertEventParams) ([]int64, error) {
	ids := make([]int64, len(rows))
	if raw == nil || len(rows) < loadMinRows {
		for i, r := range rows {
			id, err := q.InsertEvent(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("insert event %q: %w", r.IdempotencyKey, err)
			}
			ids[i] = id
		}
		return ids, nil
	}
	var data loadData
	keys := make([]string, len(rows))
	for i, r := range rows {
		data.event(r)
		keys[i] = r.IdempotencyKey
	}
	if err := data.load(ctx, raw, loadEvents); err != nil {
		return nil, err
	}
	// One scope per batch: enqueue writes one scope's events.
	got, err := q.LockEventsByIdempotencyKeys(ctx, gen.LockEventsByIdempotencyKeysParams{ScopeID: rows[0].ScopeID, IdempotencyKeys: keys})
	if err != nil {
		return nil, fmt.Errorf("read back loaded event ids: %w", err)
	}
	byKey := make(map[string]int64, len(got))
	for _, e := range got {
		byKey[e.IdempotencyKey] = e.EventID
	}
	for i, k := range keys {
		id, ok := byKey[k]
		if !ok {
			return nil, fmt.Errorf("read back loaded event ids: event %q is missing", k)
		}
		ids[i] = id
	}
	return ids, nil
}

// insertWorkItems writes new work items in order and returns their ids, as
// insertEvents does.
func insertWorkItems(ctx context.Context, q *gen.Queries, raw *sql.Tx, rows []gen.InsertWorkItemParams) ([]int64, error) {
	ids := make([]int64, len(rows))
	if raw == nil || len(rows) < loadMinRows {
		for i, r := range rows {
			id, err := q.InsertWorkItem(ctx, r)
			if err != nil {
				return nil, fmt.Errorf("event %d: insert work item %q: %w", r.EventID, r.WorkType, err)
			}
			ids[i] = id
		}
		return ids, nil
	}
	var data loadData
	var events []int64
	seen := map[int64]bool{}
	for _, r := range rows {
		data.row(r.EventID, r.ScopeID, r.Generation, r.WorkType, r.QueueClass, r.State, int64(r.Priority),
			r.SourceLaneKey, r.TargetLaneKey, r.LaneOrdinal, r.ProjectionKey,
			r.ProjectionActiveKey, r.ProjectionQueuedKey, r.DependencyWakeKey, r.DependencyKeys, r.UniqueLiveKey, r.RateKey,
			r.RefusedByWorkID, r.FailureClass, r.FailureSummary, r.DelayMicros)
		if !seen[r.EventID] {
			seen[r.EventID] = true
			events = append(events, r.EventID)
		}
	}
	if err := data.load(ctx, raw, loadWorkItems); err != nil {
		return nil, err
	}
	got, err := q.LockWorkItemsByEvents(ctx, events)
	if err != nil {
		return nil, fmt.Errorf("read back loaded work item ids: %w", err)
	}
	type key struct {
		event    int64
		workType string
	}
	byKey := make(map[key]int64, len(got))
	for _, w := range got {
		byKey[key{w.EventID, w.WorkType}] = w.WorkID
	}
	for i, r := range rows {
		id, ok := byKey[key{r.EventID, r.WorkType}]
		if !ok {
			return nil, fmt.Errorf("read back loaded work item ids: event %d work type %q is missing", r.EventID, r.WorkType)
		}
		ids[i] = id
	}
	return ids, nil
}

// event appends an event row in loadEvents' column order.
func (d *loadData) event(r gen.InsertEventParams) {
	d.row(r.ReceiptID, r.ScopeID, r.Generation, r.RouteID, r.RouteVersion, r.EventKind,
		r.SourceKind, r.SourceID, r.DeliverySequence, r.EnqueueOrdinal,
		r.IdempotencyKey, r.PayloadHash, r.Payload, r.ProjectionKey)
}

// loadData is the rows of one load in the format queries/load declares:
// tab-separated fields, backslash escapes, \N for NULL, one row per line.
type loadData struct {
	buf  bytes.Buffer
	rows int64
}

// row appends one row; each field is nil, a string, bytes (nil bytes are
// NULL, as database/sql has them), an integer or a sql.Null of those.
func (d *loadData) row(fields ...any) {
	for i, f := range fields {
		if i > 0 {
			d.buf.WriteByte('\t')
		}
		switch v := f.(type) {
		case nil:
			d.buf.WriteString(`\N`)
		case []byte:
			if v == nil {
				d.buf.WriteString(`\N`)
			} else {
				d.escaped(string(v))
			}
		case string:
			d.escaped(v)
		case int64:
			d.buf.WriteString(strconv.FormatInt(v, 10))
		case sql.NullString:
			if !v.Valid {
				d.buf.WriteString(`\N`)
			} else {
				d.escaped(v.String)
			}
		case sql.NullInt64:
			if !v.Valid {
				d.buf.WriteString(`\N`)
			} else {
				d.buf.WriteString(strconv.FormatInt(v.Int64, 10))
			}
		default:
			panic(fmt.Sprintf("workqueue: load field of type %T", f))
		}
	}
	d.buf.WriteByte('\n')
	d.rows++
}

// escaped writes s with the bytes LOAD DATA would take for syntax escaped:
// the field and line terminators, the escape itself, and NUL, CR and
// Ctrl-Z (which the server would otherwise read as such); every other byte,
// 0x80-0xff included, goes as it is.
func (d *loadData) escaped(s string) {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '\\':
			d.buf.WriteString(`\\`)
		case '\t':
			d.buf.WriteString(`\t`)
		case '\n':
			d.buf.WriteString(`\n`)
		case '\r':
			d.buf.WriteString(`\r`)
		case 0:
			d.buf.WriteString(`\0`)
		case 0x1a:
			d.buf.WriteString(`\Z`)
		default:
			d.buf.WriteByte(c)
		}
	}
}

// loadSeq names each load's reader handler: the driver keeps handlers in
// one process-wide registry, so concurrent loads need names of their own.
var loadSeq atomic.Uint64

// load runs l in tx with d's rows and fails unless every row was written as
// sent: a load skips a duplicate key and cuts or replaces a bad value with
// a warning, not an error (see queries/load/events.sql).
func (d *loadData) load(ctx context.Context, tx *sql.Tx, l queries.Load) error {
	name := fmt.Sprintf("%s_%d", l.Reader, loadSeq.Add(1))
	data := d.buf.Bytes()
	mysql.RegisterReaderHandler(name, func() io.Reader { return bytes.NewReader(data) })
	defer mysql.DeregisterReaderHandler(name)
	stmt := strings.Replace(l.SQL, "'Reader::"+l.Reader+"'", "'Reader::"+name+"'", 1)
	res, err := tx.ExecContext(ctx, stmt)
	if err != nil {
		return fmt.Errorf("load %d rows into %s: %w", d.rows, l.Table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("load into %s: rows affected: %w", l.Table, err)
	}
	// On the transaction itself, not a prepared-statement cache: preparing
	// a statement first would clear the load's warnings.
	warnings, err := gen.New(tx).LoadWarningCount(ctx)
	if err != nil {
		return fmt.Errorf("load into %s: read warnings: %w", l.Table, err)
	}
	if n != d.rows || warnings != 0 {
		return fmt.Errorf("%w: load into %s wrote %d of %d rows with %d warnings", ErrLoadIncomplete, l.Table, n, d.rows, warnings)
	}
	return nil
}
