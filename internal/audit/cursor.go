package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// ErrBadCursor is returned (wrapped) by CursorCodec.Decode for a cursor
// Guard did not issue: malformed, tampered or signed with another secret.
var ErrBadCursor = errors.New("invalid cursor")

const (
	cursorVersion = 1
	cursorMACLen  = 16 // truncated HMAC-SHA256: 128 bits is ample for tamper detection
	maxCursorID   = 256
)

// CursorCodec turns a Cursor into an opaque string for next_cursor and back.
// The string is base64url (no padding) of a version byte, the time in Unix
// nanoseconds, the id, and an HMAC-SHA256 over all of it, so clients cannot
// forge positions or learn the layout. It is safe for concurrent use.
type CursorCodec struct {
	secret []byte
}

// NewCursorCodec returns a codec signing with secret. Every Guard instance
// behind one load balancer must use the same secret (e.g. derived from
// key_secret) so that any instance accepts another's cursors; an empty
// secret still works but makes cursors forgeable.
func NewCursorCodec(secret []byte) *CursorCodec {
	return &CursorCodec{secret: append([]byte(nil), secret...)}
}

// Encode returns the opaque form of c, or "" for a nil cursor.
func (k *CursorCodec) Encode(c *Cursor) string {
	if c == nil {
		return ""
	}
	id := c.ID
	if len(id) > maxCursorID {
		id = id[:maxCursorID] // ids are ULIDs; never reached in practice
	}
	b := make([]byte, 0, 1+8+len(id)+cursorMACLen)
	b = append(b, cursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(c.At.UnixNano()))
	b = append(b, id...)
	b = append(b, k.mac(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode parses a string made by Encode with the same secret. Anything
// else is an error wrapping ErrBadCursor.
func (k *CursorCodec) Decode(s string) (*Cursor, error) {
	if len(s) > base64.RawURLEncoding.EncodedLen(1+8+maxCursorID+cursorMACLen) {
		return nil, ErrBadCursor
	}
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 1+8+1+cursorMACLen {
		return nil, ErrBadCursor
	}
	body, sum := b[:len(b)-cursorMACLen], b[len(b)-cursorMACLen:]
	if !hmac.Equal(sum, k.mac(body)) || body[0] != cursorVersion {
		return nil, ErrBadCursor
	}
	ns := int64(binary.BigEndian.Uint64(body[1:9]))
	return &Cursor{At: time.Unix(0, ns).UTC(), ID: string(body[9:])}, nil
}

func (k *CursorCodec) mac(b []byte) []byte {
	h := hmac.New(sha256.New, k.secret)
	h.Write([]byte("guard audit cursor\x00")) // domain separation from other uses of the secret
	h.Write(b)
	return h.Sum(nil)[:cursorMACLen]
}
