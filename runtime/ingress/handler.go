package ingress

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"
)

// Envelope is what a Resolver says about a verified request: where the
// delivery belongs and who it is. laneq knows no provider: the resolver
// reads the provider's headers or body.
type Envelope struct {
	Scope         string
	DeliveryID    string
	RouteKey      string // default: the request's URL path
	EventKind     string
	CorrelationID string
	Class         string // default DefaultClass
}

// HandlerConfig configures Handler.
type HandlerConfig struct {
	// Verify authenticates a request (a provider signature over the body,
	// a shared secret): an error answers 401 and writes nothing. Required;
	// pass NoVerification only behind something that verified already.
	Verify func(r *http.Request, body []byte) error
	// Resolve gives a verified request's envelope: an error answers 400.
	Resolve func(r *http.Request, body []byte) (Envelope, error)
	// Logger receives one line per refused request and per database
	// failure (never a body); nil: slog.Default().
	Logger *slog.Logger
}

// NoVerification is a Verify that accepts every request.
func NoVerification(*http.Request, []byte) error { return nil }

// HandlerResponse is the JSON body Handler answers with.
type HandlerResponse struct {
	ReceiptID int64  `json:"receipt_id,omitempty"`
	Duplicate bool   `json:"duplicate,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Handler adapts Accept to a webhook endpoint. It answers 2xx only after
// the receipt committed: 202 for a new receipt, 200 for a redelivery (the
// existing receipt; nothing written). Nothing is written for:
//   - a body over the Inbox's MaxBody: 413;
//   - a request Verify refuses: 401;
//   - a request Resolve refuses, or an envelope Accept refuses (a missing
//     delivery id, invalid UTF-8 or control characters in a key, a key too
//     long): 400 naming the field;
//   - a redelivery whose body differs from the accepted one: 409;
//   - a database failure: 503 with Retry-After (the provider redelivers;
//     whether it does is the provider's contract, not laneq's).
func (in *Inbox) Handler(cfg HandlerConfig) (http.Handler, error) {
	if cfg.Verify == nil {
		return nil, &InvalidError{Field: "Verify", Reason: "missing (use NoVerification to accept unverified requests)"}
	}
	if cfg.Resolve == nil {
		return nil, &InvalidError{Field: "Resolve", Reason: "missing"}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		received := time.Now()
		refuse := func(status int, msg string) {
			log.Info("ingress: refused request", "path", r.URL.Path, "status", status, "reason", msg)
			answer(w, status, HandlerResponse{Error: msg})
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(in.cfg.MaxBody)))
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("body over %d bytes", in.cfg.MaxBody))
			return
		case err != nil:
			refuse(http.StatusBadRequest, "reading the body: "+err.Error())
			return
		}
		if err := cfg.Verify(r, body); err != nil {
			refuse(http.StatusUnauthorized, "verification failed")
			return
		}
		env, err := cfg.Resolve(r, body)
		if err != nil {
			refuse(http.StatusBadRequest, sanitize(err.Error(), 256))
			return
		}
		if env.RouteKey == "" {
			env.RouteKey = r.URL.Path
		}
		acc, err := in.Accept(r.Context(), Delivery{
			Scope: env.Scope, DeliveryID: env.DeliveryID, Method: r.Method, RouteKey: env.RouteKey,
			ContentType: r.Header.Get("Content-Type"), EventKind: env.EventKind, CorrelationID: env.CorrelationID,
			Class: env.Class, Body: body, ReceivedAt: received,
		})
		var invalid *InvalidError
		switch {
		case errors.As(err, &invalid) && invalid.TooLarge:
			refuse(http.StatusRequestEntityTooLarge, sanitize(invalid.Error(), 256))
		case errors.As(err, &invalid):
			refuse(http.StatusBadRequest, sanitize(invalid.Error(), 256))
		case err != nil:
			log.Error("ingress: accept failed", "path", r.URL.Path, "err", err)
			w.Header().Set("Retry-After", "5")
			answer(w, http.StatusServiceUnavailable, HandlerResponse{Error: "not accepted: try again"})
		case acc.BodyDiffers:
			refuse(http.StatusConflict, "delivery id already accepted with a different body")
		case acc.Duplicate:
			answer(w, http.StatusOK, HandlerResponse{ReceiptID: acc.Receipt.ID, Duplicate: true})
		default:
			answer(w, http.StatusAccepted, HandlerResponse{ReceiptID: acc.Receipt.ID})
		}
	}), nil
}

func answer(w http.ResponseWriter, status int, body HandlerResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
