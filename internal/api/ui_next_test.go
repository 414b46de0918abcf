package api

import "testing"

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
		{"/ui/%zz", "/ui/"},
	} {
		if got := safeNext(tc.next); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
}
