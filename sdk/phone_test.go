package sdk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// TestPhoneEndToEnd: Phone through Check, Report, Lockouts, Unlock and
// Audit against a real Guard.
func TestPhoneEndToEnd(t *testing.T) {
	url := startTestGuard(t, `phone: {default_region: GB}
lists: {deny: {countries: [RU]}}
actions:
  otp_send:
    limits: [{dimension: phone, limit: 2, window: 10m}, {dimension: phone_prefix, limit: 50, window: 1h}]
  otp_verify:
    failures: [{dimension: phone, limit: 2, window: 10m}]
    lockout: {ladder: [1m]}
`)
	ctx := context.Background()
	checker, admin, auditor := sdk.New(url, keyCheck), sdk.New(url, keyAdmin), sdk.New(url, keyAudit)
	s := sdk.Subject{Phone: "07400 123456"}
	for i, want := range []string{sdk.DecisionAllow, sdk.DecisionAllow, sdk.DecisionDeny} {
		res, err := checker.Check(ctx, s.Check("otp_send"))
		if err != nil || res.Decision != want {
			t.Fatalf("send %d = %+v, %v; want %s", i, res, err, want)
		}
		if i == 2 && res.Limits[0].Rule != "otp_send/phone" {
			t.Errorf("third send's limits %+v; want otp_send/phone first", res.Limits)
		}
	}
	if res, err := checker.Check(ctx, sdk.CheckRequest{Action: "otp_send", Phone: sdk.String("+79123456789")}); err != nil || res.Reason != sdk.ReasonDenylisted {
		t.Errorf("denied country = %+v, %v", res, err)
	}
	_, err := checker.Check(ctx, sdk.CheckRequest{Action: "otp_send", Phone: sdk.String("+1 999 555 0123")})
	var e *sdk.Error
	if !errors.As(err, &e) || e.Status != 400 || e.Field != "phone" {
		t.Errorf("invalid phone: %v; want 400 field phone", err)
	}
	var struck *sdk.Lockout
	for range 2 {
		rep, err := checker.Report(ctx, s.Report("otp_verify", sdk.OutcomeFailure, nil))
		if err != nil {
			t.Fatal(err)
		}
		struck = rep.Lockout
	}
	if struck == nil || struck.Dimension != "phone" {
		t.Fatalf("lockout = %+v; want phone", struck)
	}
	ls, err := admin.Lockouts(ctx, sdk.LockoutFilter{Phone: "+447400123456"})
	if err != nil || len(ls.Lockouts) != 1 || ls.Lockouts[0].Phone == nil || *ls.Lockouts[0].Phone != "+447400123456" {
		t.Fatalf("lockouts = %+v, %v", ls, err)
	}
	if err := admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "phone", Phone: sdk.String("+44 7400 123456"), Reason: "sdk"}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		page, err := auditor.Audit(ctx, sdk.AuditFilter{Phone: "+447400123456"})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Events) == 6 { // three checks, two reports, the unlock
			if page.Events[0].Phone == nil || *page.Events[0].Phone != "+447400123456" {
				t.Errorf("event phone = %v", page.Events[0].Phone)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit by phone: %d events; want 6", len(page.Events))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
