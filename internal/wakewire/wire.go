package wake

import (
	"crypto/hmac"
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
	nonceSize    = 16
	tagSize      = sha256.Size
	headerSize   = len(magic) + 1 + 8 + nonceSize
	// MaxDatagram bounds a valid datagram (longest endpoint id and scope).
	MaxDatagram = headerSize + 1 + 64 + 2 + 128 + tagSize
)

// message is a wake datagram's content.
type message struct {
	selfTest bool
	lookFar  bool
	sentUs   int64
	nonce    [nonceSize]byte
	endpoint string
	scope    string
}

func (m message) append(b []byte, key []byte) []byte {
	b = append(b, magic...)
	var flags byte
	if m.selfTest {
		flags |= flagSelfTest
	}
	if m.lookFar {
		flags |= flagLookFar
	}
	b = append(b, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(m.sentUs))
	b = append(b, m.nonce[:]...)
	b = append(b, byte(len(m.endpoint)))
	b = append(b, m.endpoint...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.scope)))
	b = append(b, m.scope...)
	mac := hmac.New(sha256.New, key)
	mac.Write(b)
	return mac.Sum(b)
}

var errMalformed = errors.New("wake: malformed datagram")

// parse reads a datagram's fields without checking its tag: the tag's key
// belongs to the endpoint the datagram names, which the caller looks up.
func parse(b []byte) (message, error) {
	var m message
	if len(b) < headerSize+1+2+tagSize || len(b) > MaxDatagram || string(b[:len(magic)]) != magic {
		return m, errMalformed
	}
	p := b[len(magic):]
	m.selfTest = p[0]&flagSelfTest != 0
	m.lookFar = p[0]&flagLookFar != 0
	m.sentUs = int64(binary.BigEndian.Uint64(p[1:9]))
	copy(m.nonce[:], p[9:9+nonceSize])
	p = p[9+nonceSize:]
	n := int(p[0])
	if len(p) < 1+n+2 {
		return m, errMalformed
	}
	m.endpoint, p = string(p[1:1+n]), p[1+n:]
	n = int(binary.BigEndian.Uint16(p))
	if len(p) != 2+n+tagSize {
		return m, fmt.Errorf("%w: length", errMalformed)
	}
	m.scope = string(p[2 : 2+n])
	return m, nil
}

// verify checks b's tag with key in constant time.
func verify(b, key []byte) bool {
	if len(b) < tagSize {
		return false
	}
	body, tag := b[:len(b)-tagSize], b[len(b)-tagSize:]
	mac := hmac.New(sha256.New, key)
	mac.Write(body)
	return hmac.Equal(mac.Sum(nil), tag)
}
