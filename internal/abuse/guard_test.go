package abuse

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

func TestNewRejects(t *testing.T) {
	st := limits.NewMemory(limits.MemoryConfig{})
	defer st.Close()
	bad := Policy{Actions: map[string]Action{"login": {Limits: []Rule{{Dimension: "email", Limit: 1, Window: time.Second}}}}}
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no secret", Config{}},
		{"ipv6 prefix 129", Config{KeySecret: testSecret, IPv6Prefix: 129}},
		{"ipv6 prefix negative", Config{KeySecret: testSecret, IPv6Prefix: -1}},
		{"invalid policy", Config{KeySecret: testSecret, Policy: bad}},
		{"brace in key prefix", Config{KeySecret: testSecret, KeyPrefix: "guard:{x}:"}},
		{"trust ttl above the maximum", Config{KeySecret: testSecret, TrustTTL: MaxDuration + time.Millisecond}},
	}
	for _, tt := range tests {
		if _, err := New(nil, tt.cfg, st, &fakeRecorder{}, nil); err == nil {
			t.Errorf("%s: New succeeded; want an error", tt.name)
		}
	}
	_, err := New(nil, Config{KeySecret: testSecret, Policy: bad}, st, &fakeRecorder{}, nil)
	var pe *PolicyError
	if !errors.As(err, &pe) || pe.Action != "login" || pe.Field != "dimension" {
		t.Errorf("New with a bad policy: %v; want a *PolicyError for login's dimension", err)
	}
	if _, err := New(nil, Config{KeySecret: testSecret}, nil, &fakeRecorder{}, nil); err == nil {
		t.Errorf("New without a store succeeded")
	}
}

func TestEffectivePolicyAndLedgers(t *testing.T) {
	b := memoryBackend(t)
	in := DefaultPolicy()
	g, err := New(slog.New(slog.DiscardHandler), Config{KeySecret: testSecret, Policy: in, Now: b.now()}, b.store, &fakeRecorder{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	want := DefaultPolicy()
	if err := want.Validate(); err != nil {
		t.Fatal(err)
	}
	got := g.Policy()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Policy() = %+v\nwant %+v", got, want)
	}
	// Empty lists stay [] (not null) for GET /v1/policy. A missing ladder
	// stays nil, so that validating the policy again does not take it for
	// an explicit [] (GET /v1/policy shows it as []: internal/api).
	if p := g.Policy(); p.Actions["otp_send"].Failures == nil || p.Allow.Users == nil || p.Deny.CIDRs == nil {
		t.Errorf("effective policy has nil lists: %+v", p)
	}
	// The caller's policy and the returned copy do not alias Guard's.
	got.Actions["login"].Limits[0].Limit = 1
	in.Actions["login"].Limits[0].Limit = 1
	if g.Policy().Actions["login"].Limits[0].Limit != 60 {
		t.Errorf("Policy() shares memory with the caller")
	}
	if l := g.Ledgers(); !reflect.DeepEqual(l, []string{"auth", "otp_send", "password_reset", "signup"}) {
		t.Errorf("Ledgers() = %v; want auth, otp_send, password_reset, signup", l)
	}
	// A zero policy means the default one.
	z, err := New(nil, Config{KeySecret: testSecret}, b.store, &fakeRecorder{}, nil)
	if err != nil || !reflect.DeepEqual(z.Policy(), want) {
		t.Errorf("New with a zero policy: %v; want the default policy", err)
	}
}

func TestIPv6Aggregation(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		pol := Policy{Actions: map[string]Action{"signup": {Limits: []Rule{{Dimension: DimIP, Limit: 2, Window: time.Minute}}}}}
		for i, tt := range []struct {
			bits  int
			other string // a second address, in the first one's network or not
			same  bool
		}{
			{0, "2001:db8:1:2:ffff::9", true}, // default /64
			{0, "2001:db8:1:3::1", false},
			{48, "2001:db8:1:ffff::1", true},
			{128, "2001:db8:1:2::2", false},
		} {
			g, _ := newGuard(t, b, pol, func(c *Config) { c.IPv6Prefix = tt.bits; c.KeyPrefix += fmt.Sprintf("agg%d:", i) })
			mustCheck(t, g, CheckInput{Action: "signup", Subject: subj("", "2001:db8:1:2::1", "")})
			d := mustCheck(t, g, CheckInput{Action: "signup", Subject: subj("", tt.other, "")})
			if remaining := d.Limits[0].Remaining; (remaining == 0) != tt.same {
				t.Errorf("/%d: %s after 2001:db8:1:2::1 has %d remaining; same network = %v", tt.bits, tt.other, remaining, tt.same)
			}
		}
	})
}
