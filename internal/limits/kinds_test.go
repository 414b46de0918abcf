package limits

import (
	"testing"
	"time"
)

// The edges of kinds.go's models that the conformance cases do not reach
// through a store: clocks that step back, limits lowered under a stored
// state, costs at the limit.

func TestCounterAt(t *testing.T) {
	const w = 1000
	tests := []struct {
		name                string
		t, start, cur, prev int64
		want                float64
	}{
		{"start of the sub-window: prev counts whole", 5000, 5000, 2, 10, 12},
		{"middle", 5500, 5000, 2, 10, 7},
		{"next sub-window: cur becomes prev", 6250, 5000, 8, 10, 6},
		{"two sub-windows later: nothing", 7000, 5000, 8, 10, 0},
		{"clock stepped back: no decay", 4990, 5000, 2, 10, 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := counterAt(tt.t, tt.start, tt.cur, tt.prev, w); got != tt.want {
				t.Errorf("counterAt = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCounterRetryAtTheLimit(t *testing.T) {
	// cur 10 = limit, prev 0: cost 10 fits only when cur weighs nothing,
	// at the end of the next sub-window.
	rule := &Rule{Limit: 10, Window: time.Second, Algorithm: AlgCounter}
	got := counterResult(rule, 10, false, 5200, 5000, 10, 0)
	if want := 1800 * time.Millisecond; got.Allowed || got.RetryAfter != want || got.Remaining != 0 {
		t.Errorf("got %+v, want denied, retry %v, 0 left", got, want)
	}
}

func TestCounterUndoGivesBackWhatWasAdded(t *testing.T) {
	// A Cluster undo of a passed challenge takes back what the pass added
	// to the count: all of cost, or only up to the saturation.
	rule := &Rule{Limit: 1_000_000_000, Window: time.Hour, Algorithm: AlgCounter, Challenge: true, Passed: true}
	tests := []struct {
		cur  int64
		want string
	}{
		{0, "1000000000"},
		{maxCounterCount - 10, "10"},
		{maxCounterCount, "0"},
	}
	for _, tt := range tests {
		o := otherReply{a: 0, b: tt.cur}
		if got := o.spent(rule, 1_000_000_000, 1000); got != tt.want {
			t.Errorf("cur %d: spent %s, want %s", tt.cur, got, tt.want)
		}
	}
}

func TestBucketAt(t *testing.T) {
	const w, limit = 1000, 4
	tests := []struct {
		name    string
		t, last int64
		tokens  float64
		want    float64
	}{
		{"new key is full", 5000, 0, 0, 4},
		{"refills at limit per window", 5250, 5000, 0, 1},
		{"capped at the limit", 5900, 5000, 3, 4},
		{"full after a window", 6000, 5000, 0, 4},
		{"no time passed: the stored level", 5000, 5000, 2.5, 2.5},
		{"no time passed, limit lowered: capped", 5000, 5000, 7, 4},
		{"clock stepped back: no refill", 4900, 5000, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := bucketAt(tt.t, tt.tokens, tt.last, limit, w); got != tt.want {
				t.Errorf("bucketAt = %v, want %v", got, tt.want)
			}
		})
	}
	// The largest limit over a 300-day window: half a window (150 days,
	// 1.3e10 ms; × 1e9 is past int64's 9.2e18) refills half the bucket.
	const day = 24 * 60 * 60 * 1000
	if got := bucketAt(1+150*day, 0, 1, 1_000_000_000, 300*day); got != 500_000_000 {
		t.Errorf("bucketAt, limit 1e9 over 300 days, half a window = %v, want 5e8", got)
	}
}

func TestDistinctResult(t *testing.T) {
	rule := &Rule{Limit: 2, Window: time.Second, Distinct: "abcdefgh"}
	tests := []struct {
		name          string
		recorded      bool
		n             int
		present       bool
		oldest, other int64
		want          RuleResult
	}{
		{"empty set, recorded", true, 0, false, 0, 0,
			RuleResult{Allowed: true, Count: 1, Remaining: 1, Reset: time.Second}},
		{"refreshing the oldest: the other is next", true, 2, true, 9000, 9400,
			RuleResult{Allowed: true, Count: 2, Remaining: 0, Reset: 400 * time.Millisecond}},
		{"full, new value: retry when the oldest leaves", false, 2, false, 9300, 9300,
			RuleResult{Allowed: false, Count: 2, Remaining: 0, Reset: 300 * time.Millisecond, RetryAfter: 300 * time.Millisecond}},
		{"present, not recorded (another rule denied)", false, 2, true, 9300, 9300,
			RuleResult{Allowed: true, Count: 2, Remaining: 0, Reset: 300 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := distinctResult(rule, tt.recorded, 10000, tt.n, tt.present, tt.oldest, tt.other)
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}
