package reload

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/alert"
)

const checkKey = "k-check-0123456789abcdef"

// Two policies whose answers tell them apart: each names its own rules,
// with its own limits, on its own dimensions. Both admit every request of
// the test (their limits are far above its traffic), so any failure or
// denial is the reload's fault.
const (
	policyA = `key_secret: reload-secret-0123456789
api_keys:
  - {name: auth, scopes: [check], key: "` + checkKey + `"}
  - {name: only-a, scopes: [check], key: "k-only-a-0123456789abcdef"}
  - {name: review, scopes: ["audit:read"], key: "k-review-0123456789abcdef"}
actions:
  login:
    limits:
      - {name: a-ip, dimension: ip, limit: 1000000, window: 1h}
      - {name: a-user, dimension: user, limit: 1000000, window: 1h}
`
	policyB = `key_secret: reload-secret-0123456789
api_keys:
  - {name: auth, scopes: [check], key: "` + checkKey + `"}
  - {name: only-b, scopes: [check], key: "k-only-b-0123456789abcdef"}
  - {name: review, scopes: ["audit:read"], key: "k-review-0123456789abcdef"}
actions:
  login:
    limits:
      - {name: b-ip, dimension: ip, limit: 999999, window: 1h}
      - {name: b-device, dimension: device, limit: 999999, window: 1h}
lists:
  deny: {users: [blocked@example.com]}
`
)

// wantLimits are each policy's rules as a check answer lists them.
var wantLimits = map[string]map[string]int{
	"A": {"a-ip": 1000000, "a-user": 1000000},
	"B": {"b-ip": 999999, "b-device": 999999},
}

// TestReloadUnderLoad alternates the two policies by reload while workers
// keep checking: no request fails, and every answer is the whole of exactly
// one policy.
func TestReloadUnderLoad(t *testing.T) {
	s := newStack(t, policyA, nil)
	const workers, reloads = 8, 40
	var (
		stop     atomic.Bool
		answered atomic.Int64
		seen     [2]atomic.Int64 // answers of A, of B
		wg       sync.WaitGroup
		progress = make(chan struct{}, 1024)
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers}, Timeout: 10 * time.Second}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				body := `{"action":"login","user":"u` + strconv.Itoa(w) + `-` + strconv.Itoa(i) + `@example.com","ip":"192.0.2.` +
					strconv.Itoa(1+i%250) + `","device":"d-` + strconv.Itoa(w) + `"}`
				status, a, err := s.check(client, checkKey, body)
				if err != nil || status != http.StatusOK {
					t.Errorf("worker %d: check = %d, %v; want 200 whatever the reloads", w, status, err)
					return
				}
				switch policyOf(a) {
				case "A":
					seen[0].Add(1)
				case "B":
					seen[1].Add(1)
				default:
					t.Errorf("worker %d: answer %+v matches neither policy whole", w, a)
					return
				}
				answered.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(workersDone)
	}()
	waitChecks := func(n int) {
		for range n {
			select {
			case <-progress:
			case <-workersDone:
				t.Fatal("every worker stopped (see the errors above)")
			}
		}
	}
	for i := range reloads {
		// Let some checks run on the current policy first.
		waitChecks(5)
		next := policyB
		if i%2 == 1 {
			next = policyA
		}
		s.write(t, next)
		if err := s.r.Reload(); err != nil {
			t.Fatalf("reload %d: %v", i, err)
		}
	}
	waitChecks(5)
	stop.Store(true)
	<-workersDone
	t.Logf("%d checks answered across %d reloads: %d by A, %d by B", answered.Load(), reloads, seen[0].Load(), seen[1].Load())
	if seen[0].Load() == 0 || seen[1].Load() == 0 {
		t.Errorf("answers by A, B = %d, %d: want both policies to have decided", seen[0].Load(), seen[1].Load())
	}
	if got, want := len(s.rec.admin()), reloads; got != want {
		t.Errorf("%d admin events, want one per reload (%d)", got, want)
	}
	if got, want := strings.Count(s.log.String(), `msg="config reloaded"`), reloads; got != want {
		t.Errorf("%d 'config reloaded' log lines, want %d", got, want)
	}
}

// TestReloadAppliesEverything: after a reload the new policy, lists and API
// keys hold, the old ones no longer do, and the reload is audited.
func TestReloadAppliesEverything(t *testing.T) {
	s := newStack(t, policyA, nil)
	client := s.srv.Client()
	const blocked = `{"action":"login","user":"blocked@example.com","ip":"192.0.2.1","device":"d"}`
	steps := []struct {
		name       string
		key, body  string
		wantStatus int
		wantReason string
	}{
		{"A's own key", "k-only-a-0123456789abcdef", blocked, http.StatusOK, "ok"},
		{"B's key before the reload", "k-only-b-0123456789abcdef", blocked, http.StatusUnauthorized, ""},
		{"reload to B", "", "", 0, ""},
		{"A's key after the reload", "k-only-a-0123456789abcdef", blocked, http.StatusUnauthorized, ""},
		{"B's key", "k-only-b-0123456789abcdef", blocked, http.StatusOK, "denylisted"},
	}
	for _, st := range steps {
		if st.key == "" {
			s.write(t, policyB)
			if err := s.r.Reload(); err != nil {
				t.Fatalf("reload: %v", err)
			}
			continue
		}
		status, a, _ := s.check(client, st.key, st.body)
		if status != st.wantStatus || (st.wantReason != "" && a.Reason != st.wantReason) {
			t.Errorf("%s: status %d reason %q, want %d %q", st.name, status, a.Reason, st.wantStatus, st.wantReason)
		}
	}
	ev := s.rec.admin()
	if len(ev) != 1 {
		t.Fatalf("admin events = %+v, want one", ev)
	}
	if got := ev[0]; got.Action != "reload" || got.APIKey != "" || !strings.Contains(got.Note, s.path) {
		t.Errorf("admin event = %+v, want action reload, no api key, a note naming %s", got, s.path)
	}
}

// TestReloadKeepsRestartSettings: settings that need a restart are logged as
// such and keep their running values; the rest of the file applies.
func TestReloadKeepsRestartSettings(t *testing.T) {
	s := newStack(t, policyA, nil)
	before := s.r.Current().Config
	changed := strings.Replace(policyB, "key_secret: reload-secret-0123456789", "key_secret: another-secret-0123456789\nlisten: 127.0.0.1:9999\ndatabase_url: postgres://x@127.0.0.1/guard", 1)
	s.write(t, changed)
	if err := s.r.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	after := s.r.Current().Config
	if after.Listen != before.Listen || after.DatabaseURL != before.DatabaseURL || !bytes.Equal(after.Guard.KeySecret, before.Guard.KeySecret) {
		t.Errorf("after the reload listen %q database %q: want the running %q and %q and the same key secret",
			after.Listen, after.DatabaseURL, before.Listen, before.DatabaseURL)
	}
	if _, ok := after.Guard.Policy.Actions["login"]; !ok || after.Guard.Policy.Actions["login"].Limits[0].Name != "b-ip" {
		t.Errorf("policy after the reload = %+v, want B's", after.Guard.Policy)
	}
	log := s.log.String()
	for _, k := range []string{"listen", "database_url", "key_secret"} {
		if !strings.Contains(log, `msg="config reload: this setting needs a restart; the running value is kept" setting=`+k) {
			t.Errorf("log lacks the restart notice for %s:\n%s", k, log)
		}
	}
}

// TestInvalidReloadChangesNothing: an invalid file leaves the running
// runtime in place, logs every problem and alerts config_rejected.
func TestInvalidReloadChangesNothing(t *testing.T) {
	var (
		mu   sync.Mutex
		got  []alert.Payload
		hook = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var p alert.Payload
			if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
				t.Errorf("alert body: %v", err)
			}
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
		}))
	)
	defer hook.Close()
	alerts := alert.New(nil, alert.Config{WebhookURL: hook.URL, Instance: "reload-test"}, nil, nil)
	s := newStack(t, policyA, alerts)
	before := s.r.Current()
	s.write(t, policyA+"  signup:\n    limits:\n      - {dimension: ip, limit: 0, window: 1h}\nbogus: 1\n")
	if err := s.r.Reload(); err == nil {
		t.Fatal("reload of an invalid file = nil error")
	}
	if s.r.Current() != before {
		t.Error("an invalid reload replaced the running runtime")
	}
	status, a, _ := s.check(s.srv.Client(), checkKey, `{"action":"login","user":"blocked@example.com","ip":"192.0.2.1"}`)
	if status != http.StatusOK || policyOf(a) != "A" {
		t.Errorf("after the invalid reload: %d %+v, want policy A's answer", status, a)
	}
	log := s.log.String()
	for _, p := range []string{`unknown key \"bogus\"`, "limit must be between 1 and"} {
		if !strings.Contains(log, p) {
			t.Errorf("log lacks the problem %q:\n%s", p, log)
		}
	}
	if err := alerts.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Event != "config_rejected" || !strings.Contains(got[0].Detail, "bogus") {
		t.Errorf("alerts = %+v, want one config_rejected naming the problem", got)
	}
	if ev := s.rec.admin(); len(ev) != 0 {
		t.Errorf("admin events = %+v, want none for a rejected reload", ev)
	}
	if !slices.Contains(alert.Events(), alert.ConfigRejected) {
		t.Error("alert.Events() lacks config_rejected (no metrics series)")
	}
}

// TestReloadRefusesLosingEveryKey: a file that would leave Guard without
// API keys (emptied, or caught half written by an editor) is not
// reloaded: every call would be 401 at once. It is rejected and alerted
// like an invalid file.
func TestReloadRefusesLosingEveryKey(t *testing.T) {
	s := newStack(t, policyA, nil)
	before := s.r.Current()
	s.write(t, "")
	err := s.r.Reload()
	if err == nil || !strings.Contains(err.Error(), "no api_keys") {
		t.Fatalf("reload of an empty file = %v, want a refusal naming api_keys", err)
	}
	if s.r.Current() != before {
		t.Error("the refused reload replaced the running runtime")
	}
	if status, _, _ := s.check(s.srv.Client(), checkKey, `{"action":"login","user":"k@example.com","ip":"192.0.2.1"}`); status != http.StatusOK {
		t.Errorf("after the refused reload: %d, want the running keys to work", status)
	}
}

// TestReloadKeepsSignOuts: a review session signed out before a reload
// stays signed out after it (the handlers share api.State), while one
// still signed in stays valid.
func TestReloadKeepsSignOuts(t *testing.T) {
	s := newStack(t, policyA, nil)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	post := func(path, cookie string, v url.Values) *http.Response {
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL+path, strings.NewReader(v.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Accept", "text/html")
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	page := func(cookie string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, s.srv.URL+"/ui/events", nil)
		req.Header.Set("Accept", "text/html")
		req.Header.Set("Cookie", cookie)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	signIn := func() string {
		resp := post("/ui/login", "", url.Values{"key": {"k-review-0123456789abcdef"}})
		if resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
			t.Fatalf("sign-in = %d with cookies %v, want 303 and a session", resp.StatusCode, resp.Cookies())
		}
		return resp.Cookies()[0].Name + "=" + resp.Cookies()[0].Value
	}
	out, in := signIn(), signIn()
	status, body := page(out)
	const marker = `name="csrf" value="`
	i := strings.Index(body, marker)
	if status != http.StatusOK || i < 0 {
		t.Fatalf("events page = %d, want 200 with a CSRF token", status)
	}
	csrf := body[i+len(marker):]
	csrf = csrf[:strings.IndexByte(csrf, '"')]
	if resp := post("/ui/logout", out, url.Values{"csrf": {csrf}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out = %d, want 303", resp.StatusCode)
	}
	s.write(t, policyB)
	if err := s.r.Reload(); err != nil {
		t.Fatal(err)
	}
	if status, _ := page(out); status == http.StatusOK {
		t.Errorf("the signed-out session's cookie opens the review pages again after a reload")
	}
	if status, _ := page(in); status != http.StatusOK {
		t.Errorf("a signed-in session after a reload: %d, want 200", status)
	}
}
