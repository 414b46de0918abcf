package api

import (
	"testing"
	"time"
)

// safeNext keeps the redirect after sign-in on the review pages, as the
// browser will resolve it: cleaned paths and decoded dots included.
func TestSafeNext(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"/ui/events?user=x", "/ui/events?user=x"},
		{"/ui", "/ui"},
		{"/ui/lockouts", "/ui/lockouts"},
		{"", "/ui/"},
		{"/v1/audit", "/ui/"},
		{"//evil.example/", "/ui/"},
		{"/ui/../v1/audit", "/ui/"},
		{"/ui/%2e%2e/v1/audit", "/ui/"},
		{"/ui/./../metrics", "/ui/"},
		{"/uix", "/ui/"},
		{"/ui\\evil", "/ui/"},
		{"/ui/events\x00", "/ui/"},
		{"/ui/events\r\nSet-Cookie: x=y", "/ui/"},
		{"/ui/login?next=/ui/events", "/ui/"},
		{"/ui/logout", "/ui/"},
		{"/ui/./login", "/ui/"},
		{"/ui/%6cogin?next=/ui/events", "/ui/"},
		{"/ui//logout", "/ui/"},
		{"/ui/%zz", "/ui/"},
	} {
		if got := safeNext(tc.next); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}

// Refused exports are logged at most once a minute, whichever copy of the
// limits (one State across reloads) refuses them.
func TestExportRefusalLogEveryMinute(t *testing.T) {
	l := newExportLimits(ExportConfig{})
	other := l // a handler built after a reload shares the State's limits
	t0 := time.Unix(1_700_000_000, 0)
	for i, tc := range []struct {
		l    exportLimits
		at   time.Duration
		want bool
	}{
		{l, 0, true},
		{l, time.Second, false},
		{other, 59 * time.Second, false},
		{other, time.Minute, true},
		{l, time.Minute + time.Second, false},
		{l, 2 * time.Minute, true},
	} {
		if got := tc.l.logRefusal(t0.Add(tc.at)); got != tc.want {
			t.Errorf("refusal %d at +%v: logged %v, want %v", i, tc.at, got, tc.want)
		}
	}
}

// ParseTime, behind /ui's since and until and the --since and --until of
// guard audit and guard backtest, reads RFC 3339 as /v1/audit does: no
// offset of hour 24 or minute 60, which time.Parse alone accepts.
func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"2026-12-04T00:00:00Z", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-04t00:00:00z", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-04T23:59:00+23:59", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-03T00:01:00-23:59", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-04T01:00:00 01:00", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-04T00:00:00-00:00", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"2026-12-04", time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)},
		{"24h", now.Add(-24 * time.Hour)},
	} {
		got, err := ParseTime(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"2026-12-04T00:00:00+24:00", "2026-12-04T00:00:00 24:00", "2026-12-04T00:00:00-24:00",
		"2026-12-04T00:00:00+00:60", "2026-12-04T00:00:00-00:60", "2026-12-04T00:00:00+99:00",
	} {
		if got, err := ParseTime(in, now); err == nil {
			t.Errorf("ParseTime(%q) = %v; want an error", in, got)
		}
	}
}
