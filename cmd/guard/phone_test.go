package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// TestServePhones runs `guard serve` with the built-in policy on the real
// Redis and Postgres: otp_send limits one number however it is written,
// a denied country is denied, and `guard audit --phone` finds the sends.
func TestServePhones(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	dbURL := testenv.Database(t, "guard_cmd_phone_")
	config := `listen: 127.0.0.1:0
key_secret: e2e-secret-0123456789abcdef
api_keys:
  - {name: auth-service, scopes: [check], key: "` + checkKey + `"}
  - {name: secteam, scopes: ["audit:read"], key: "` + auditKey + `"}
phone: {default_region: GB}
lists: {deny: {countries: [RU]}}
audit: {spool_dir: "` + t.TempDir() + `", flush_interval: 20ms}
store: {budget: 2s}
`
	g := startGuard(t, config, map[string]string{
		"GUARD_REDIS_URL": redisURL, "GUARD_DATABASE_URL": dbURL, "GUARD_KEY_PREFIX": prefix,
	}, "--migrate")
	ctx := context.Background()
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	forms := []string{"+447400123456", "07400 123456", "+44 (0)7400 123-456", "＋４４７４００１２３４５６", "+44 7400 123456", "07400123456"}
	for i, phone := range forms {
		res, err := client.Check(ctx, sdk.Subject{Phone: phone, IP: "203.0.113.7"}.Check("otp_send"))
		if err != nil {
			t.Fatalf("send %d (%s): %v", i+1, phone, err)
		}
		if want := i < 5; res.Allowed() != want {
			t.Fatalf("send %d (%s) = %s/%s; want allowed %v (5 per number per 10 minutes)", i+1, phone, res.Decision, res.Reason, want)
		}
		if i == 5 && (res.Limits[0].Rule != "otp_send/phone" || res.Degraded) {
			t.Errorf("sixth send's limits %+v (degraded %v); want otp_send/phone first, from Redis", res.Limits, res.Degraded)
		}
	}
	if res, err := client.Check(ctx, sdk.Subject{Phone: "+7 912 345-67-89"}.Check("otp_send")); err != nil || res.Reason != sdk.ReasonDenylisted {
		t.Errorf("denied country = %+v, %v", res, err)
	}

	env := envMap(map[string]string{"GUARD_URL": g.base, "GUARD_API_KEY": auditKey})
	deadline := time.Now().Add(10 * time.Second)
	for {
		var stdout, stderr bytes.Buffer
		args := []string{"guard", "audit", "--phone", "+447400123456", "--since", "1h", "--format", "table"}
		if err := run(ctx, args, env, &stdout, &stderr); err != nil {
			t.Fatalf("guard audit --phone: %v", err)
		}
		out := stdout.String()
		if strings.Count(out, "+447400123456") == len(forms) && strings.Contains(out, "PHONE") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("guard audit --phone shows not all %d sends:\n%s", len(forms), out)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
