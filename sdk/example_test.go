package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Every example starts its own Guard (startGuard, guard_test.go): the
// built-in default policy, keys "k-check" (check), "k-admin" (admin) and
// "k-audit" (audit:read).

func ExampleClient_Check() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check")

	subject := sdk.Subject{User: "Alice@Example.COM", IP: "203.0.113.7"}
	resp, err := c.Check(context.Background(), subject.Check("login"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(resp.Decision, resp.Reason, resp.RetryAfter())
	for _, l := range resp.Limits {
		fmt.Printf("%s: %d of %d left in %d ms\n", l.Rule, l.Remaining, l.Limit, l.WindowMs)
	}
	fmt.Println(resp.RateLimitPolicy)
	// Output:
	// allow ok 0s
	// login/user: 29 of 30 left in 900000 ms
	// login/ip: 59 of 60 left in 60000 ms
	// "login/user";q=30;w=900, "login/ip";q=60;w=60
}

func ExampleCheckResponse_Challenge() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check")
	ctx := context.Background()

	// The default signup policy challenges a device after 5 sign-ups an
	// hour instead of denying it.
	req := sdk.Subject{Device: "d-family-pc"}.Check("signup")
	var resp *sdk.CheckResponse
	for range 6 {
		var err error
		if resp, err = c.Check(ctx, req); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(resp.Decision, resp.Reason, resp.Challenge())

	// The person solved the CAPTCHA (verified on the server): check again.
	req.ChallengePassed = true
	if resp, err := c.Check(ctx, req); err == nil {
		fmt.Println(resp.Decision, resp.Reason)
	}
	// Output:
	// challenge challenge_required true
	// allow ok
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
		resp, err = c.Check(ctx, sdk.Subject{User: "+15550100"}.Check("otp_send"))
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(resp.Decision, resp.Reason, resp.RetryAfter().Round(time.Minute))
	fmt.Println(sdk.DenialMessage(resp))
	// Output:
	// deny rate_limited 10m0s
	// Too many attempts. Try again in 10 minutes.
}

// A Guard that cannot be reached: with FailOpen the login goes ahead, and
// the answer says Guard was bypassed; FailClosed for one call refuses it.
func ExampleClient_Check_failurePolicy() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now

	c := sdk.New(down, "k-check", sdk.WithFailurePolicy(sdk.FailOpen))
	req := sdk.Subject{User: "alice@example.com"}.Check("login")
	res, err := c.Check(context.Background(), req)
	fmt.Println(res.Decision, res.Reason, res.Bypassed, err)
	res, _ = c.Check(context.Background(), req, sdk.FailClosed)
	fmt.Println(res.Decision, res.Bypassed)
	_, err = sdk.New(down, "k-check").Check(context.Background(), req)
	fmt.Println(sdk.IsUnavailable(err))
	// Output:
	// allow guard_unavailable true <nil>
	// deny true
	// true
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
		resp, err = c.Report(ctx, sdk.Subject{User: "bob"}.Report("otp_verify", sdk.OutcomeFailure, nil))
		if err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(resp.Lockout.Dimension, resp.Lockout.Level, time.Until(resp.Lockout.Until).Round(time.Minute))
	// Output:
	// user 1 1m0s
}

// ReportAsync does not hold up the answer to the person; Flush waits for
// the reports in flight (on shutdown).
func ExampleClient_ReportAsync() {
	url, stop := startGuard()
	defer stop()
	c := sdk.New(url, "k-check", sdk.WithAsyncErrorHandler(func(err error) { log.Print(err) }))
	ctx := context.Background()

	subject := sdk.Subject{User: "dave@example.com", IP: "198.51.100.20", Device: "d-77"}
	res, err := c.Check(ctx, subject.Check("login"))
	if err != nil {
		log.Fatal(err)
	}
	c.ReportAsync(ctx, subject.Report("login", sdk.OutcomeSuccess, res))
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("reported")
	// Output:
	// reported
}

func ExampleClient_Unlock() {
	url, stop := startGuard()
	defer stop()
	ctx := context.Background()
	checker, admin := sdk.New(url, "k-check"), sdk.New(url, "k-admin")
	for range 5 {
		if _, err := checker.Report(ctx, sdk.Subject{User: "bob"}.Report("otp_verify", sdk.OutcomeFailure, nil)); err != nil {
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
	if err := admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: sdk.String("bob"), Reason: "verified by phone"}); err != nil {
		log.Fatal(err)
	}
	err = admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: sdk.String("bob")})
	var e *sdk.Error
	if errors.As(err, &e) {
		fmt.Println(e.Status, e.Code)
	}
	// Output:
	// auth user bob 1
	// 404 not_found
}

// waitForEvents polls the audit trail until it holds n events matching f:
// Guard writes them asynchronously (within audit.flush_interval).
func waitForEvents(c *sdk.Client, f sdk.AuditFilter, n int) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		f.Limit = 1000
		if p, err := c.Audit(context.Background(), f); err == nil && len(p.Events) >= n {
			return
		}
	}
	log.Fatalf("fewer than %d audit events after 5s", n)
}

func ExampleClient_Audit() {
	url, stop := startGuard()
	defer stop()
	ctx := context.Background()
	checker, auditor := sdk.New(url, "k-check"), sdk.New(url, "k-audit")
	for range 3 {
		if _, err := checker.Check(ctx, sdk.Subject{IP: "198.51.100.4", Device: "d-1"}.Check("signup")); err != nil {
			log.Fatal(err)
		}
	}
	waitForEvents(auditor, sdk.AuditFilter{IP: "198.51.100.0/24"}, 3)

	page, err := auditor.Audit(ctx, sdk.AuditFilter{IP: "198.51.100.0/24", Limit: 2})
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
	if _, err := sdk.New(url, "k-check").Check(ctx, sdk.Subject{User: "carol"}.Check("login")); err != nil {
		log.Fatal(err)
	}
	auditor := sdk.New(url, "k-audit")
	waitForEvents(auditor, sdk.AuditFilter{User: "carol"}, 1)

	var b strings.Builder
	if err := auditor.ExportAudit(ctx, sdk.AuditFilter{User: "carol"}, sdk.FormatCSV, &b); err != nil {
		log.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	fmt.Println(lines[0])
	fmt.Println(len(lines)-1, "event")
	// Output:
	// id,at,kind,action,decision,reason,outcome,user,ip,device,phone,rule,retry_after_ms,lockout_until,degraded,dry_run,api_key,decision_id,instance,note
	// 1 event
}

func ExampleError() {
	url, stop := startGuard()
	defer stop()

	_, err := sdk.New(url, "k-check").Check(context.Background(), sdk.Subject{IP: "203.0.113.007"}.Check("login"))
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

// A login handler behind Middleware: it runs only for attempts Guard
// allows and reports how each ended; denied attempts get 429 with
// Retry-After and a message that says nothing about the account.
func ExampleMiddleware() {
	guardURL, stop := startGuard()
	defer stop()
	client := sdk.New(guardURL, "k-check")

	login := &sdk.Middleware{
		Client: client,
		Action: "login",
		User:   func(r *http.Request) string { return r.PostFormValue("email") },
	}
	mux := http.NewServeMux()
	mux.Handle("POST /login", login.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		attempt := sdk.AttemptFrom(r.Context())
		if r.PostFormValue("password") != "correct horse" {
			attempt.Report(r.Context(), sdk.OutcomeFailure)
			http.Error(w, "wrong e-mail or password", http.StatusUnauthorized)
			return
		}
		attempt.Report(r.Context(), sdk.OutcomeSuccess)
		fmt.Fprintln(w, "welcome")
	})))
	app := httptest.NewServer(mux)
	defer app.Close()

	// The default login policy locks a user at one address after 10
	// failures.
	for i := range 11 {
		resp, err := http.PostForm(app.URL+"/login", url.Values{"email": {"erin@example.com"}, "password": {"guess"}})
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if i == 0 || i == 10 {
			fmt.Println(resp.StatusCode, resp.Header.Get("Retry-After"), strings.TrimSpace(string(body)))
		}
		if err := client.Flush(context.Background()); err != nil { // let each report land first
			log.Fatal(err)
		}
	}
	// Output:
	// 401  wrong e-mail or password
	// 429 60 {"error":{"code":"too_many_attempts","message":"Too many attempts. Try again in 1 minute."}}
}

func ExampleIPExtractor() {
	x, err := sdk.TrustProxies("10.0.0.0/8")
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.1.2.3:50000" // the load balancer
	r.Header.Set("X-Forwarded-For", "198.51.100.1, unknown, 203.0.113.5:4711, 10.9.9.9")
	fmt.Println(x.ClientIP(r))

	r.RemoteAddr = "203.0.113.99:1234" // not a trusted proxy: its headers are not believed
	fmt.Println(x.ClientIP(r))
	// Output:
	// 203.0.113.5
	// 203.0.113.99
}
