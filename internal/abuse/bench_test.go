package abuse

import (
	"context"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// Guard.Check against the bare store it drives, in the same run, so the
// ratio is Guard's own overhead (normalising, hashing, lists, mapping,
// auditing) on any machine:
//
//	go test -run '^$' -bench 'GuardCheck' -benchtime=2s ./internal/abuse/
//
// Attempts spread over benchUsers users from one address range so logs
// stay short and attempts are allowed (the path that writes).

const benchUsers = 4096

func benchPolicy() Policy {
	return Policy{Actions: map[string]Action{
		"login": {
			Limits: []Rule{
				{Dimension: DimIP, Limit: 1 << 30, Window: time.Second},
				{Dimension: DimUser, Limit: 1 << 30, Window: time.Second},
			},
			Failures: []Rule{
				{Dimension: DimUserIP, Limit: 10, Window: 15 * time.Minute},
				{Dimension: DimUser, Limit: 50, Window: 24 * time.Hour},
			},
			Lockout: Lockout{Ladder: []time.Duration{time.Minute}},
		},
	}}
}

// discardRecorder drops events, as a non-blocking writer's enqueue costs
// next to nothing; the audit package measures its own writer.
type discardRecorder struct{}

func (discardRecorder) Record(audit.Event) {}

func BenchmarkGuardCheck(b *testing.B) {
	users := make([]string, benchUsers)
	ips := make([]string, benchUsers)
	for i := range users {
		users[i] = "user" + strconv.Itoa(i) + "@example.com"
		ips[i] = "203.0." + strconv.Itoa(i/256%256) + "." + strconv.Itoa(i%256)
	}
	run := func(b *testing.B, st limits.Store, prefix string, direct bool) {
		g, err := New(slog.New(slog.DiscardHandler), Config{Policy: benchPolicy(), KeySecret: testSecret, KeyPrefix: prefix},
			st, discardRecorder{}, nil)
		if err != nil {
			b.Fatalf("New: %v", err)
		}
		// The raw request has the shape Guard sends: two rules, two locks.
		raw := func(i int64) *limits.CheckRequest {
			k := strconv.FormatInt(i%benchUsers, 10)
			return &limits.CheckRequest{
				Rules: []limits.Rule{
					{Key: prefix + "log:login/ip:" + k, Limit: 1 << 30, Window: time.Second},
					{Key: prefix + "log:login/user:" + k, Limit: 1 << 30, Window: time.Second},
				},
				Locks: []limits.LockRef{{Key: prefix + "lock:login:user:" + k, SpareIfTrusted: true}, {Key: prefix + "lock:login:user+ip:" + k}},
				Cost:  1, Nonce: "n" + strconv.FormatInt(i, 36),
			}
		}
		var seq atomic.Int64
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				i := seq.Add(1)
				if direct {
					if _, err := st.Check(ctx, raw(i)); err != nil {
						b.Error(err)
						return
					}
					continue
				}
				j := i % benchUsers
				d, err := g.Check(ctx, CheckInput{Action: "login", Subject: Subject{User: &users[j], IP: &ips[j]}})
				if err != nil || !d.Allowed {
					b.Errorf("check: %v %+v", err, d)
					return
				}
			}
		})
	}
	b.Run("memory/guard", func(b *testing.B) {
		st := limits.NewMemory(limits.MemoryConfig{})
		defer st.Close()
		run(b, st, "guardbench:", false)
	})
	b.Run("memory/store", func(b *testing.B) {
		st := limits.NewMemory(limits.MemoryConfig{})
		defer st.Close()
		run(b, st, "guardbench:", true)
	})
	for _, direct := range []bool{false, true} {
		name := map[bool]string{false: "redis/guard", true: "redis/store"}[direct]
		b.Run(name, func(b *testing.B) {
			url, prefix := testenv.Redis(b)
			client := testenv.RedisClient(b, url)
			b.SetParallelism(8) // concurrent requests over one client
			run(b, limits.NewRedis(client, limits.RedisStoreConfig{}), prefix, direct)
		})
	}
}
