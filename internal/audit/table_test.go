package audit

import (
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

func TestWriteTable(t *testing.T) {
	str := func(s string) *string { return &s }
	at := time.Date(2026, 12, 1, 11, 0, 0, 123e6, time.UTC)
	retry := int64(41250)
	tests := []struct {
		name   string
		events []sdk.AuditEvent
		want   []string // substrings of the output, in order
		lines  int
	}{
		{"none", nil, []string{"AT", "KIND", "(no events match)"}, 2},
		{"a denial", []sdk.AuditEvent{{At: at, Kind: sdk.KindCheck, Action: str("login"), Decision: str("deny"),
			Reason: str("rate_limited"), User: str("alice"), IP: str("203.0.113.7"), RetryAfterMs: &retry}},
			[]string{"2026-12-01 11:00:00.123Z", "check", "login", "deny", "rate_limited", "alice", "203.0.113.7", "-", "41.25s"}, 2},
		{"a report shows its outcome", []sdk.AuditEvent{{At: at, Kind: sdk.KindReport, Action: str("login"), Outcome: str("failure")}},
			[]string{"report", "login", "failure"}, 2},
		{"a hostile identifier stays in its cell", []sdk.AuditEvent{{At: at, Kind: sdk.KindCheck,
			User: str("eve\n2026-01-01 00:00:00.000Z\tcheck\tlogin\tallow" + strings.Repeat("x", 60))}},
			[]string{`eve\n2026-01-01`, "..."}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			if err := WriteTable(&b, tt.events); err != nil {
				t.Fatal(err)
			}
			got := b.String()
			rest := got
			for _, w := range tt.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("table lacks %q (in order):\n%s", w, got)
				}
				rest = rest[i+len(w):]
			}
			if n := strings.Count(got, "\n"); n != tt.lines {
				t.Errorf("table has %d lines, want %d:\n%s", n, tt.lines, got)
			}
		})
	}
}
