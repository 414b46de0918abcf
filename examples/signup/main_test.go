package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

// startGuard serves the real Guard (abuse over the in-memory limiter and
// audit store, the built-in policy) on a loopback test server. The
// example itself only imports the SDK; its test may build Guard from the
// server's packages because it lives in the server's module.
func startGuard(t *testing.T) string {
	t.Helper()
	lim := limits.NewMemory(limits.MemoryConfig{})
	events := audit.NewMemoryStore(0)
	g, err := abuse.New(slog.New(slog.DiscardHandler), abuse.Config{KeySecret: []byte("signup-example-secret-0123")},
		lim, recorder{events}, events)
	if err != nil {
		t.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{Keys: []api.Key{
		{Name: "signup", Scopes: []string{api.ScopeCheck}, Key: "k-check"},
	}}, api.Deps{Guard: g, Audit: events, Cursors: audit.NewCursorCodec([]byte("cursor-secret"))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); _ = lim.Close() })
	return srv.URL
}

type recorder struct{ store *audit.MemoryStore }

func (r recorder) Record(e audit.Event) { _ = r.store.Insert(context.Background(), []audit.Event{e}) }

// outbox is where the example "sends" codes.
type outbox struct {
	mu    sync.Mutex
	codes map[string]string
}

func (o *outbox) send(to, code string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.codes[to] = code
}

func (o *outbox) code(to string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.codes[to]
}

type browser struct {
	t      *testing.T
	base   string
	client *http.Client
	guard  *sdk.Client
}

func newBrowser(t *testing.T, base string, guard *sdk.Client) *browser {
	jar, _ := cookiejar.New(nil)
	return &browser{t: t, base: base, client: &http.Client{Jar: jar}, guard: guard}
}

// post sends a form and returns the status, the message and Retry-After.
func (b *browser) post(path string, form url.Values) (int, string, string) {
	b.t.Helper()
	resp, err := b.client.PostForm(b.base+path, form)
	if err != nil {
		b.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Message string `json:"message"`
		Error   struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	// Reports go in the background; let each land before the next step.
	if err := b.guard.Flush(context.Background()); err != nil {
		b.t.Fatal(err)
	}
	return resp.StatusCode, body.Message + body.Error.Message, resp.Header.Get("Retry-After")
}

func TestSignupLoginCode(t *testing.T) {
	guard := sdk.New(startGuard(t), "k-check")
	box := &outbox{codes: map[string]string{}}
	app := httptest.NewServer(newApp(slog.New(slog.DiscardHandler), guard, nil, box.send))
	defer app.Close()
	b := newBrowser(t, app.URL, guard)

	if st, msg, _ := b.post("/signup", url.Values{"email": {"Ann@Example.com"}, "password": {"correct horse battery"}}); st != 200 {
		t.Fatalf("signup: %d %s", st, msg)
	}
	if st, msg, _ := b.post("/login", url.Values{"email": {"ann@example.com"}, "password": {"wrong password!"}}); st != 401 || msg != "wrong e-mail or password" {
		t.Errorf("wrong password: %d %s", st, msg)
	}
	if st, msg, _ := b.post("/login", url.Values{"email": {"nobody@example.com"}, "password": {"wrong password!"}}); st != 401 || msg != "wrong e-mail or password" {
		t.Errorf("unknown account: %d %s; want the same answer as a wrong password", st, msg)
	}
	if st, msg, _ := b.post("/login", url.Values{"email": {"ann@example.com"}, "password": {"correct horse battery"}}); st != 200 {
		t.Fatalf("login: %d %s", st, msg)
	}
	code := box.code("ann@example.com")
	if len(code) != 6 {
		t.Fatalf("code = %q", code)
	}
	if st, _, _ := b.post("/login/code", url.Values{"email": {"ann@example.com"}, "code": {"000000x"}}); st != 401 {
		t.Errorf("wrong code: %d", st)
	}
	if st, msg, _ := b.post("/login/code", url.Values{"email": {"ann@example.com"}, "code": {code}}); st != 200 || msg != "welcome" {
		t.Fatalf("code: %d %s", st, msg)
	}
	resp, err := b.client.Get(app.URL + "/me")
	if err != nil {
		t.Fatal(err)
	}
	var me struct{ Message string }
	_ = json.NewDecoder(resp.Body).Decode(&me)
	resp.Body.Close()
	if me.Message != "ann@example.com" {
		t.Errorf("/me = %q", me.Message)
	}
}

// TestGuessingIsStopped: the default otp_verify policy locks a user after
// 5 wrong codes; the guesser is told how long to wait, generically, while
// the person's own browser, trusted by their successful login, still gets
// in (a user lockout spares trusted devices).
func TestGuessingIsStopped(t *testing.T) {
	guard := sdk.New(startGuard(t), "k-check")
	box := &outbox{codes: map[string]string{}}
	app := httptest.NewServer(newApp(slog.New(slog.DiscardHandler), guard, nil, box.send))
	defer app.Close()
	owner, guesser := newBrowser(t, app.URL, guard), newBrowser(t, app.URL, guard)
	owner.post("/signup", url.Values{"email": {"bo@example.com"}, "password": {"correct horse battery"}})
	if st, _, _ := owner.post("/login", url.Values{"email": {"bo@example.com"}, "password": {"correct horse battery"}}); st != 200 {
		t.Fatalf("login: %d", st)
	}
	for range 5 {
		guesser.post("/login/code", url.Values{"email": {"bo@example.com"}, "code": {"999999x"}})
	}
	st, msg, retry := guesser.post("/login/code", url.Values{"email": {"bo@example.com"}, "code": {"123456"}})
	if st != http.StatusTooManyRequests || retry == "" || !strings.HasPrefix(msg, "Too many attempts. Try again in ") {
		t.Errorf("after 5 wrong codes: %d %q Retry-After %q; want 429 with the wait", st, msg, retry)
	}
	if st, msg, _ := owner.post("/login/code", url.Values{"email": {"bo@example.com"}, "code": {box.code("bo@example.com")}}); st != 200 {
		t.Errorf("the owner's trusted browser: %d %q; want 200", st, msg)
	}
}

// TestLoginFloodFromOneAddress: the default login policy denies a user at
// one address after 10 failures; a fresh browser elsewhere is unaffected.
func TestLoginFloodFromOneAddress(t *testing.T) {
	guard := sdk.New(startGuard(t), "k-check")
	ip, err := sdk.TrustProxies("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	app := httptest.NewServer(newApp(slog.New(slog.DiscardHandler), guard, ip, func(string, string) {}))
	defer app.Close()
	attacker := newBrowser(t, app.URL, guard)
	from := func(addr string) func(*http.Request) {
		return func(r *http.Request) { r.Header.Set("X-Forwarded-For", addr) }
	}
	post := func(b *browser, set func(*http.Request), form url.Values) *http.Response {
		req, _ := http.NewRequest("POST", app.URL+"/login", strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		set(req)
		resp, err := b.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		_ = guard.Flush(context.Background())
		return resp
	}
	form := url.Values{"email": {"cy@example.com"}, "password": {"guess guess guess"}}
	for range 10 {
		post(attacker, from("203.0.113.66"), form)
	}
	if resp := post(attacker, from("203.0.113.66"), form); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("11th failure from one address: %d", resp.StatusCode)
	}
	if resp := post(newBrowser(t, app.URL, guard), from("198.51.100.5"), form); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("same user elsewhere: %d; want 401 (not locked there)", resp.StatusCode)
	}
}
