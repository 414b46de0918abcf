package abuse

import (
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// Lockout listing page sizes (GET /v1/lockouts limit).
const (
	DefaultLockoutLimit = 100
	MaxLockoutLimit     = 1000
)

// lockCursorMAC is how many bytes of HMAC-SHA256 a cursor carries.
const lockCursorMAC = 16

// Lockouts lists the active lockouts one page at a time: the entries of the filter,
// ending last first (ties in a fixed order), at most f.Limit of them after
// f.Cursor, and the cursor of the next page. Paging is by key (the end and
// the lock's identity), so entries that appear or end between two pages
// shift no other entry.
//
// Errors: as allLockouts, plus *InputError for a limit outside
// 1..MaxLockoutLimit (field "limit") or a cursor LockoutsPage did not issue
// (field "cursor").
func (g *Guard) Lockouts(ctx context.Context, f LockoutFilter) (LockoutPage, error) {
	limit := f.Limit
	if limit == 0 {
		limit = DefaultLockoutLimit
	}
	if limit < 1 || limit > MaxLockoutLimit {
		return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "limit",
			Message: fmt.Sprintf("limit must be from 1 to %d", MaxLockoutLimit)}
	}
	var after *lockCursor
	if f.Cursor != "" {
		c, ok := g.decodeLockCursor(f.Cursor)
		if !ok {
			return LockoutPage{}, &InputError{Code: CodeInvalidRequest, Field: "cursor", Message: "cursor is not one Guard issued"}
		}
		after = &c
	}
	all, err := g.allLockouts(ctx, f)
	if err != nil {
		return LockoutPage{}, err
	}
	start := 0
	if after != nil {
		start = len(all)
		for i, l := range all {
			if u := l.Until.UnixMilli(); u < after.until || u == after.until && l.sortKey > after.key {
				start = i
				break
			}
		}
	}
	page := LockoutPage{Lockouts: all[start:]}
	if len(page.Lockouts) > limit {
		page.Lockouts = page.Lockouts[:limit:limit]
		last := page.Lockouts[limit-1]
		page.Next = g.encodeLockCursor(lockCursor{until: last.Until.UnixMilli(), key: last.sortKey})
	}
	return page, nil
}

// sortLockouts orders a listing: ending last first, then by lock identity.
func sortLockouts(out []ActiveLockout) {
	slices.SortFunc(out, func(a, b ActiveLockout) int {
		if c := cmp.Compare(b.Until.UnixMilli(), a.Until.UnixMilli()); c != 0 {
			return c
		}
		return strings.Compare(a.sortKey, b.sortKey)
	})
}

// lockCursor is the position after the last entry of a page.
type lockCursor struct {
	until int64 // unix ms
	key   string
}

// encodeLockCursor is base64url(until ms | key | HMAC): opaque to clients,
// and tamper-evident, since only the holder of the key secret can sign.
func (g *Guard) encodeLockCursor(c lockCursor) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(c.until))
	b = append(b, c.key...)
	b = append(b, g.lockCursorSum(b)...)
	return base64.RawURLEncoding.EncodeToString(b)
}

func (g *Guard) decodeLockCursor(s string) (lockCursor, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 8+lockCursorMAC || len(b) > 8+1024+lockCursorMAC {
		return lockCursor{}, false
	}
	data, sum := b[:len(b)-lockCursorMAC], b[len(b)-lockCursorMAC:]
	if !hmac.Equal(sum, g.lockCursorSum(data)) {
		return lockCursor{}, false
	}
	return lockCursor{until: int64(binary.BigEndian.Uint64(data)), key: string(data[8:])}, true
}

func (g *Guard) lockCursorSum(data []byte) []byte {
	m := hmac.New(sha256.New, g.keys.cursorKey)
	m.Write(data)
	return m.Sum(nil)[:lockCursorMAC]
}

// isManualKey reports whether key is a manual lockout record.
func (g *Guard) isManualKey(key string) bool {
	return strings.HasPrefix(key, g.keys.prefix+"mlock:")
}

// MinManualLock and MaxManualLock bound a manual lockout's duration (the
// store accepts from 1ms; the API's floor is a second).
const (
	MinManualLock = time.Second
	MaxManualLock = limits.MaxManualLock
)
