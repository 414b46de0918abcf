package config

import (
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

// The rule keys of contract v1.1, distinct and algorithm, reach the policy.
func TestParseRuleKinds(t *testing.T) {
	cfg, err := Parse("guard.yaml", []byte(`actions:
  login:
    limits:
      - {dimension: ip, distinct: user, limit: 20, window: 1h}
      - {dimension: ip, limit: 60, window: 1m}
      - {dimension: user, algorithm: bucket, limit: 10, window: 1m}
    failures:
      - {dimension: ip, distinct: user, limit: 20, window: 1h}
    lockout: {ladder: [1m]}
  otp_send:
    limits:
      - {dimension: ip, algorithm: counter, limit: 5000000, window: 24h}
`), envMap(nil))
	if err != nil {
		t.Fatal(err)
	}
	login, otp := cfg.Guard.Policy.Actions["login"], cfg.Guard.Policy.Actions["otp_send"]
	got := []abuse.Rule{login.Limits[0], login.Limits[1], login.Limits[2], login.Failures[0], otp.Limits[0]}
	want := []abuse.Rule{
		{Name: "login/ip/distinct-user", Dimension: "ip", Distinct: "user", Limit: 20, Window: time.Hour, Algorithm: "log", OnLimit: "deny"},
		{Name: "login/ip", Dimension: "ip", Limit: 60, Window: time.Minute, Algorithm: "log", OnLimit: "deny"},
		{Name: "login/user", Dimension: "user", Limit: 10, Window: time.Minute, Algorithm: "bucket", OnLimit: "deny"},
		{Name: "login/ip/distinct-user/failures", Dimension: "ip", Distinct: "user", Limit: 20, Window: time.Hour, Algorithm: "log"},
		{Name: "otp_send/ip", Dimension: "ip", Limit: 5000000, Window: 24 * time.Hour, Algorithm: "counter", OnLimit: "deny"},
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("rule %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}
