package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

// storeRecorder hands audit events straight to the in-memory audit store,
// so an example reads back what it just did without waiting for the
// asynchronous writer cmd/guard uses.
type storeRecorder struct{ store *audit.MemoryStore }

func (r storeRecorder) Record(e audit.Event) {
	_ = r.store.Insert(context.Background(), []audit.Event{e})
}

// startGuard serves the real Guard handler (abuse.Guard over the in-memory
// limiter and audit store, default policy) on a loopback test server with
// a fixed clock, and returns its URL. Keys: "k-check" (check) and
// "k-admin" (admin).
func startGuard() (string, func()) {
	now := func() time.Time { return time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) }
	lim := limits.NewMemory(limits.MemoryConfig{Now: now})
	events := audit.NewMemoryStore(0)
	g, err := abuse.New(slog.New(slog.DiscardHandler), abuse.Config{
		KeySecret: []byte("example-secret-0123456789"), Instance: "guard-example", Now: now,
	}, lim, storeRecorder{events}, events)
	if err != nil {
		log.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{Keys: []api.Key{
		{Name: "auth-service", Scopes: []string{api.ScopeCheck}, Key: "k-check"},
		{Name: "ops", Scopes: []string{api.ScopeAdmin}, Key: "k-admin"},
	}}, api.Deps{Guard: g, Audit: events, Cursors: audit.NewCursorCodec([]byte("cursor-secret"))})
	if err != nil {
		log.Fatal(err)
	}
	srv := httptest.NewServer(h)
	return srv.URL, func() { srv.Close(); _ = lim.Close() }
}

func str(s string) *string { return &s }

func ExampleClient_Check() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check")

	resp, err := c.Check(context.Background(), sdk.CheckRequest{
		Action: "login", User: str("Alice@Example.COM"), IP: str("203.0.113.7"),
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Decision, resp.Reason, resp.RetryAfter())
	for _, l := range resp.Limits {
		fmt.Printf("%s: %d of %d left in %d ms\n", l.Rule, l.Remaining, l.Limit, l.WindowMs)
	}
	// Output:
	// allow ok 0s
	// login/user: 29 of 30 left in 900000 ms
	// login/ip: 59 of 60 left in 60000 ms
}

func ExampleClient_Check_denied() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check")
	ctx := context.Background()

	// The default otp_send policy allows 5 codes per user in 10 minutes.
	var resp *sdk.CheckResponse
	for range 6 {
		var err error
		resp, err = c.Check(ctx, sdk.CheckRequest{Action: "otp_send", User: str("+15550100")})
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(resp.Decision, resp.Reason, resp.RetryAfter())
	// Output:
	// deny rate_limited 10m0s
}

func ExampleClient_Report() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check")
	ctx := context.Background()

	// The default otp_verify policy strikes at 5 failed checks of a user.
	var resp *sdk.ReportResponse
	for range 5 {
		var err error
		resp, err = c.Report(ctx, sdk.ReportRequest{Action: "otp_verify", User: str("bob"), Outcome: sdk.OutcomeFailure})
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(resp.Lockout.Dimension, resp.Lockout.Level, resp.Lockout.Until.Format(time.RFC3339))
	// Output:
	// user 1 2026-03-01T12:01:00Z
}

func ExampleClient_Unlock() {
	url, stop := startGuard()
	defer stop()
	ctx := context.Background()
	checker, admin := sdk.New(url, "k-check"), sdk.New(url, "k-admin")
	for range 5 {
		if _, err := checker.Report(ctx, sdk.ReportRequest{Action: "otp_verify", User: str("bob"), Outcome: sdk.OutcomeFailure}); err != nil {
			log.Fatal(err)
		}
	}

	list, err := admin.Lockouts(ctx, sdk.LockoutFilter{User: "BOB"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range list.Lockouts {
		fmt.Println(l.Ledger, l.Dimension, *l.User, l.Level)
	}
	if err := admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: str("bob"), Reason: "verified by phone"}); err != nil {
		log.Fatal(err)
	}
	err = admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: str("bob")})
	var e *sdk.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
	}
	// Output:
	// auth user bob 1
	// 404 not_found
}

func ExampleClient_Audit() {
	url, stop := startGuard()
	defer stop()
	ctx := context.Background()
	checker, admin := sdk.New(url, "k-check"), sdk.New(url, "k-admin")
	for range 3 {
		if _, err := checker.Check(ctx, sdk.CheckRequest{Action: "signup", IP: str("198.51.100.4"), Device: str("d-1")}); err != nil {
			log.Fatal(err)
		}
	}

	page, err := admin.Audit(ctx, sdk.AuditFilter{IP: "198.51.100.0/24", Limit: 2})
	if err != nil {
		log.Fatal(err)
	}
	for _, e := range page.Events {
		fmt.Println(e.Kind, *e.Action, *e.Decision, *e.IP, *e.APIKey)
	}
	fmt.Println("more:", page.NextCursor != nil)
	// Output:
	// check signup allow 198.51.100.4 auth-service
	// check signup allow 198.51.100.4 auth-service
	// more: true
}

func ExampleClient_ExportAudit() {
	url, stop := startGuard()
	defer stop()
	ctx := context.Background()
	if _, err := sdk.New(url, "k-check").Check(ctx, sdk.CheckRequest{Action: "login", User: str("carol")}); err != nil {
		log.Fatal(err)
	}

	var b strings.Builder
	if err := sdk.New(url, "k-admin").ExportAudit(ctx, sdk.AuditFilter{User: "carol"}, sdk.FormatCSV, &b); err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	fmt.Println(lines[0])
	fmt.Println(len(lines)-1, "event")
	// Output:
	// id,at,kind,action,decision,reason,outcome,user,ip,device,rule,retry_after_ms,lockout_until,degraded,dry_run,api_key,decision_id,instance,note
	// 1 event
}

func ExampleError() {
	url, stop := startGuard()
	defer stop()

	_, err := sdk.New(url, "k-check").Check(context.Background(), sdk.CheckRequest{Action: "login", IP: str("203.0.113.007")})
	var e *sdk.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code, e.Field)
	}
	_, err = sdk.New(url, "wrong-key").Policy(context.Background())
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
	}
	// Output:
	// 400 invalid_request ip
	// 401 unauthenticated
}
