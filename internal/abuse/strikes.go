package abuse

import (
	"sync"

	"github.com/guardhq/guard/internal/limits"
)

// strikeCacheSize bounds the recent strikes a Guard remembers the
// identifiers of (a few hundred KiB at most).
const strikeCacheSize = 4096

// strikeCache remembers the identifiers behind recently struck locks, so a
// lockout listing names them at once, without waiting for the audit trail.
// Raw identifiers never go to Redis; this in-process map is where they
// live. It forgets the oldest strike first.
type strikeCache struct {
	mu    sync.Mutex
	byKey map[string]names
	order []string // ring of keys, oldest at next
	next  int
}

func newStrikeCache(size int) *strikeCache {
	return &strikeCache{byKey: make(map[string]names, size), order: make([]string, 0, size)}
}

// remember records the request's identifiers for each struck lock.
func (c *strikeCache) remember(struck []limits.LockState, id *identity) {
	n := namesOf(id)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range struck {
		if _, ok := c.byKey[st.Key]; ok {
			c.byKey[st.Key] = n
			continue
		}
		if len(c.order) < cap(c.order) {
			c.order = append(c.order, st.Key)
		} else {
			delete(c.byKey, c.order[c.next])
			c.order[c.next] = st.Key
			c.next = (c.next + 1) % len(c.order)
		}
		c.byKey[st.Key] = n
	}
}

func (c *strikeCache) get(key string) (names, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.byKey[key]
	return n, ok
}
