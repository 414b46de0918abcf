package limits

import (
	"context"
	"errors"
	"hash/maphash"
	"slices"
	"sync"
	"time"
)

// MemoryConfig configures a MemoryStore. Zero fields get the defaults
// stated on each field.
type MemoryConfig struct {
	// Now is the store's clock, read once per call and truncated to whole
	// milliseconds. Default time.Now.
	Now func() time.Time
	// Shards is the number of independently locked partitions of the key
	// space. Default 64.
	Shards int
	// SweepInterval is how often a background sweep drops idle keys (empty
	// windows, ended lock records, expired trust records). Default 1m.
	SweepInterval time.Duration
}

// MemoryStore is a Store kept in process memory: the embedded default when
// no Redis is configured, and the failover store's fallback. It is exact
// and strict within one process; it knows nothing of other Guard instances.
// Every decision is one critical section over the shards of the keys it
// touches, taken in ascending shard order, so decisions are atomic and
// cannot deadlock. Memory stays bounded by the live state: idle keys are
// dropped on access and by a background sweep.
type MemoryStore struct {
	now    func() time.Time
	seed   maphash.Seed
	shards []memShard

	closeOnce sync.Once
	closed    chan struct{}
	swept     sync.WaitGroup
}

// memShard is one partition of the key space. Logs, lock records and trust
// records live in separate maps; one mutex guards all three.
type memShard struct {
	mu    sync.Mutex
	logs  map[string]*memLog
	locks map[string]*memLock
	trust map[string]int64 // key -> expiry, unix ms
	// others are counters, buckets and distinct sets (memory_kinds.go).
	others map[string]*memOther
	// records are reservation records (reserve_failures).
	records map[string]*memRecord
	_       [64]byte // keeps hot mutexes on separate cache lines
}

// errMemoryClosed is returned by every method called after Close.
var errMemoryClosed = errors.New("memory store closed")

// NewMemory returns a MemoryStore and starts its background sweeper, which
// Close stops. It never fails: invalid config values get the defaults.
func NewMemory(cfg MemoryConfig) *MemoryStore {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Shards <= 0 {
		cfg.Shards = 64
	}
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = time.Minute
	}
	s := &MemoryStore{
		now:    cfg.Now,
		seed:   maphash.MakeSeed(),
		shards: make([]memShard, cfg.Shards),
		closed: make(chan struct{}),
	}
	for i := range s.shards {
		s.shards[i].logs = make(map[string]*memLog)
		s.shards[i].locks = make(map[string]*memLock)
		s.shards[i].trust = make(map[string]int64)
		s.shards[i].others = make(map[string]*memOther)
		s.shards[i].records = make(map[string]*memRecord)
	}
	s.swept.Add(1)
	go s.sweepLoop(cfg.SweepInterval)
	return s
}

// Ping returns nil while the store is open.
func (s *MemoryStore) Ping(ctx context.Context) error {
	return s.open()
}

// Close stops the sweeper and makes every later call fail. It is
// idempotent and always returns nil.
func (s *MemoryStore) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	s.swept.Wait()
	return nil
}

func (s *MemoryStore) open() error {
	select {
	case <-s.closed:
		return errMemoryClosed
	default:
		return nil
	}
}

// nowMs reads the clock once for a call.
func (s *MemoryStore) nowMs() int64 { return s.now().UnixMilli() }

// shardOf maps a key to its shard index.
func (s *MemoryStore) shardOf(key string) int {
	return int(maphash.String(s.seed, key) % uint64(len(s.shards)))
}

// Shard sets: the indices of the shards one call touches, in a slice that
// callers start from a stack array (buf[:0]) so that typical calls, a
// handful of keys, allocate nothing. The helpers take and return the slice
// (rather than a pointer to it) so it can stay on the stack.

// withShard adds key's shard to set.
func (s *MemoryStore) withShard(set []int, key string) []int {
	return append(set, s.shardOf(key))
}

// lockShards takes every shard's mutex in set in ascending index order,
// each once, so concurrent multi-key calls cannot deadlock. It returns the
// sorted, deduplicated set for unlockShards.
func (s *MemoryStore) lockShards(set []int) []int {
	slices.Sort(set)
	set = slices.Compact(set)
	for _, i := range set {
		s.shards[i].mu.Lock()
	}
	return set
}

func (s *MemoryStore) unlockShards(set []int) {
	for _, i := range slices.Backward(set) {
		s.shards[i].mu.Unlock()
	}
}

// shard returns the shard holding key; the caller holds its lock.
func (s *MemoryStore) shard(key string) *memShard {
	return &s.shards[s.shardOf(key)]
}

// memTime converts store milliseconds to a time.Time in UTC.
func memTime(ms int64) time.Time { return time.UnixMilli(ms).UTC() }

// memMs converts a duration to whole milliseconds, truncating.
func memMs(d time.Duration) int64 { return d.Milliseconds() }

// memDur converts whole milliseconds to a Duration.
func memDur(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
