package limits

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// pageLocks orders candidates ending last first (then by key), drops the
// ended ones (until <= now), those q.Keep rejects and those up to q.Cursor,
// and returns the first q.Limit. Its cursors are "u<until ms>:<key>".
func pageLocks(cands []LockState, nowMs int64, q *LockQuery) (LockPage, error) {
	var afterUntil int64
	var afterKey string
	if q.Cursor != "" {
		var err error
		afterUntil, afterKey, err = parseLockCursor(q.Cursor)
		if err != nil {
			return LockPage{}, err
		}
	}
	keep := cands[:0]
	for _, st := range cands {
		if st.Until.UnixMilli() <= nowMs || (q.Keep != nil && !q.Keep(st)) {
			continue
		}
		keep = append(keep, st)
	}
	slices.SortFunc(keep, compareLocks)
	keep = slices.CompactFunc(keep, func(a, b LockState) bool { return a.Key == b.Key })
	start := 0
	if q.Cursor != "" {
		start, _ = slices.BinarySearchFunc(keep, LockState{}, func(st LockState, _ LockState) int {
			// Position of the first lock after the cursor.
			if c := cmp.Compare(afterUntil, st.Until.UnixMilli()); c != 0 {
				return c
			}
			if st.Key <= afterKey {
				return -1
			}
			return 1
		})
	}
	keep = keep[start:]
	page := LockPage{Locks: []LockState{}}
	if len(keep) > q.Limit {
		keep = keep[:q.Limit]
		last := keep[len(keep)-1]
		page.Next = "u" + strconv.FormatInt(last.Until.UnixMilli(), 10) + ":" + last.Key
	}
	page.Locks = append(page.Locks, keep...)
	return page, nil
}

// compareLocks orders ending last first, then by key.
func compareLocks(a, b LockState) int {
	if c := b.Until.Compare(a.Until); c != 0 {
		return c
	}
	return cmp.Compare(a.Key, b.Key)
}

// ErrBadCursor (wrapped) answers a LockQuery.Cursor this store did not
// issue: in a FailoverStore, a cursor of the primary's listing continued
// on the fallback's or the other way round, when the breaker changed
// between two pages.
var ErrBadCursor = errors.New("not a cursor of this store's listing")

func parseLockCursor(c string) (int64, string, error) {
	rest, ok := strings.CutPrefix(c, "u")
	ms, key, ok2 := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || !ok2 || err != nil {
		return 0, "", fmt.Errorf("lock cursor %q: %w", c, ErrBadCursor)
	}
	return n, key, nil
}

// matchPattern reports whether key matches pattern, in which '*' matches
// any run of bytes and every other byte itself.
func matchPattern(pattern, key string) bool {
	parts := strings.Split(pattern, "*")
	if len(parts) == 1 {
		return pattern == key
	}
	if !strings.HasPrefix(key, parts[0]) {
		return false
	}
	key = key[len(parts[0]):]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(key, p)
		if i < 0 {
			return false
		}
		key = key[i+len(p):]
	}
	return strings.HasSuffix(key, parts[len(parts)-1])
}

// redisGlob turns a '*'-only pattern into a Redis glob: every other glob
// character is escaped.
func redisGlob(pattern string) string {
	var b strings.Builder
	for i := 0; i < len(pattern); i++ {
		switch c := pattern[i]; c {
		case '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
