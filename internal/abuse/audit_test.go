package abuse

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

func TestCheckAuditEvent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, loginPolicy())
		in := CheckInput{Action: "login", Subject: subj(" Alice@Example.COM", "2001:DB8::1:2:3:4", "Dev-1"), APIKey: "auth-service"}
		mustCheck(t, g, in)
		mustCheck(t, g, in)
		d := mustCheck(t, g, in)
		e := rec.last(t)
		want := audit.Event{
			ID: d.ID, At: d.At, Kind: audit.KindCheck, Action: "login", Decision: "deny", Reason: ReasonRateLimited,
			User: "alice@example.com", IP: "2001:db8::1:2:3:4", Device: "Dev-1", Rule: "login/user",
			APIKey: "auth-service", DecisionID: d.ID, Instance: "test-1",
		}
		if e.ID != want.ID || !e.At.Equal(want.At) || e.Kind != want.Kind || e.Action != want.Action || e.Decision != want.Decision ||
			e.Reason != want.Reason || e.User != want.User || e.IP != want.IP || e.Device != want.Device || e.Rule != want.Rule ||
			e.APIKey != want.APIKey || e.DecisionID != want.DecisionID || e.Instance != want.Instance || e.Outcome != "" || e.Note != "" {
			t.Errorf("event = %+v\nwant    %+v", e, want)
		}
		if e.RetryAfterMs == nil || *e.RetryAfterMs != ceilMs(d.RetryAfter) || *e.RetryAfterMs <= 0 {
			t.Errorf("retry_after_ms = %v; want %d", e.RetryAfterMs, ceilMs(d.RetryAfter))
		}
		if e.DryRun == nil || *e.DryRun || e.Degraded == nil || *e.Degraded || e.LockoutUntil != nil {
			t.Errorf("dry_run %v degraded %v lockout_until %v; want false, false, nil", e.DryRun, e.Degraded, e.LockoutUntil)
		}
		if e.At.Location() != time.UTC || e.At.Nanosecond()%int(time.Millisecond) != 0 {
			t.Errorf("at = %v; want UTC at millisecond precision", e.At)
		}
		if b.clock != nil && !e.At.Equal(b.clock.Now()) {
			t.Errorf("at = %v; want the store clock %v", e.At, b.clock.Now())
		}
		// IPv4-mapped addresses are audited as IPv4.
		mustCheck(t, g, CheckInput{Action: "login", Subject: subj("", "::ffff:192.0.2.1", "")})
		if e := rec.last(t); e.IP != "192.0.2.1" || e.User != "" || e.Device != "" {
			t.Errorf("mapped address audited as %q (user %q device %q); want 192.0.2.1 only", e.IP, e.User, e.Device)
		}
	})
}

func TestReportAuditEvent(t *testing.T) {
	eachBackend(t, func(t *testing.T, b *backend) {
		g, rec := newGuard(t, b, authPolicy(50))
		in := failure("login", "Alice", "203.0.113.7", "")
		in.APIKey = "auth-service"
		mustReport(t, g, in)
		e := rec.last(t)
		if e.Kind != audit.KindReport || e.Outcome != OutcomeFailure || e.Action != "login" || e.User != "alice" || e.IP != "203.0.113.7" ||
			e.DecisionID != "" || e.LockoutUntil != nil || e.APIKey != "auth-service" || e.ID == "" || e.Decision != "" || e.DryRun != nil {
			t.Errorf("report event = %+v; want a failure of alice without decision id or lockout", e)
		}
		in.DecisionID = "01JDTESTDECISION0000000000"
		mustReport(t, g, in)
		out := mustReport(t, g, in) // strikes
		e = rec.last(t)
		if e.DecisionID != in.DecisionID || e.LockoutUntil == nil || !e.LockoutUntil.Equal(out.Lockout.Until) {
			t.Errorf("striking report event: decision_id %q lockout_until %v; want %q and %v", e.DecisionID, e.LockoutUntil, in.DecisionID, out.Lockout.Until)
		}
		// A report that meets (not strikes) a lockout has no lockout_until.
		mustReport(t, g, in)
		if e := rec.last(t); e.LockoutUntil != nil {
			t.Errorf("non-striking report event has lockout_until %v", e.LockoutUntil)
		}
		ids := map[string]bool{}
		for _, e := range rec.all() {
			if ids[e.ID] {
				t.Errorf("duplicate event id %s", e.ID)
			}
			ids[e.ID] = true
		}
	})
}

func TestPseudonymizedAudit(t *testing.T) {
	b := memoryBackend(t)
	g, rec := newGuard(t, b, loginPolicy(), func(c *Config) { c.Pseudonymize = true })
	mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice@example.com", "203.0.113.7", "dev-1")})
	e := rec.last(t)
	for _, raw := range []string{e.User, e.IP, e.Device} {
		if len(raw) != hashLen || strings.Contains(raw, "alice") || strings.Contains(raw, "203.") || strings.Contains(raw, "dev") {
			t.Errorf("pseudonymised identifier %q; want a %d-character hash", raw, hashLen)
		}
	}
	if u, err := g.AuditUser(" ALICE@example.com"); err != nil || u != e.User {
		t.Errorf("AuditUser = %q, %v; want the event's %q", u, err, e.User)
	}
	if d, err := g.AuditDevice("dev-1"); err != nil || d != e.Device {
		t.Errorf("AuditDevice = %q, %v; want the event's %q", d, err, e.Device)
	}
	plain, _ := newGuard(t, b, loginPolicy())
	if u, err := plain.AuditUser(" ALICE@example.com"); err != nil || u != "alice@example.com" {
		t.Errorf("AuditUser without pseudonyms = %q, %v; want alice@example.com", u, err)
	}
}

// fakeStore is a limits.Store whose methods are func fields.
type fakeStore struct {
	check  func(*limits.CheckRequest) (limits.CheckResult, error)
	report func(*limits.ReportRequest) (limits.ReportResult, error)
}

func (f *fakeStore) Check(_ context.Context, r *limits.CheckRequest) (limits.CheckResult, error) {
	return f.check(r)
}
func (f *fakeStore) Report(_ context.Context, r *limits.ReportRequest) (limits.ReportResult, error) {
	return f.report(r)
}
func (f *fakeStore) Unlock(context.Context, *limits.UnlockRequest) (bool, error) { return false, nil }
func (f *fakeStore) Lockouts(context.Context, *limits.LockQuery) (limits.LockPage, error) {
	return limits.LockPage{}, nil
}
func (f *fakeStore) Lock(context.Context, *limits.LockRequest) ([]limits.LockState, error) {
	return nil, nil
}
func (f *fakeStore) Ping(context.Context) error { return nil }
func (f *fakeStore) Close() error               { return nil }

func TestStoreFailureModes(t *testing.T) {
	clock := newFakeClock()
	var last *limits.CheckRequest
	fs := &fakeStore{check: func(r *limits.CheckRequest) (limits.CheckResult, error) {
		last = r
		return limits.CheckResult{Now: clock.Now(), Allowed: r.OnFailure == limits.FailAllow, Degraded: true, Unavailable: r.OnFailure != limits.FailLocal}, nil
	}}
	pol := Policy{Actions: map[string]Action{
		"local": {Limits: []Rule{{Dimension: DimIP, Limit: 5, Window: time.Minute}}},
		"allow": {Limits: []Rule{{Dimension: DimIP, Limit: 5, Window: time.Minute}}, OnStoreFailure: OnFailureAllow},
		"deny":  {Limits: []Rule{{Dimension: DimIP, Limit: 5, Window: time.Minute}}, OnStoreFailure: OnFailureDeny},
	}}
	rec := &fakeRecorder{}
	g, err := New(slog.New(slog.DiscardHandler), Config{Policy: pol, KeySecret: testSecret, Now: clock.Now}, fs, rec, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tests := []struct {
		action  string
		mode    limits.OnFailure
		allowed bool
		reason  string
		retry   time.Duration
	}{
		{"allow", limits.FailAllow, true, ReasonStoreUnavailable, 0},
		{"deny", limits.FailDeny, false, ReasonStoreUnavailable, time.Second},
	}
	for _, tt := range tests {
		d := mustCheck(t, g, CheckInput{Action: tt.action, Subject: subj("", "203.0.113.7", "")})
		if last.OnFailure != tt.mode {
			t.Errorf("%s: OnFailure %v; want %v", tt.action, last.OnFailure, tt.mode)
		}
		if d.Allowed != tt.allowed || d.Reason != tt.reason || d.RetryAfter != tt.retry || !d.Degraded || d.Limits == nil {
			t.Errorf("%s: %+v; want allowed %v reason %s retry %v degraded, limits []", tt.action, d, tt.allowed, tt.reason, tt.retry)
		}
		if e := rec.last(t); e.Degraded == nil || !*e.Degraded || e.Reason != tt.reason {
			t.Errorf("%s: audit %+v; want degraded %s", tt.action, e, tt.reason)
		}
	}
	if len(last.Nonce) == 0 || len(last.Nonce) > 32 || strings.Trim(last.Nonce, "0123456789ABCDEFGHJKMNPQRSTVWXYZ") != "" {
		t.Errorf("nonce %q is not a short [A-Za-z0-9_-] value", last.Nonce)
	}

	boom := errors.New("boom")
	fs.check = func(*limits.CheckRequest) (limits.CheckResult, error) {
		return limits.CheckResult{}, errors.Join(limits.ErrUnavailable, boom)
	}
	n := len(rec.all())
	if _, err := g.Check(context.Background(), CheckInput{Action: "local", Subject: subj("", "203.0.113.7", "")}); !errors.Is(err, limits.ErrUnavailable) {
		t.Errorf("Check with a failing store: %v; want it to wrap limits.ErrUnavailable", err)
	}
	if len(rec.all()) != n {
		t.Errorf("a failed check was audited")
	}
}

func TestCheckRequestShape(t *testing.T) {
	var got *limits.CheckRequest
	fs := &fakeStore{check: func(r *limits.CheckRequest) (limits.CheckResult, error) {
		got = r
		return limits.CheckResult{Allowed: true, Rules: make([]limits.RuleResult, len(r.Rules))}, nil
	}}
	g, err := New(nil, Config{Policy: authPolicy(50), KeySecret: testSecret, KeyPrefix: "p:"}, fs, &fakeRecorder{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	mustCheck(t, g, CheckInput{Action: "login", Subject: subj("alice", "203.0.113.7", "dev")})
	// login's ledger auth has failure rules on user+ip and user: per
	// dimension present, its struck record (the user one sparing trusted
	// devices) and then its manual lockout record, sparing nothing and
	// sharing the struck record's level.
	want := []struct {
		suffix       string
		spare, share bool
	}{
		{"}k:auth:user", true, false}, {"}k:auth:user!m", false, true},
		{"}k:auth:ip!m", false, false}, {"}k:auth:device!m", false, false},
		{"}k:auth:user+ip:", false, false}, {"}k:auth:user+ip!m:", false, true},
		{"}k:auth:user+device!m:", false, false},
	}
	if len(got.Locks) != len(want) {
		t.Fatalf("locks = %+v; want %d", got.Locks, len(want))
	}
	for i, w := range want {
		l := got.Locks[i]
		match := strings.HasSuffix(l.Key, w.suffix)
		if strings.HasSuffix(w.suffix, ":") { // a pair's second hash follows
			match = strings.Contains(l.Key, w.suffix)
		}
		if !match || l.SpareIfTrusted != w.spare || l.SharesLevel != w.share {
			t.Errorf("lock %d = %+v; want %s, spare %v, shares level %v", i, l, w.suffix, w.spare, w.share)
		}
	}
	if !strings.HasPrefix(got.TrustKey, "p:{") || !strings.Contains(got.TrustKey, "}t:") || got.DenialFailures != nil || got.Cost != 1 {
		t.Errorf("trust %q denial failures %v cost %d; want a trust key, nil, 1", got.TrustKey, got.DenialFailures, got.Cost)
	}
	if len(got.Rules) != 1 || !strings.HasSuffix(got.Rules[0].Key, "}l:login/ip") {
		t.Errorf("rules = %+v; want login/ip", got.Rules)
	}
	mustCheck(t, g, CheckInput{Action: "otp_send", Subject: subj("alice", "", "")})
	if got.DenialFailures == nil || len(got.DenialFailures.Failures) != 1 ||
		!strings.HasSuffix(got.DenialFailures.Failures[0].Key, "}f:otp_send/user/failures") ||
		!strings.HasSuffix(got.DenialFailures.Failures[0].LockKey, "}k:otp_send:user") || got.TrustKey != "" {
		t.Errorf("otp_send request = %+v; want count_denials escalation on its own ledger, no trust key", got)
	}
}
