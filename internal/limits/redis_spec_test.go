package limits

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestRedisSpecs: every call's spec (redis.lua) is parsed and cached by
// its string; checks of more distinct shapes than the function's cache
// holds (512) still decide exactly, and a challenge passed on the 70th
// rule (a flags field of 71 characters) counts.
func TestRedisSpecs(t *testing.T) {
	ctx := context.Background()
	redisURL, prefix := testenv.Redis(t)
	s, _, _ := newRedisTestStore(t, redisURL, prefix)
	// Limit i+1 is a spec of its own: every 50th is taken to its end
	// (i+1 attempts allowed, the next denied), then 600 are met once.
	for i := 0; i < 600; i += 50 {
		key := fmt.Sprintf("%sspec:%d", prefix, i)
		for n := range i + 2 {
			res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{{Key: key, Limit: i + 1, Window: time.Hour}}, Cost: 1})
			if err != nil {
				t.Fatalf("limit %d attempt %d: %v", i+1, n+1, err)
			}
			if want := n <= i; res.Allowed != want || res.Rules[0].Count != min(n+1, i+1) {
				t.Fatalf("limit %d attempt %d: allowed %v count %d, want %v %d", i+1, n+1, res.Allowed, res.Rules[0].Count, want, min(n+1, i+1))
			}
		}
	}
	for i := range 600 {
		key := fmt.Sprintf("%sspec1:%d", prefix, i)
		res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{{Key: key, Limit: i + 1, Window: time.Hour}}, Cost: 1})
		if err != nil || !res.Allowed || res.Rules[0].Remaining != i {
			t.Fatalf("limit %d: %+v %v, want allowed with %d remaining", i+1, res, err, i)
		}
	}

	// 70 rules, the last a challenge already passed over a full log.
	rules := make([]Rule, 70)
	for i := range rules {
		rules[i] = Rule{Key: fmt.Sprintf("%swide:%d", prefix, i), Limit: 1, Window: time.Hour}
	}
	full := &rules[69]
	if res, err := s.Check(ctx, &CheckRequest{Rules: []Rule{*full}, Cost: 1}); err != nil || !res.Allowed {
		t.Fatalf("filling the last log: %+v %v", res, err)
	}
	full.Challenge = true
	res, err := s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1})
	if err != nil || res.Allowed || !res.Challenge {
		t.Fatalf("70 rules, the last full: %+v %v, want a challenge", res, err)
	}
	full.Passed = true
	res, err = s.Check(ctx, &CheckRequest{Rules: rules, Cost: 1})
	if err != nil || !res.Allowed {
		t.Fatalf("70 rules, the last full and its challenge passed: %+v %v, want allowed", res, err)
	}
	if res.Rules[0].Count != 1 || res.Rules[69].Count != 2 {
		t.Errorf("counts %d and %d, want 1 and 2 (a passed challenge logs past its limit)", res.Rules[0].Count, res.Rules[69].Count)
	}
}
