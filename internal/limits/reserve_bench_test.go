package limits

import (
	"context"
	"crypto/rand"
	"testing"
	"time"
)

// BenchmarkRedisReserve measures what a reservation (reserve_failures)
// adds to a decision, with the key shapes internal/abuse sends for the
// built-in otp_verify (2 rules, the user's lock and 2 manual-lockout
// records, one failure rule, one record), each call a new user so every
// call creates its keys, serially (one FCALL per call, no batching):
//
//	go test -run '^$' -bench RedisReserve -benchtime=2000x ./internal/limits/
//
// Wall time on a shared machine moves; the figure to trust is Redis's own
// CPU instructions per call, from redis-server run under callgrind
// (scripts/reserve-cost.sh). record-B is MEMORY USAGE of one reservation
// record.
//
// The +distinct cases add a distinct failure rule on the address (ip,
// distinct user: password spraying) with its pending set, and the
// address's lock record among the locks, as internal/abuse sends them for
// such a policy; each call then comes from a new address too (else the
// set would fill and strike), and the +fresh-ip cases are the same calls
// without that rule, to compare with.
func BenchmarkRedisReserve(b *testing.B) {
	cases := []struct {
		name            string
		reserve, report bool
		settle, success bool
		freshIP         bool // a new address per call
		distinct        bool // and a distinct failure rule on it (freshIP)
	}{
		{"check", false, false, false, false, false, false},
		{"check+reserve", true, false, false, false, false, false},
		{"check+report-failure", false, true, false, false, false, false},
		{"check+reserve+settle-failure", true, true, true, false, false, false},
		{"check+report-success", false, true, false, true, false, false},
		{"check+reserve+settle-success", true, true, true, true, false, false},
		{"check+reserve+fresh-ip", true, false, false, false, true, false},
		{"check+reserve+settle-failure+fresh-ip", true, true, true, false, true, false},
		{"check+reserve+settle-success+fresh-ip", true, true, true, true, true, false},
		{"check+reserve+distinct", true, false, false, false, true, true},
		{"check+reserve+distinct+settle-failure", true, true, true, false, true, true},
		{"check+reserve+distinct+settle-success", true, true, true, true, true, true},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			c, prefix := redisBenchSetup(b)
			s := NewRedis(c, RedisStoreConfig{})
			ctx := context.Background()
			// Keys as internal/abuse builds them ("<prefix>{<24-byte
			// tag>}..."), under the test's prefix (12 bytes longer than
			// "guard:v2:") so they are deleted afterwards.
			ip := prefix + "{" + rand.Text()[:24] + "}"
			var record string
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				u := prefix + "{" + rand.Text()[:24] + "}"
				if tc.freshIP {
					ip = prefix + "{" + rand.Text()[:24] + "}"
				}
				esc := Escalation{
					Failures: []FailureRule{{Key: u + "f:otp_verify/user/failures", Limit: 5, Window: 10 * time.Minute,
						LockKey: u + "k:auth:user", Indexes: []string{u + "x"},
						Info: "auth|user|" + u[len(prefix)+1:len(u)-1] + "||"}},
					Ladder: []time.Duration{time.Minute, 5 * time.Minute}, Decay: 72 * time.Hour,
				}
				if tc.distinct {
					esc.Failures = append(esc.Failures, FailureRule{Key: ip + "d:otp_verify/ip/distinct-user/failures",
						Pending: ip + "q:otp_verify/ip/distinct-user/failures", Distinct: u[len(prefix)+1 : len(prefix)+9], // 8 bytes, as abuse sends
						Limit: 20, Window: time.Hour, LockKey: ip + "k:auth:ip", Indexes: []string{ip + "x"},
						Info: "auth|ip|" + ip[len(prefix)+1:len(ip)-1] + "||"})
				}
				id := rand.Text()
				record = u + "r:" + id
				req := CheckRequest{
					Rules: []Rule{
						{Key: ip + "l:otp_verify/ip", Limit: 1 << 30, Window: time.Minute},
						{Key: u + "l:otp_verify/user", Limit: 20, Window: 10 * time.Minute},
					},
					Locks: []LockRef{{Key: esc.Failures[0].LockKey, SpareIfTrusted: true},
						{Key: u + "k:auth:user!m"}, {Key: ip + "k:auth:ip!m"}},
					Cost: 1, Nonce: id,
				}
				if tc.distinct {
					req.Locks = append(req.Locks, LockRef{Key: ip + "k:auth:ip"})
				}
				if tc.reserve {
					req.Reserve = &Reservation{Escalation: esc, Records: []string{record}, TTL: 10 * time.Minute}
				}
				if _, err := s.Check(ctx, &req); err != nil {
					b.Fatal(err)
				}
				if !tc.report {
					continue
				}
				rep := ReportRequest{Failure: !tc.success, Escalation: esc, Locks: req.Locks, Nonce: id}
				if tc.settle {
					rep.Records = []string{record}
				}
				if _, err := s.Report(ctx, &rep); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if tc.reserve {
				n, err := c.MemoryUsage(ctx, record).Result()
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(n), "record-B")
			}
		})
	}
}
