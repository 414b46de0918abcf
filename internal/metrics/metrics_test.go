package metrics

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// scrape fetches /metrics from m's handler and returns the sample lines
// (comments dropped) as a set.
func scrape(t *testing.T, m *Metrics) map[string]bool {
	t.Helper()
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics status = %d, want 200", resp.StatusCode)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type = %q, want text/plain exposition", ct)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	lines := map[string]bool{}
	for l := range strings.SplitSeq(string(body), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines[l] = true
		}
	}
	return lines
}

func TestExposition(t *testing.T) {
	m := New()
	m.ObserveDecision("login", "deny", "rate_limited", false, 3*time.Millisecond)
	m.ObserveDecision("login", "deny", "rate_limited", true, 40*time.Millisecond)
	m.ObserveDecision("otp_send", "allow", "ok", false, 200*time.Microsecond)
	m.SetRedisUp(false)
	m.SetDegraded(true)
	m.SetBreakerState("half_open")
	m.SetBreakerState("bogus") // ignored
	m.RedisError()
	m.RedisError()
	m.SetPostgresUp(false)
	m.SetAuditBacklog(17)
	m.AddAuditWritten(1000)
	m.AddAuditWritten(-5) // ignored
	m.AddAuditDropped(3)
	m.SetSpoolBytes(4096)
	m.SetAuditDefaultRows(7)
	m.AlertSent("redis_down", "sent")
	m.AlertSent("redis_down", "failed")
	m.SetInfo("guard-0", "v0.9.0")
	m.SetInfo("guard-1", "v1.0.0") // replaces the first

	got := scrape(t, m)
	want := []string{
		`guard_decisions_total{action="login",decision="deny",reason="rate_limited"} 2`,
		`guard_decisions_total{action="otp_send",decision="allow",reason="ok"} 1`,
		`guard_decision_duration_seconds_count{action="login"} 2`,
		`guard_decision_duration_seconds_bucket{action="login",le="0.005"} 1`,
		`guard_decision_duration_seconds_bucket{action="login",le="0.05"} 2`,
		`guard_decision_duration_seconds_bucket{action="otp_send",le="0.00025"} 1`,
		`guard_degraded_decisions_total{action="login"} 1`,
		`guard_degraded 1`,
		`guard_redis_up 0`,
		`guard_redis_errors_total 2`,
		`guard_breaker_state{state="closed"} 0`,
		`guard_breaker_state{state="open"} 0`,
		`guard_breaker_state{state="half_open"} 1`,
		`guard_postgres_up 0`,
		`guard_audit_backlog 17`,
		`guard_audit_written_total 1000`,
		`guard_audit_dropped_total 3`,
		`guard_audit_spool_bytes 4096`,
		`guard_audit_default_partition_rows 7`,
		`guard_alerts_total{event="redis_down",result="sent"} 1`,
		`guard_alerts_total{event="redis_down",result="failed"} 1`,
		`guard_info{guard_instance="guard-1",version="v1.0.0"} 1`,
	}
	for _, w := range want {
		if !got[w] {
			t.Errorf("exposition lacks %q", w)
		}
	}
	for l := range got {
		if strings.Contains(l, "guard-0") {
			t.Errorf("exposition keeps a replaced guard_info: %q", l)
		}
		if strings.Contains(l, "bogus") {
			t.Errorf("exposition has an unknown breaker state: %q", l)
		}
	}
	if !hasPrefix(got, "go_goroutines ") {
		t.Errorf("exposition lacks the Go runtime collector")
	}
}

func TestInitialValues(t *testing.T) {
	got := scrape(t, New())
	for _, w := range []string{
		`guard_degraded 0`,
		`guard_redis_up 1`,
		`guard_postgres_up 1`,
		`guard_breaker_state{state="closed"} 1`,
		`guard_audit_backlog 0`,
		`guard_audit_written_total 0`,
		`guard_audit_dropped_total 0`,
	} {
		if !got[w] {
			t.Errorf("fresh exposition lacks %q", w)
		}
	}
}

func TestInitSeries(t *testing.T) {
	m := New()
	m.InitSeries([]string{"login", "otp_send"}, []string{"redis_down", "redis_recovered"})
	m.ObserveDecision("login", "allow", "ok", false, time.Millisecond)
	m.ObserveDecision("login", "challenge", "challenge_required", false, time.Millisecond)
	got := scrape(t, m)
	tests := []struct {
		name string
		line string
	}{
		{"counted decision", `guard_decisions_total{action="login",decision="allow",reason="ok"} 1`},
		{"decision not yet seen", `guard_decisions_total{action="login",decision="deny",reason="locked_out"} 0`},
		{"other action", `guard_decisions_total{action="otp_send",decision="deny",reason="rate_limited"} 0`},
		{"store failure deny", `guard_decisions_total{action="otp_send",decision="deny",reason="store_unavailable"} 0`},
		{"counted challenge", `guard_decisions_total{action="login",decision="challenge",reason="challenge_required"} 1`},
		{"challenge not yet seen", `guard_decisions_total{action="otp_send",decision="challenge",reason="challenge_required"} 0`},
		{"latency before any decision", `guard_decision_duration_seconds_count{action="otp_send"} 0`},
		{"degraded decisions", `guard_degraded_decisions_total{action="otp_send"} 0`},
		{"alert sent", `guard_alerts_total{event="redis_down",result="sent"} 0`},
		{"alert failed", `guard_alerts_total{event="redis_recovered",result="failed"} 0`},
		{"alert dropped", `guard_alerts_total{event="redis_down",result="dropped"} 0`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !got[tt.line] {
				t.Errorf("exposition lacks %q", tt.line)
			}
		})
	}
	for l := range got {
		if strings.Contains(l, `decision="allow",reason="rate_limited"`) {
			t.Errorf("impossible pair initialised: %q", l)
		}
	}
}

func TestLabelCardinalityBounded(t *testing.T) {
	m := New()
	for i := range MaxLabelValues + 50 {
		m.ObserveDecision(fmt.Sprintf("action-%d", i), "allow", "ok", false, time.Millisecond)
	}
	got := scrape(t, m)
	series := 0
	for l := range got {
		if strings.HasPrefix(l, "guard_decisions_total{") {
			series++
		}
	}
	if want := MaxLabelValues + 1; series != want {
		t.Errorf("guard_decisions_total has %d series, want %d (the cap plus \"other\")", series, want)
	}
	if w := `guard_decisions_total{action="other",decision="allow",reason="ok"} 50`; !got[w] {
		t.Errorf("exposition lacks %q", w)
	}
}

func TestRegistriesAreIndependent(t *testing.T) {
	a, b := New(), New()
	a.RedisError()
	if got := scrape(t, b); !got[`guard_redis_errors_total 0`] {
		t.Errorf("a second Metrics saw the first one's counter")
	}
}

func hasPrefix(lines map[string]bool, prefix string) bool {
	for l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
