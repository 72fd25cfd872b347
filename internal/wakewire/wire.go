// Package wakewire is the wire format and the sending half of laneq's
// cross-process wakes. It sits below runtime/workqueue, which sends every
// announcement through a Publisher, and runtime/wake, whose Hub receives
// (and, when one is attached to a Queue, sends) them; neither imports the
// other's half.
package wakewire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// A wake datagram names the endpoint it is for and the scope that got
// work, carries the sender's wall-clock time and a random nonce, and ends
// with an HMAC-SHA256 tag over everything before it, made with the
// receiving endpoint's own key (from its wake_endpoint row):
//
//	"LQW1" | flags(1) | sent unix µs (8) | nonce (16) |
//	len(endpoint)(1) endpoint | len(scope)(2) scope | tag (32)
//
// It carries no payload and no work ids: all a valid one can do is make
// the receiver look at its queue once (and, with the look-far flag, look
// for the next due time as far as its backstop).
const (
	magic        = "LQW1"
	flagSelfTest = 1 << 0
	flagLookFar  = 1 << 1 // something announced is due later: look ahead
	flagRewind   = 1 << 2 // its commit came late: scan from the front
	// NonceSize is the length of a datagram's nonce.
	NonceSize  = 16
	tagSize    = sha256.Size
	headerSize = len(magic) + 1 + 8 + NonceSize
	// MaxDatagram bounds a valid datagram (longest endpoint id and scope).
	MaxDatagram = headerSize + 1 + 64 + 2 + 128 + tagSize
)

// Message is a wake datagram's content.
type Message struct {
	SelfTest bool
	LookFar  bool
	Rewind   bool
	SentUs   int64
	Nonce    [NonceSize]byte
	Endpoint string
	Scope    string
}

// Append appends the datagram, tagged with key, to b.
func (m Message) Append(b []byte, key []byte) []byte {
	b = append(b, magic...)
	var flags byte
	if m.SelfTest {
		flags |= flagSelfTest
	}
	if m.LookFar {
		flags |= flagLookFar
	}
	if m.Rewind {
		flags |= flagRewind
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(m.SentUs))
	b = append(b, m.Nonce[:]...)
	b = append(b, byte(len(m.Endpoint)))
	b = append(b, m.Endpoint...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Scope)))
	b = append(b, m.Scope...)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(b)
}

// ErrMalformed reports a datagram that is not a wake datagram.
var ErrMalformed = errors.New("wake: malformed datagram")

// Parse reads a datagram's fields without checking its tag: the tag's key
// belongs to the endpoint the datagram names, which the caller looks up.
func Parse(b []byte) (Message, error) {
	var m Message
	if len(b) < headerSize+1+2+tagSize || len(b) > MaxDatagram || string(b[:len(magic)]) != magic {
		return m, ErrMalformed
	}
	p := b[len(magic):]
	m.SelfTest = p[0]&flagSelfTest != 0
	m.LookFar = p[0]&flagLookFar != 0
	m.Rewind = p[0]&flagRewind != 0
	m.SentUs = int64(binary.BigEndian.Uint64(p[1:9]))
	copy(m.Nonce[:], p[9:9+NonceSize])
	p = p[9+NonceSize:]
	n := int(p[0])
	if len(p) < 1+n+2 {
		return m, ErrMalformed
	}
	m.Endpoint, p = string(p[1:1+n]), p[1+n:]
	n = int(binary.BigEndian.Uint16(p))
	if len(p) != 2+n+tagSize {
		return m, fmt.Errorf("%w: length", ErrMalformed)
	}
	m.Scope = string(p[2 : 2+n])
	return m, nil
}

// Verify checks b's tag with key in constant time.
func Verify(b, key []byte) bool {
	if len(b) < tagSize {
		return false
	}
	body, tag := b[:len(b)-tagSize], b[len(b)-tagSize:]
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), tag)
}

// NewNonce returns a random nonce.
func NewNonce() [NonceSize]byte {
	var n [NonceSize]byte
	_, _ = rand.Read(n[:]) // crypto/rand.Read never fails (Go 1.24+)
	return n
}
