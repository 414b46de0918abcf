package limits

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestPendingHoldersSaturate: a pending set counts at most pendMaxHolders
// holds of one value (redis.lua's 2 bytes) in both stores, so both give
// the value up after as many successes (the memory store counted on, and
// held it longer). The set is seeded one hold short of the cap.
func TestPendingHoldersSaturate(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	rs, client, _ := newRedisTestStore(t, redisURL, prefix)
	ms := NewMemory(MemoryConfig{})
	t.Cleanup(func() { ms.Close() })
	ctx := context.Background()
	p := prefix + "sat:"
	value := confValue("u1")
	first := p + "r0"
	esc := Escalation{Failures: []FailureRule{{
		Key: p + "d", Pending: p + "q", Distinct: value, Limit: 2, Window: time.Hour,
		LockKey: p + "lock", Info: "i",
	}}, Ladder: []time.Duration{time.Minute}}

	// Redis: one 22-byte record, count pendMaxHolders-1, first's token.
	sum := sha1.Sum([]byte(first))
	rec := make([]byte, 22)
	stamp := uint64(time.Now().UnixMilli())
	for i := range 6 {
		rec[i] = byte(stamp >> (8 * (5 - i)))
	}
	copy(rec[6:14], value)
	binary.BigEndian.PutUint16(rec[14:16], pendMaxHolders-1)
	copy(rec[16:22], sum[:6])
	if err := client.Set(ctx, p+"q", rec, time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// Memory: the same record.
	sh := ms.shard(p + "q")
	sh.mu.Lock()
	sh.others[p+"q"] = &memOther{set: []memMember{{ts: time.Now().UnixMilli(), v: value, n: pendMaxHolders - 1, tok: first}},
		expires: time.Now().Add(time.Hour).UnixMilli()}
	sh.mu.Unlock()

	for _, s := range []Store{rs, ms} {
		for _, r := range []string{p + "r1", p + "r2"} {
			res, err := s.Check(ctx, &CheckRequest{Locks: []LockRef{{Key: p + "lock"}}, Cost: 1,
				Reserve: &Reservation{Escalation: esc, Records: []string{r}, TTL: time.Hour}})
			if err != nil || !res.Allowed || len(res.Struck) != 0 {
				t.Fatalf("%T: check under %s: %+v, %v; want allowed, nothing struck", s, r, res, err)
			}
		}
	}
	raw, err := client.Get(ctx, p+"q").Bytes()
	if err != nil || len(raw) != 22 {
		t.Fatalf("Redis pending set: %q, %v", raw, err)
	}
	if n := binary.BigEndian.Uint16(raw[14:16]); n != pendMaxHolders {
		t.Errorf("Redis: %d holders, want %d", n, pendMaxHolders)
	}
	sh.mu.Lock()
	n := sh.others[p+"q"].set[0].n
	sh.mu.Unlock()
	if n != pendMaxHolders {
		t.Errorf("memory: %d holders after two holds more, want %d as on Redis", n, pendMaxHolders)
	}
}
