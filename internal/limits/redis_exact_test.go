package limits

import (
	"context"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// The conformance cases that stand exactly at an edge need a fake clock,
// which Redis TIME is not. These tests get the same exactness on the real
// clock: they sample the store many times around an edge and check every
// answer against the Now it reports, so a sample that lands on the edge
// millisecond is checked exactly like any other.

func TestRedisWindowEdgeExact(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, c, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	const w = 1000 // ms
	key := prefix + "log:edge"
	t0, err := c.Time(ctx).Result()
	if err != nil {
		t.Fatalf("time: %v", err)
	}
	// One entry per millisecond from 40ms before to 40ms after the edge
	// the next calls will face, so the edge passes through them.
	var stamps []int64
	for ts := t0.UnixMilli() - w - 40; ts <= t0.UnixMilli()-w+40; ts++ {
		stamps = append(stamps, ts)
	}
	if err := c.Set(ctx, key, redisTestLog(stamps), time.Minute).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	rule := Rule{Key: key, Limit: 100, Window: w * time.Millisecond}
	for i := 0; i < 40; i++ {
		res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{rule}, Cost: 50, DryRun: true})
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		now := res.Now.UnixMilli()
		var in []int64 // entries with now-W < ts <= now
		for _, ts := range stamps {
			if now-w < ts && ts <= now {
				in = append(in, ts)
			}
		}
		want := RuleResult{Allowed: len(in)+50 <= 100, Count: len(in)}
		if want.Allowed {
			want.Count += 50
		}
		want.Remaining = max(100-want.Count, 0)
		switch {
		case len(in) > 0:
			want.Reset = time.Duration(in[0]+w-now) * time.Millisecond
		case want.Allowed:
			want.Reset = w * time.Millisecond
		}
		if !want.Allowed {
			k := len(in) + 50 - 100
			want.RetryAfter = time.Duration(in[k-1]+w-now) * time.Millisecond
		}
		if got := res.Rules[0]; got != want {
			t.Fatalf("sample %d at now=t0%+dms: got %+v, want %+v", i, now-t0.UnixMilli(), got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRedisLockAndTrustEdgesExact(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, _, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	esc := redisTestEscalation(prefix, "edges")
	esc.Ladder = []time.Duration{30 * time.Millisecond}
	lock := []LockRef{{Key: esc.Failures[0].LockKey, SpareIfTrusted: true}}
	trust := prefix + "trust:u:d"

	// Locked for 30ms, trusted (spared) for the first 20ms of them: the
	// samples cross the trust end and then the lock's end.
	struck, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc})
	if err != nil || len(struck.Struck) != 1 {
		t.Fatalf("strike: got %+v, %v; want one strike", struck, err)
	}
	until := struck.Struck[0].Until.UnixMilli()
	ok, err := s.Report(ctx, &ReportRequest{TrustKey: trust, TrustTTL: 20 * time.Millisecond})
	if err != nil {
		t.Fatalf("success: %v", err)
	}
	trustEnd := ok.Now.UnixMilli() + 20
	for i := 0; i < 60; i++ {
		res, err := s.Check(ctx, &CheckRequest{Locks: lock, TrustKey: trust, Cost: 1})
		if err != nil {
			t.Fatalf("check: %v", err)
		}
		now := res.Now.UnixMilli()
		wantLocked := now < until && now >= trustEnd
		if got := res.Locked != nil; got != wantLocked || res.Allowed == wantLocked {
			t.Fatalf("sample %d: now=until%+dms, trust end%+dms: got locked %v allowed %v, want locked %v",
				i, now-until, now-trustEnd, got, res.Allowed, wantLocked)
		}
		if now > until+2 {
			break
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRedisDecayExact(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	s, _, _ := newRedisTestStore(t, redisURL, prefix)
	ctx := context.Background()
	esc := redisTestEscalation(prefix, "decay")
	esc.Ladder = []time.Duration{time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond}
	esc.Decay = 8 * time.Millisecond
	var last int64
	level := 0
	for i := 0; i < 60; i++ {
		res, err := s.Report(ctx, &ReportRequest{Failure: true, Escalation: esc})
		if err != nil || len(res.Struck) != 1 {
			t.Fatalf("strike %d: got %+v, %v; want one strike", i, res, err)
		}
		now := res.Now.UnixMilli()
		if level == 0 || now-last >= esc.Decay.Milliseconds() {
			level = 1
		} else {
			level = min(level+1, len(esc.Ladder))
		}
		got := res.Struck[0]
		if got.Level != level || got.Since.UnixMilli() != now || got.Until.UnixMilli() != now+esc.Ladder[level-1].Milliseconds() {
			t.Fatalf("strike %d, %dms after the last: got %+v, want level %d since now", i, now-last, got, level)
		}
		last = now
		// 0..11ms: on both sides of the 8ms decay, the edge included.
		time.Sleep(time.Duration(i%12) * time.Millisecond)
	}
}

// redisTestLog encodes ascending stamps (unix ms) as redis.lua stores a log.
func redisTestLog(stamps []int64) string {
	b := make([]byte, 0, len(stamps)*redisStampBytes)
	for _, ts := range stamps {
		b = append(b, byte(ts>>40), byte(ts>>32), byte(ts>>24), byte(ts>>16), byte(ts>>8), byte(ts))
	}
	return string(b)
}
