package limits

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lockouts lists a page of active lockouts; now is Redis TIME. With
// q.Index it reads that lockout index and the records it names (one
// identity's locks: a few round trips whatever the number of lockouts).
// Without, it SCANs every node (every master on Cluster) for lock records
// matching q.Pattern, one SCAN batch after another, in node order; such a
// page holds the lockouts of the keys it scanned, ending last first, and a
// key moved by a rehash while the listing goes on may be listed twice or,
// as SCAN allows, not at all. It is an admin read: give it a timeout of its
// own, not the decision budget.
func (s *RedisStore) Lockouts(ctx context.Context, q *LockQuery) (LockPage, error) {
	if err := validateLockQuery(q); err != nil {
		return LockPage{}, fmt.Errorf("lockouts: %w", err)
	}
	t, err := s.client.Time(ctx).Result()
	if err != nil {
		return LockPage{}, redisError("read redis time", err)
	}
	now := t.UnixMilli()
	if q.Index != "" {
		keys, err := s.client.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: q.Index, ByScore: true, Start: "(" + strconv.FormatInt(now, 10), Stop: "+inf",
		}).Result()
		if err != nil {
			return LockPage{}, redisError("read lockout index", err)
		}
		locks, err := s.readLocks(ctx, s.client, keys)
		if err != nil {
			return LockPage{}, err
		}
		page, err := pageLocks(locks, now, q)
		if err != nil {
			return LockPage{}, err
		}
		return page, s.partnerLevels(ctx, page.Locks, q.Partner)
	}
	page, err := s.scanLockouts(ctx, q, now)
	if err != nil {
		return LockPage{}, err
	}
	return page, s.partnerLevels(ctx, page.Locks, q.Partner)
}

// partnerLevels gives each manual record of a page the level of its
// strike record, when that exists (LockQuery.Partner): one pipeline for
// the page.
func (s *RedisStore) partnerLevels(ctx context.Context, locks []LockState, partner func(string) string) error {
	if partner == nil {
		return nil
	}
	of := map[string][]int{} // strike record key -> its manual records in locks
	var keys []string
	for i := range locks {
		if k := partner(locks[i].Key); k != "" {
			if of[k] == nil {
				keys = append(keys, k)
			}
			of[k] = append(of[k], i)
		}
	}
	strikes, err := s.readLocks(ctx, s.client, keys)
	if err != nil {
		return err
	}
	for _, st := range strikes {
		for _, i := range of[st.Key] {
			locks[i].Level = st.Level
		}
	}
	return nil
}

// readLocks reads lock records (pipelined; on Cluster split by node);
// keys without a record are left out.
func (s *RedisStore) readLocks(ctx context.Context, c redis.Cmdable, keys []string) ([]LockState, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.StringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Get(ctx, k)
	}
	// Exec's error is the first command's that failed, redis.Nil for a
	// missing record: each command's own says whether it was read.
	_, _ = pipe.Exec(ctx)
	out := make([]LockState, 0, len(keys))
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && err != redis.Nil {
			return nil, redisError("read lock records", err)
		}
		if st, ok := parseLockRecord(keys[i], cmd.Val()); ok {
			out = append(out, st)
		}
	}
	return out, nil
}

// parseLockRecord reads "level|since|until|last|info".
func parseLockRecord(key, v string) (LockState, bool) {
	f := strings.SplitN(v, "|", 5)
	if len(f) != 5 {
		return LockState{}, false
	}
	level, e1 := strconv.Atoi(f[0])
	since, e2 := strconv.ParseInt(f[1], 10, 64)
	until, e3 := strconv.ParseInt(f[2], 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		return LockState{}, false
	}
	return LockState{Key: key, Level: level, Since: time.UnixMilli(since), Until: time.UnixMilli(until), Info: f[4]}, true
}

// scanBatch is how many keys one SCAN call looks at.
const scanBatch = 1000

// scanLockouts pages through the lock records of every node. Its cursor is
// "s<node>:<scan cursor>:<last key>": the node (masters sorted by
// address), the SCAN cursor of the batch to read, and the key of that batch
// (keys sorted) after which to go on, "" for its first. Sorting makes a
// resumed batch safe from keys that expired or appeared in between: it
// resumes after a key, not after a count. A full page scans on to the next
// active lockout and its cursor resumes there, so Next is "" exactly when
// no active lockout follows (as /v1/audit's next_cursor), never a cursor
// to an empty page.
func (s *RedisStore) scanLockouts(ctx context.Context, q *LockQuery, now int64) (LockPage, error) {
	var from scanPos
	if q.Cursor != "" {
		var err error
		if from.node, from.cursor, from.after, err = parseScanCursor(q.Cursor); err != nil {
			return LockPage{}, err
		}
	}
	nodes, err := s.nodes(ctx)
	if err != nil {
		return LockPage{}, err
	}
	page := LockPage{Locks: []LockState{}}
	err = s.scanLocks(ctx, nodes, from, redisGlob(q.Pattern), func(st LockState, at scanPos) bool {
		if st.Until.UnixMilli() <= now || (q.Keep != nil && !q.Keep(st)) {
			return true
		}
		if len(page.Locks) == q.Limit {
			page.Next = "s" + strconv.Itoa(at.node) + ":" + strconv.FormatUint(at.cursor, 10) + ":" + at.after
			return false
		}
		page.Locks = append(page.Locks, st)
		return true
	})
	if err != nil {
		return LockPage{}, err
	}
	slices.SortFunc(page.Locks, compareLocks)
	return page, nil
}

// scanPos is where a scan resumes: on nodes[node], the SCAN batch at
// cursor, from the first key (sorted) after after.
type scanPos struct {
	node   int
	cursor uint64
	after  string
}

// scanLocks calls yield with every lock record matching glob from from on,
// node after node, batch after batch, each batch in key order, and with the
// position that resumes at that record, until yield returns false.
func (s *RedisStore) scanLocks(ctx context.Context, nodes []redis.Cmdable, from scanPos, glob string, yield func(LockState, scanPos) bool) error {
	for node, cursor, after := from.node, from.cursor, from.after; node < len(nodes); node, cursor, after = node+1, 0, "" {
		c := nodes[node]
		for {
			keys, next, err := c.Scan(ctx, cursor, glob, scanBatch).Result()
			if err != nil {
				return redisError("scan lock records", err)
			}
			slices.Sort(keys)
			keys = slices.Compact(keys)
			if after != "" {
				i, found := slices.BinarySearch(keys, after)
				if found {
					i++
				}
				keys = keys[i:]
			}
			locks, err := s.readLocks(ctx, c, keys)
			if err != nil {
				return err
			}
			// readLocks keeps the keys' order, leaving out keys without a
			// record; prev is the key before each record in the batch.
			prev := after
			j := 0
			for _, k := range keys {
				if j < len(locks) && locks[j].Key == k {
					if !yield(locks[j], scanPos{node, cursor, prev}) {
						return nil
					}
					j++
				}
				prev = k
			}
			after = ""
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	return nil
}

func parseScanCursor(c string) (node int, cursor uint64, after string, err error) {
	f := strings.SplitN(strings.TrimPrefix(c, "s"), ":", 3)
	if !strings.HasPrefix(c, "s") || len(f) != 3 {
		return 0, 0, "", fmt.Errorf("lock cursor %q: %w", c, ErrBadCursor)
	}
	node, e1 := strconv.Atoi(f[0])
	cursor, e2 := strconv.ParseUint(f[1], 10, 64)
	if e1 != nil || e2 != nil || node < 0 {
		return 0, 0, "", fmt.Errorf("lock cursor %q: %w", c, ErrBadCursor)
	}
	return node, cursor, f[2], nil
}

// nodes are the servers that hold keys: the one node, or every Cluster
// master sorted by address (so a cursor's node number means the same
// server on the next page while the topology holds).
func (s *RedisStore) nodes(ctx context.Context) ([]redis.Cmdable, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return []redis.Cmdable{s.client}, nil
	}
	var mu sync.Mutex
	var masters []*redis.Client
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		mu.Lock()
		masters = append(masters, m)
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, redisError("list cluster masters", err)
	}
	slices.SortFunc(masters, func(a, b *redis.Client) int { return strings.Compare(a.Options().Addr, b.Options().Addr) })
	out := make([]redis.Cmdable, len(masters))
	for i, m := range masters {
		out[i] = m
	}
	return out, nil
}
