package ingress_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/google/go-cmp/cmp"

	"github.com/laneq/laneq/internal/faultdb"
	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

// TestDuplicateReceiptsMakeOneReceiptAndOneSetOfEvents: a redelivery (same
// delivery id) returns the first receipt and writes nothing, a delivery id
// differing by a trailing space is another delivery (NO PAD keys), and two
// deliveries of the same facts materialize one set of events: the second
// receipt records the existing events.
func TestDuplicateReceiptsMakeOneReceiptAndOneSetOfEvents(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	first := f.accept(delivery("d-1", "", "a", "b", "c"))
	if first.Duplicate || first.Receipt.Status != ingress.StatusPending || first.Receipt.Attempts != 0 {
		t.Fatalf("first accept = %+v", first)
	}
	again := f.accept(delivery("d-1", "", "a", "b", "c"))
	if !again.Duplicate || again.BodyDiffers || again.Receipt.ID != first.Receipt.ID {
		t.Fatalf("redelivery = %+v, want the first receipt %d as a duplicate", again, first.Receipt.ID)
	}
	changed := f.accept(delivery("d-1", "", "a", "x"))
	if !changed.Duplicate || !changed.BodyDiffers || changed.Receipt.ID != first.Receipt.ID {
		t.Fatalf("redelivery with another body = %+v, want the first receipt flagged BodyDiffers", changed)
	}
	spaced := f.accept(delivery("d-1 ", "", "a", "b", "c")) // another provider delivery of the same facts
	if spaced.Duplicate || spaced.Receipt.ID == first.Receipt.ID {
		t.Fatalf("delivery %q = %+v, want a new receipt", "d-1 ", spaced)
	}
	if n := f.count("SELECT COUNT(*) FROM ingress_receipt"); n != 2 {
		t.Fatalf("%d receipts, want 2", n)
	}

	r := f.router(ingress.RouterConfig{})
	if _, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil {
		t.Fatal(err)
	}
	a := f.receipt(first.Receipt.ID)
	b := f.receipt(spaced.Receipt.ID)
	if a.Status != ingress.StatusMaterialized || b.Status != ingress.StatusMaterialized {
		t.Fatalf("statuses %s and %s, want both materialized", a.Status, b.Status)
	}
	if n := f.count("SELECT COUNT(*) FROM event"); n != 3 {
		t.Fatalf("%d events, want 3 (one per fact)", n)
	}
	if n := f.count("SELECT COUNT(*) FROM work_item"); n != 3 {
		t.Fatalf("%d work items, want 3", n)
	}
	written := f.eventsOf(first.Receipt.ID)
	if diff := cmp.Diff(written, a.EventIDs); diff != "" {
		t.Fatalf("first receipt's event ids (-written +recorded):\n%s", diff)
	}
	if diff := cmp.Diff(written, b.EventIDs); diff != "" {
		t.Fatalf("second receipt records the existing events (-want +got):\n%s", diff)
	}
	if a.MaterializedAt.IsZero() || a.Attempts != 1 || a.ClaimToken != 1 {
		t.Fatalf("materialized receipt = %+v", a)
	}
	if st := r.Stats(); st.Materialized != 2 || st.Events != 6 || st.Transactions != 2 {
		t.Fatalf("stats %+v, want 2 receipts with 6 events (3 duplicates) in two transactions (a batch never repeats a fact)", st)
	}
	// Nothing is left to claim.
	if n, err := r.Turn(f.ctx, ingress.DefaultClass); err != nil || n != 0 || r.Stats().Turns != 1 {
		t.Fatalf("second turn: claimed %d, err %v, stats %+v", n, err, r.Stats())
	}
}

// TestAcceptRefusesBadInput: every refused delivery names its field, wraps
// ErrInvalid, and writes nothing.
func TestAcceptRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	small, err := ingress.New(f.db, ingress.Config{MaxBody: 8})
	if err != nil {
		t.Fatal(err)
	}
	ok := delivery("ok", "", "a")
	cases := []struct {
		name  string
		edit  func(*ingress.Delivery)
		field string
		large bool
	}{
		{"missing delivery id", func(d *ingress.Delivery) { d.DeliveryID = "" }, "delivery id", false},
		{"missing scope", func(d *ingress.Delivery) { d.Scope = "" }, "scope", false},
		{"invalid UTF-8 delivery id", func(d *ingress.Delivery) { d.DeliveryID = "d-\xff" }, "delivery id", false},
		{"invalid UTF-8 scope", func(d *ingress.Delivery) { d.Scope = "tenant-\xc3" }, "scope", false},
		{"invalid UTF-8 route key", func(d *ingress.Delivery) { d.RouteKey = "/hooks/\xfe" }, "route key", false},
		{"NUL in delivery id", func(d *ingress.Delivery) { d.DeliveryID = "d\x00" }, "delivery id", false},
		{"newline in event kind", func(d *ingress.Delivery) { d.EventKind = "a\nb" }, "event kind", false},
		{"delivery id too long", func(d *ingress.Delivery) { d.DeliveryID = strings.Repeat("é", 256) }, "delivery id", false},
		{"class too long", func(d *ingress.Delivery) { d.Class = strings.Repeat("c", 65) }, "class", false},
		{"method with a space", func(d *ingress.Delivery) { d.Method = "PO ST" }, "method", false},
		{"body over the bound", func(d *ingress.Delivery) { d.Body = []byte("123456789") }, "body", true},
	}
	for _, c := range cases {
		d := ok
		c.edit(&d)
		_, err := small.Accept(f.ctx, d)
		var invalid *ingress.InvalidError
		if !errors.As(err, &invalid) || !errors.Is(err, ingress.ErrInvalid) || invalid.Field != c.field || invalid.TooLarge != c.large {
			t.Errorf("%s: err %v, want an InvalidError for %s (TooLarge %v)", c.name, err, c.field, c.large)
		}
	}
	if n := f.count("SELECT COUNT(*) FROM ingress_receipt"); n != 0 {
		t.Fatalf("%d receipts written by refused deliveries", n)
	}
	// The longest valid keys fit the columns exactly (characters, not bytes).
	d := ok
	d.DeliveryID = strings.Repeat("é", 255)
	d.Scope = strings.Repeat("s", 128)
	if _, err := small.Accept(f.ctx, d); err != nil {
		t.Fatalf("longest keys: %v", err)
	}
	if _, err := ingress.New(f.db, ingress.Config{MaxBody: ingress.MaxMaxBody + 1}); !errors.Is(err, ingress.ErrInvalid) {
		t.Fatalf("MaxBody over the bound: %v", err)
	}
}

// TestInboxRefusesASessionInAnotherTimeZone: receipts are due at NOW(6);
// an Inbox whose sessions run in UTC+8 would write every receipt eight
// hours off for a router in UTC, so New refuses the pool.
func TestInboxRefusesASessionInAnotherTimeZone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	cfg, err := mysql.ParseDSN(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.ParseTime, cfg.ClientFoundRows, cfg.Params["time_zone"] = true, true, "'+08:00'"
	db, err := sql.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := ingress.New(db, ingress.Config{}); !errors.Is(err, workqueue.ErrSessionSettings) {
		t.Fatalf("an Inbox on a UTC+8 session: %v, want workqueue.ErrSessionSettings", err)
	}
}

// TestAcceptAnnouncesWhenTheReadBackFails: the commit made the receipt
// routable, so Accept wakes this process's routers and announces it to
// other processes' even when its read-back after the commit fails (the
// caller gets that error; a redelivery finds the receipt). Both routers
// sleep for an hour: only the announcement can start them.
func TestAcceptAnnouncesWhenTheReadBackFails(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in, faults := f.faultyInbox()
	faults.Add(faultdb.Rule{Statement: "GetReceipt", Fault: faultdb.DropBefore, Times: 2})
	stop := in.AnnounceTo(newHub(t, f.qu))
	defer stop()

	local := f.routerOn(in, f.qu, ingress.RouterConfig{Classes: []string{"local"}, Backstop: time.Hour})
	f.run(local)
	other := f.otherProcess()
	remote := f.routerOn(other.in, other.qu, ingress.RouterConfig{
		Classes: []string{"remote"}, Wakes: other.hub, Backstop: time.Hour, QuietBackstop: time.Hour,
	})
	f.run(remote)
	// Both past their first turn (and the remote one subscribed).
	f.settle(local)
	f.waitQuiet(remote, true)
	f.settle(remote)

	for _, class := range []string{"remote", "local"} {
		d := delivery("read-back-fails-"+class, class, "f-"+class)
		if _, err := in.Accept(f.ctx, d); err == nil || !strings.Contains(err.Error(), "committed") {
			t.Fatalf("accept %s: %v, want the read-back's error", class, err)
		}
		r, err := f.in.ReceiptByDelivery(f.ctx, scope, d.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		f.waitStatus(r.ID, ingress.StatusMaterialized)
	}
	if n := faults.Fired("GetReceipt"); n != 2 {
		t.Fatalf("the read-back fault fired %d times, want 2", n)
	}
}
