package ingress

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

var (
	// ErrInvalid wraps every refused input (see InvalidError).
	ErrInvalid = errors.New("ingress: invalid input")
	// ErrNotFound reports a receipt that does not exist.
	ErrNotFound = errors.New("ingress: receipt not found")
	// ErrLeaseLost reports a router write that changed nothing because
	// another router took the receipt over after this one's lease ended.
	ErrLeaseLost = errors.New("ingress: receipt lease lost")
)

// InvalidError says which field of a delivery was refused and why.
// errors.Is(err, ErrInvalid) holds for it.
type InvalidError struct {
	Field  string
	Reason string
	// TooLarge marks a body over the size bound (HTTP 413 rather than 400).
	TooLarge bool
}

func (e *InvalidError) Error() string {
	return fmt.Sprintf("ingress: invalid %s: %s", e.Field, e.Reason)
}

func (e *InvalidError) Unwrap() error { return ErrInvalid }

// validate refuses what the receipt row cannot hold exactly: keys that are
// empty, too long (in characters, as the VARCHAR columns count), not valid
// UTF-8 or holding control characters, and bodies over the bound.
func (in *Inbox) validate(d Delivery) error {
	keys := []struct {
		field, v       string
		required       bool
		maxChars       int
		printableASCII bool
	}{
		{"scope", d.Scope, true, 128, false},
		{"delivery id", d.DeliveryID, true, 255, false},
		{"method", d.Method, true, 16, true},
		{"route key", d.RouteKey, true, 255, false},
		{"content type", d.ContentType, false, 255, false},
		{"event kind", d.EventKind, false, 128, false},
		{"correlation id", d.CorrelationID, false, 255, false},
		{"class", d.Class, true, 64, false},
	}
	for _, k := range keys {
		if err := checkKey(k.field, k.v, k.required, k.maxChars, k.printableASCII); err != nil {
			return err
		}
	}
	if len(d.Body) > in.cfg.MaxBody {
		return &InvalidError{Field: "body", Reason: fmt.Sprintf("%d bytes, over the %d-byte bound", len(d.Body), in.cfg.MaxBody), TooLarge: true}
	}
	return nil
}

func checkKey(field, v string, required bool, maxChars int, printableASCII bool) error {
	switch {
	case v == "" && required:
		return &InvalidError{Field: field, Reason: "missing"}
	case !utf8.ValidString(v):
		return &InvalidError{Field: field, Reason: "not valid UTF-8"}
	case utf8.RuneCountInString(v) > maxChars:
		return &InvalidError{Field: field, Reason: fmt.Sprintf("%d characters, over %d", utf8.RuneCountInString(v), maxChars)}
	}
	for _, r := range v {
		if unicode.IsControl(r) || (printableASCII && (r > unicode.MaxASCII || r == ' ')) {
			return &InvalidError{Field: field, Reason: fmt.Sprintf("holds the character %U", r)}
		}
	}
	return nil
}

// RouteError is a routing failure with the class and summary the router
// records on the receipt. Return one from a RouteFunc with Terminal or
// Transient; any other error is recorded as class "route_failed", retried,
// with its text as the summary (sanitized, never the body: a RouteFunc's
// errors must not quote the payload).
type RouteError struct {
	Class    string
	Err      error
	terminal bool
}

func (e *RouteError) Error() string { return fmt.Sprintf("ingress: %s: %v", e.Class, e.Err) }
func (e *RouteError) Unwrap() error { return e.Err }

// Terminal marks a failure no retry can mend (a body that does not parse,
// an unknown route): the receipt becomes failed at once.
func Terminal(class string, err error) error {
	return &RouteError{Class: class, Err: err, terminal: true}
}

// Transient marks a failure worth retrying after a backoff, with a class.
func Transient(class string, err error) error { return &RouteError{Class: class, Err: err} }

// IsTerminal reports whether err is (or wraps) a Terminal route error.
func IsTerminal(err error) bool {
	var re *RouteError
	return errors.As(err, &re) && re.terminal
}

// maxSummary bounds last_error_summary (VARCHAR(1024) characters; kept
// in bytes here so any text fits).
const maxSummary = 1024

// classOf and summarize turn an error into the receipt's sanitized
// failure fields: valid UTF-8, control characters as spaces, bounded.
func classOf(err error) string {
	var re *RouteError
	if errors.As(err, &re) && re.Class != "" {
		return sanitize(re.Class, 64)
	}
	return "route_failed"
}

func summarize(err error) string {
	var re *RouteError
	if errors.As(err, &re) {
		err = re.Err
	}
	if err == nil {
		return ""
	}
	return sanitize(err.Error(), maxSummary)
}

func sanitize(s string, maxBytes int) string {
	s = strings.ToValidUTF8(s, "?")
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) <= maxBytes {
		return s
	}
	cut := maxBytes - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
