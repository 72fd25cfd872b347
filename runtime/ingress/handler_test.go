package ingress_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/laneq/laneq/runtime/ingress"
	"github.com/laneq/laneq/runtime/workqueue"
)

var hookSecret = []byte("test-secret")

func sign(body []byte) string {
	m := hmac.New(sha256.New, hookSecret)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// A provider-shaped verifier and resolver: an HMAC signature header, the
// delivery id and class in headers, the scope from the path.
func verifyHMAC(r *http.Request, body []byte) error {
	got, err := hex.DecodeString(r.Header.Get("X-Signature"))
	if err != nil || !hmac.Equal(got, must2(hex.DecodeString(sign(body)))) {
		return errors.New("bad signature")
	}
	return nil
}

func must2(b []byte, _ error) []byte { return b }

func resolveHeaders(r *http.Request, _ []byte) (ingress.Envelope, error) {
	if r.Header.Get("X-Refuse") != "" {
		return ingress.Envelope{}, errors.New("unknown route")
	}
	return ingress.Envelope{
		Scope: scope, DeliveryID: r.Header.Get("X-Delivery-ID"), EventKind: r.Header.Get("X-Event"),
		Class: r.Header.Get("X-Class"),
	}, nil
}

// TestHandlerAnswersAfterTheDurableWrite drives the webhook adapter over
// real HTTP: 202 only once the receipt is readable, 200 for a redelivery,
// and a clear 4xx, writing nothing, for an oversized body, a bad
// signature, a missing delivery id, invalid UTF-8 in a key, a refused
// route and a redelivery with another body; 503 when the database fails.
func TestHandlerAnswersAfterTheDurableWrite(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	small, err := ingress.New(f.db, ingress.Config{MaxBody: 64})
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, err := small.Handler(ingress.HandlerConfig{Verify: verifyHMAC, Resolve: resolveHeaders, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()

	post := func(body string, headers map[string]string, signed bool) (int, ingress.HandlerResponse) {
		t.Helper()
		req, err := http.NewRequest("POST", srv.URL+"/hooks/crm", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if signed {
			req.Header.Set("X-Signature", sign([]byte(body)))
		}
		for k, v := range headers {
			req.Header[k] = []string{v} // raw: invalid UTF-8 goes out as sent
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out ingress.HandlerResponse
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("response body: %v", err)
		}
		return resp.StatusCode, out
	}
	receipts := func() int { return f.count("SELECT COUNT(*) FROM ingress_receipt") }

	status, resp := post(`{"id":1}`, map[string]string{"X-Delivery-ID": "evt-1", "X-Event": "contact.changed", "X-Class": "interactive"}, true)
	if status != http.StatusAccepted || resp.ReceiptID == 0 || resp.Duplicate {
		t.Fatalf("new delivery: %d %+v", status, resp)
	}
	got := f.receipt(resp.ReceiptID) // readable the moment the answer arrives: committed before it
	if got.DeliveryID != "evt-1" || got.Class != "interactive" || got.EventKind != "contact.changed" ||
		got.RouteKey != "/hooks/crm" || got.Method != "POST" || got.ContentType != "application/json" || got.PayloadHash != sha256.Sum256([]byte(`{"id":1}`)) {
		t.Fatalf("receipt envelope: %+v", got)
	}
	if got.ReceivedAt.After(got.AcceptedAt) {
		t.Fatalf("received %s after accepted %s", got.ReceivedAt, got.AcceptedAt)
	}
	status, again := post(`{"id":1}`, map[string]string{"X-Delivery-ID": "evt-1"}, true)
	if status != http.StatusOK || !again.Duplicate || again.ReceiptID != resp.ReceiptID {
		t.Fatalf("redelivery: %d %+v", status, again)
	}

	refusals := []struct {
		name    string
		body    string
		headers map[string]string
		signed  bool
		want    int
		mention string
	}{
		{"oversized body", strings.Repeat("x", 65), map[string]string{"X-Delivery-ID": "evt-2"}, true, http.StatusRequestEntityTooLarge, "64 bytes"},
		{"bad signature", `{"id":2}`, map[string]string{"X-Delivery-ID": "evt-2", "X-Signature": "00"}, false, http.StatusUnauthorized, "verification"},
		{"missing delivery id", `{"id":2}`, nil, true, http.StatusBadRequest, "delivery id: missing"},
		{"invalid UTF-8 delivery id", `{"id":2}`, map[string]string{"X-Delivery-ID": "evt-\xff"}, true, http.StatusBadRequest, "not valid UTF-8"},
		{"invalid UTF-8 event kind", `{"id":2}`, map[string]string{"X-Delivery-ID": "evt-2", "X-Event": "a\xc3"}, true, http.StatusBadRequest, "event kind"},
		{"refused route", `{"id":2}`, map[string]string{"X-Delivery-ID": "evt-2", "X-Refuse": "1"}, true, http.StatusBadRequest, "unknown route"},
		{"redelivery with another body", `{"id":9}`, map[string]string{"X-Delivery-ID": "evt-1"}, true, http.StatusConflict, "different body"},
	}
	for _, c := range refusals {
		status, resp := post(c.body, c.headers, c.signed)
		if status != c.want || !strings.Contains(resp.Error, c.mention) || resp.ReceiptID != 0 {
			t.Errorf("%s: %d %+v, want %d mentioning %q", c.name, status, resp, c.want, c.mention)
		}
	}
	if n := receipts(); n != 1 {
		t.Fatalf("%d receipts after the refusals, want 1", n)
	}

	// A database that fails: 503 with Retry-After, nothing acknowledged.
	pool, err := workqueue.OpenDB(f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	down, err := ingress.New(pool, ingress.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every statement now fails
	dh, err := down.Handler(ingress.HandlerConfig{Verify: ingress.NoVerification, Resolve: resolveHeaders, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/hooks/crm", bytes.NewReader([]byte("{}")))
	req.Header.Set("X-Delivery-ID", "evt-3")
	dh.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" {
		t.Fatalf("database down: %d %v %s", rec.Code, rec.Header(), rec.Body)
	}

	if _, err := small.Handler(ingress.HandlerConfig{Resolve: resolveHeaders}); !errors.Is(err, ingress.ErrInvalid) {
		t.Fatalf("a handler without a verifier: %v", err)
	}
}
