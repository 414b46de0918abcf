package sdk_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// TestEndToEnd drives every endpoint the SDK covers against a real Guard,
// so the SDK and the server cannot drift apart.
func TestEndToEnd(t *testing.T) {
	url := startTestGuard(t, "")
	ctx := context.Background()
	checker, admin, auditor := testClient(url, keyCheck), testClient(url, keyAdmin), testClient(url, keyAudit)

	// POST /v1/check: allowed, with limits and RateLimit headers.
	alice := sdk.Subject{User: "Alice@Example.COM", IP: "203.0.113.7", Device: "d-alice"}
	res, err := checker.Check(ctx, alice.Check("login"))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed() || res.Reason != sdk.ReasonOK || res.DecisionID == "" || len(res.Limits) != 2 || res.Bypassed {
		t.Errorf("check = %+v", res)
	}
	if !strings.Contains(res.RateLimit, `"login/ip";r=59;t=60`) || !strings.Contains(res.RateLimitPolicy, `"login/ip";q=60;w=60`) {
		t.Errorf("RateLimit = %q, RateLimit-Policy = %q", res.RateLimit, res.RateLimitPolicy)
	}
	// dry_run and cost go over the wire.
	two := 2
	dry, err := checker.Check(ctx, sdk.CheckRequest{Action: "login", IP: sdk.String("203.0.113.8"), Cost: &two, DryRun: true})
	if err != nil || dry.Limits[0].Remaining != 58 {
		t.Errorf("dry run = %+v, %v", dry, err)
	}

	// POST /v1/report: success with the decision id; failures strike.
	if rep, err := checker.Report(ctx, alice.Report("login", sdk.OutcomeSuccess, res)); err != nil || rep.Lockout != nil {
		t.Errorf("report = %+v, %v", rep, err)
	}
	bob := sdk.Subject{User: "bob@example.com", IP: "198.51.100.9"}
	var struck *sdk.Lockout
	for range 10 {
		rep, err := checker.Report(ctx, bob.Report("login", sdk.OutcomeFailure, nil))
		if err != nil {
			t.Fatal(err)
		}
		struck = rep.Lockout
	}
	if struck == nil || struck.Dimension != "user+ip" || struck.Level != 1 || time.Until(struck.Until) <= 0 {
		t.Fatalf("tenth failure's lockout = %+v", struck)
	}
	denied, err := checker.Check(ctx, bob.Check("login"))
	if err != nil {
		t.Fatal(err)
	}
	if denied.Allowed() || denied.Reason != sdk.ReasonLockedOut || denied.Lockout == nil || denied.RetryAfter() <= 0 || denied.RetryAfter() > time.Minute {
		t.Errorf("locked check = %+v", denied)
	}

	// GET /v1/lockouts, DELETE /v1/lockouts.
	ls, err := admin.Lockouts(ctx, sdk.LockoutFilter{User: "BOB@example.com", Dimension: "user+ip"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ls.Lockouts) != 1 || *ls.Lockouts[0].IP != "198.51.100.9" || ls.Lockouts[0].Ledger != "auth" || ls.Lockouts[0].Device != nil ||
		!ls.Lockouts[0].Until.Equal(struck.Until) {
		t.Errorf("lockouts = %+v", ls.Lockouts)
	}
	var e *sdk.Error
	if _, err := checker.Lockouts(ctx, sdk.LockoutFilter{}); !errors.As(err, &e) || e.Status != 403 || e.Code != sdk.CodeForbidden {
		t.Errorf("lockouts with a check key: %v", err)
	}
	unlock := sdk.UnlockRequest{Dimension: "user+ip", User: sdk.String("bob@example.com"), IP: sdk.String("198.51.100.9"), Reason: "e2e"}
	if err := admin.Unlock(ctx, unlock); err != nil {
		t.Fatal(err)
	}
	if err := admin.Unlock(ctx, unlock); !errors.As(err, &e) || e.Status != 404 || e.Code != sdk.CodeNotFound {
		t.Errorf("second unlock: %v", err)
	}
	if again, err := checker.Check(ctx, bob.Check("login")); err != nil || !again.Allowed() {
		t.Errorf("check after unlock = %+v, %v", again, err)
	}

	// POST /v1/lockouts: a manual lockout, level 0, then denied as locked.
	mallory := sdk.Subject{IP: "203.0.113.66"}
	locked, err := admin.Lock(ctx, sdk.LockRequest{Dimension: "ip", IP: sdk.String(mallory.IP), Duration: time.Hour, Reason: "e2e", Ledger: "auth"})
	if err != nil {
		t.Fatal(err)
	}
	if len(locked.Lockouts) != 1 || locked.Lockouts[0].Level != 0 || locked.Lockouts[0].Dimension != "ip" ||
		time.Until(locked.Lockouts[0].Until) < 59*time.Minute {
		t.Errorf("lock = %+v", locked.Lockouts)
	}
	if res, err := checker.Check(ctx, mallory.Check("login")); err != nil || res.Reason != sdk.ReasonLockedOut {
		t.Errorf("check of a manually locked ip = %+v, %v", res, err)
	}
	if _, err := admin.Lock(ctx, sdk.LockRequest{Dimension: "ip", IP: sdk.String(mallory.IP), Duration: time.Millisecond}); !errors.As(err, &e) || e.Status != 400 || e.Field != "duration_ms" {
		t.Errorf("lock for 1ms: %v, want 400 field duration_ms", err)
	}
	if _, err := checker.Lock(ctx, sdk.LockRequest{Dimension: "ip", IP: sdk.String(mallory.IP), Duration: time.Hour}); !errors.As(err, &e) || e.Status != 403 {
		t.Errorf("lock with a check key: %v, want 403", err)
	}
	if l, err := admin.Lock(ctx, sdk.LockRequest{Dimension: "phone_country", PhoneCountry: sdk.String("GB"), Duration: time.Minute, Ledger: "auth"}); err != nil ||
		len(l.Lockouts) != 1 || l.Lockouts[0].PhoneCountry == nil || *l.Lockouts[0].PhoneCountry != "GB" {
		t.Errorf("lock of a country = %+v, %v", l, err)
	}

	// GET /v1/policy.
	pol, err := admin.Policy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l := pol.Actions["login"]; len(l.Limits) != 2 || l.Lockout.Ledger != "auth" || len(l.Lockout.LadderMs) == 0 {
		t.Errorf("policy login = %+v", l)
	}

	// GET /v1/audit: pages, filters, cursors, exports.
	// The ten report events land asynchronously; page through them once
	// all are stored.
	waitForEvents(auditor, sdk.AuditFilter{User: "bob@example.com", Kind: sdk.KindReport}, 10)
	page, err := auditor.Audit(ctx, sdk.AuditFilter{User: "bob@example.com", Kind: sdk.KindReport, Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 4 || page.NextCursor == nil || *page.Events[0].Outcome != sdk.OutcomeFailure || *page.Events[0].APIKey != "auth-service" {
		t.Fatalf("audit page = %+v", page)
	}
	next, err := auditor.Audit(ctx, sdk.AuditFilter{User: "bob@example.com", Kind: sdk.KindReport, Limit: 4, Cursor: *page.NextCursor})
	if err != nil || len(next.Events) != 4 || next.Events[0].ID == page.Events[0].ID {
		t.Errorf("next page = %+v, %v", next, err)
	}
	if _, err := auditor.Audit(ctx, sdk.AuditFilter{Cursor: "forged"}); !errors.As(err, &e) || e.Status != 400 || e.Field != "cursor" {
		t.Errorf("forged cursor: %v", err)
	}
	var nd strings.Builder
	if err := auditor.ExportAudit(ctx, sdk.AuditFilter{User: "bob@example.com", Kind: sdk.KindReport}, sdk.FormatNDJSON, &nd); err != nil {
		t.Fatal(err)
	}
	n := 0
	for sc := bufio.NewScanner(strings.NewReader(nd.String())); sc.Scan(); n++ {
		var ev sdk.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Kind != sdk.KindReport {
			t.Errorf("ndjson line %q: %v", sc.Text(), err)
		}
	}
	if n != 10 {
		t.Errorf("ndjson export holds %d events; want 10", n)
	}
	waitForEvents(auditor, sdk.AuditFilter{Kind: sdk.KindAdmin}, 3)
	var csv strings.Builder
	if err := auditor.ExportAudit(ctx, sdk.AuditFilter{Kind: sdk.KindAdmin}, sdk.FormatCSV, &csv); err != nil {
		t.Fatal(err)
	}
	// The unlock and the two manual locks, newest first.
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 4 || !strings.Contains(lines[1], ",admin,lock,") ||
		!strings.Contains(lines[1], ",GB,") || !strings.Contains(lines[2], ",admin,lock,") ||
		!strings.Contains(lines[3], ",admin,unlock,") || !strings.Contains(lines[3], "e2e") {
		t.Errorf("csv export of admin events = %q", csv.String())
	}

	// GET /readyz, GET /healthz (neither needs a key).
	ready, err := checker.Ready(ctx)
	if err != nil || ready.Mode != "normal" || ready.Redis == "" {
		t.Errorf("ready = %+v, %v", ready, err)
	}
	if err := sdk.New(url, "").Health(ctx); err != nil {
		t.Errorf("health = %v", err)
	}
	// Errors carry the contract's code, field and the request id.
	if _, err := checker.Check(ctx, sdk.CheckRequest{Action: "nope", User: sdk.String("x")}); !errors.As(err, &e) || e.Code != sdk.CodeUnknownAction {
		t.Errorf("unknown action: %v", err)
	}
}
