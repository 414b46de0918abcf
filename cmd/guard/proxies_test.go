package main

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// The proxy set-ups of docs/proxies run here as written, with only the
// documented placeholders replaced: nginx and Caddy for real when they are
// installed (Debian: nginx-light, caddy; scripts/test-sdks.sh installs
// them), Envoy as a config test that replays what Envoy sends.

const proxyKey = "k-proxy-check-0001"

// proxyGuard runs Guard (in-memory stores) behind a proxy on loopback: a
// login allowed 3 times a minute per IP and once per user, so a user
// header that leaks from the client shows as a denial.
func proxyGuard(t *testing.T, allowStatus int) *runningGuard {
	t.Helper()
	return startGuard(t, `listen: 127.0.0.1:0
key_secret: proxy-test-secret-0123456789
api_keys:
  - {name: edge-proxy, scopes: [check], key: "`+proxyKey+`"}
actions:
  login:
    limits:
      - {dimension: ip, limit: 3, window: 1m}
      - {dimension: user, limit: 1, window: 1m}
forward_auth: {trusted_proxies: ["127.0.0.1"], allow_status: `+strconv.Itoa(allowStatus)+`}
`, nil)
}

// proxyApp is the application behind the proxy; it records the requests
// that reach it.
type proxyApp struct {
	*httptest.Server
	mu   sync.Mutex
	seen []*http.Request
}

func newProxyApp(t *testing.T) *proxyApp {
	a := &proxyApp{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen = append(a.seen, r)
		a.mu.Unlock()
		_, _ = io.WriteString(w, "login page")
	}))
	t.Cleanup(a.Close)
	return a
}

func (a *proxyApp) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.seen)
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// proxyDoc reads docs/proxies/name with its placeholders replaced: the
// key always, and each pair of repl (every one must occur).
func proxyDoc(t *testing.T, name string, repl ...[2]string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "proxies", name))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, r := range append(repl, [2]string{"CHANGE-ME-check-key", proxyKey}) {
		if !strings.Contains(s, r[0]) {
			t.Fatalf("docs/proxies/%s lacks the placeholder %q", name, r[0])
		}
		s = strings.ReplaceAll(s, r[0], r[1])
	}
	return s
}

// hostPort is base without its scheme.
func hostPort(base string) string { return strings.TrimPrefix(base, "http://") }

// waitListening waits until something accepts on port.
func waitListening(t *testing.T, port int, log func() string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			c.Close()
			return
		}
	}
	t.Fatalf("the proxy did not listen on %d:\n%s", port, log())
}

// runProxy starts a proxy process, in its own process group, until the
// test ends; then the group is killed (nginx's workers with its master).
func runProxy(t *testing.T, port int, name string, args ...string) {
	t.Helper()
	out, err := os.Create(filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "XDG_DATA_HOME="+t.TempDir(), "XDG_CONFIG_HOME="+t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A graceful stop first, so nginx's master reaps its workers.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		out.Close()
	})
	waitListening(t, port, func() string {
		b, _ := os.ReadFile(out.Name())
		return string(b)
	})
}

func proxyPost(t *testing.T, url string, headers ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader("email=alice%40example.com&password=x"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// checkProxy drives a proxy at base through the login scenario: a client
// that sends its own X-Guard-User, X-Guard-Phone (not even a number: a
// Guard 400 nginx would turn into a 500), X-Real-IP and X-Forwarded-For,
// and a device cookie too long for Guard, gets neither a 500 nor a say in
// the subject; the fourth login from the address is a 429 with Retry-After,
// the RateLimit headers and a generic body.
func checkProxy(t *testing.T, base string, app *proxyApp, relaysRateLimitOnAllow bool) {
	t.Helper()
	login := base + "/login"
	spoof := []string{"X-Guard-User", "victim@example.com", "X-Guard-Phone", "not-a-number", "X-Real-IP", "198.51.100.1"}

	resp, body := proxyPost(t, login, append(spoof, "Cookie", "device_id="+strings.Repeat("d", 300))...)
	if resp.StatusCode != http.StatusOK || body != "login page" {
		t.Fatalf("first login (long device cookie): %d %q", resp.StatusCode, body)
	}
	if relaysRateLimitOnAllow && (resp.Header.Get("RateLimit") == "" || resp.Header.Get("RateLimit-Policy") == "") {
		t.Errorf("allowed login lacks RateLimit headers: %v", resp.Header)
	}
	// The same X-Guard-User again: allowed, because the proxy did not pass
	// it (Guard's user rule allows one login per user).
	if resp, body := proxyPost(t, login, spoof...); resp.StatusCode != http.StatusOK {
		t.Fatalf("second login: %d %q (the client's X-Guard-User reached Guard?)", resp.StatusCode, body)
	}
	// A client-sent X-Forwarded-For does not move the attempt to another
	// address.
	if resp, body := proxyPost(t, login, "X-Forwarded-For", "198.51.100.2"); resp.StatusCode != http.StatusOK {
		t.Fatalf("third login: %d %q", resp.StatusCode, body)
	}
	resp, body = proxyPost(t, login, "X-Forwarded-For", "198.51.100.3")
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth login: %d %q; want 429 (the client's X-Forwarded-For was believed?)", resp.StatusCode, body)
	}
	if ra, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
		t.Errorf("Retry-After = %q", resp.Header.Get("Retry-After"))
	}
	if !strings.Contains(resp.Header.Get("RateLimit"), "login/ip") || !strings.Contains(resp.Header.Get("RateLimit-Policy"), "q=3") {
		t.Errorf("RateLimit = %q, RateLimit-Policy = %q", resp.Header.Get("RateLimit"), resp.Header.Get("RateLimit-Policy"))
	}
	if !strings.Contains(body, "too many attempts") || strings.Contains(body, "login/") || strings.Contains(body, "decision") {
		t.Errorf("denial body %q: want the generic message only", body)
	}
	if n := app.count(); n != 3 {
		t.Errorf("the application saw %d requests; want 3", n)
	}
	for _, r := range app.seen {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the Guard key reached the application: %v", r.Header)
		}
	}
}

func TestProxyNginx(t *testing.T) {
	nginx, err := exec.LookPath("nginx")
	if err != nil {
		t.Skip("nginx is not installed (Debian: apt-get install nginx-light); skipping the nginx proxy test")
	}
	g := proxyGuard(t, 204)
	app := newProxyApp(t)
	port := freePort(t)
	dir := t.TempDir()
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n"
	}
	conf := user + "worker_processes 1;\npid " + dir + "/nginx.pid;\nerror_log " + dir + "/error.log;\n" +
		"events {}\nhttp {\n access_log off;\n" +
		" client_body_temp_path " + dir + "/body;\n proxy_temp_path " + dir + "/proxy;\n" +
		" fastcgi_temp_path " + dir + "/fastcgi;\n uwsgi_temp_path " + dir + "/uwsgi;\n scgi_temp_path " + dir + "/scgi;\n" +
		proxyDoc(t, "nginx.conf", [2]string{"127.0.0.1:8080", hostPort(g.base)}, [2]string{"127.0.0.1:3000", hostPort(app.URL)},
			[2]string{"listen 8000", "listen 127.0.0.1:" + strconv.Itoa(port)}) + "\n}\n"
	file := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, port, nginx, "-p", dir, "-c", file, "-g", "daemon off;")
	checkProxy(t, "http://127.0.0.1:"+strconv.Itoa(port), app, true)
}

func TestProxyCaddy(t *testing.T) {
	caddy, err := exec.LookPath("caddy")
	if err != nil {
		t.Skip("caddy is not installed (Debian: apt-get install caddy); skipping the Caddy proxy test")
	}
	g := proxyGuard(t, 204)
	app := newProxyApp(t)
	port := freePort(t)
	file := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(file, []byte(proxyDoc(t, "Caddyfile",
		[2]string{"127.0.0.1:8080", hostPort(g.base)}, [2]string{"127.0.0.1:3000", hostPort(app.URL)},
		[2]string{":8000 {", "http://127.0.0.1:" + strconv.Itoa(port) + " {"})), 0o644); err != nil {
		t.Fatal(err)
	}
	runProxy(t, port, caddy, "run", "--config", file, "--adapter", "caddyfile")
	checkProxy(t, "http://127.0.0.1:"+strconv.Itoa(port), app, false)
}

// TestProxyEnvoyConfig checks docs/proxies/envoy.yaml and replays, against
// a real Guard with allow_status 200, the authorization requests Envoy's
// HTTP ext_authz makes from it: the original method, path_prefix followed
// by the original path, only the allowed headers plus headers_to_add, and
// X-Forwarded-For with the client address appended (use_remote_address).
// Envoy allows only on 200 and passes allowed_client_headers of a denial.
func TestProxyEnvoyConfig(t *testing.T) {
	g := proxyGuard(t, 200)
	var doc map[string]any
	if err := yaml.Unmarshal([]byte(proxyDoc(t, "envoy.yaml", [2]string{"http://127.0.0.1:8080", g.base},
		[2]string{"port_value: 8080", "port_value: " + g.base[strings.LastIndex(g.base, ":")+1:]})), &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	get := func(v any, path ...any) any {
		t.Helper()
		for _, p := range path {
			switch k := p.(type) {
			case string:
				m, ok := v.(map[string]any)
				if !ok {
					t.Fatalf("envoy.yaml: no %q at %v", k, path)
				}
				v = m[k]
			case int:
				l, ok := v.([]any)
				if !ok || k >= len(l) {
					t.Fatalf("envoy.yaml: no [%d] at %v", k, path)
				}
				v = l[k]
			}
		}
		return v
	}
	hcm := get(doc, "static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config")
	if get(hcm, "use_remote_address") != true {
		t.Error("use_remote_address is not true: Envoy would not append the client to X-Forwarded-For")
	}
	authz := get(hcm, "http_filters", 0)
	if get(authz, "name") != "envoy.filters.http.ext_authz" {
		t.Fatalf("the first HTTP filter is %v", get(authz, "name"))
	}
	cfg := get(authz, "typed_config")
	if get(cfg, "failure_mode_allow") != false {
		t.Error("failure_mode_allow must be false")
	}
	svc := get(cfg, "http_service")
	prefix, _ := get(svc, "path_prefix").(string)
	if !strings.HasPrefix(prefix, "/v1/forward-auth?action=login&") || !strings.HasSuffix(prefix, "=") {
		t.Errorf("path_prefix %q: want /v1/forward-auth?action=login&...= so the original path lands in a parameter", prefix)
	}
	var allowed []string
	for _, p := range get(svc, "authorization_request", "allowed_headers", "patterns").([]any) {
		allowed = append(allowed, get(p, "exact").(string))
	}
	for _, h := range allowed {
		if h == "x-guard-user" || h == "x-real-ip" || h == "authorization" {
			t.Errorf("allowed_headers passes the client's %s", h)
		}
	}
	add := get(svc, "authorization_request", "headers_to_add", 0)
	if get(add, "key") != "authorization" || get(add, "value") != "Bearer "+proxyKey {
		t.Errorf("headers_to_add = %v", add)
	}
	clientHeaders := map[string]bool{}
	for _, p := range get(svc, "authorization_response", "allowed_client_headers", "patterns").([]any) {
		clientHeaders[get(p, "exact").(string)] = true
	}
	for _, h := range []string{"retry-after", "ratelimit", "ratelimit-policy"} {
		if !clientHeaders[h] {
			t.Errorf("allowed_client_headers lacks %s", h)
		}
	}
	guardAddr := get(doc, "static_resources", "clusters", 0, "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
	if get(doc, "static_resources", "clusters", 0, "name") != "guard" ||
		net.JoinHostPort(get(guardAddr, "address").(string), strconv.Itoa(get(guardAddr, "port_value").(int))) != hostPort(g.base) {
		t.Errorf("cluster guard points at %v, not Guard at %s", guardAddr, g.base)
	}

	// What Envoy sends for a client's POST /login.
	envoyCheck := func(clientXFF string, client http.Header) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", g.base+prefix+"/login", nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range allowed {
			if v := client.Get(h); v != "" {
				req.Header.Set(h, v)
			}
		}
		xff := "198.51.100.7"
		if clientXFF != "" {
			xff = clientXFF + ", " + xff
		}
		req.Header.Set("X-Forwarded-For", xff)
		req.Header.Set(get(add, "key").(string), get(add, "value").(string))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	client := http.Header{"X-Guard-User": {"victim@example.com"}, "X-Guard-Device": {"d-1"}, "X-Guard-Phone": {"not-a-number"}}
	for i := range 3 {
		if resp := envoyCheck("203.0.113."+strconv.Itoa(i), client); resp.StatusCode != http.StatusOK {
			t.Fatalf("check %d: %d; Envoy allows only on 200", i+1, resp.StatusCode)
		}
	}
	resp := envoyCheck("", client)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Fatalf("fourth check: %d; want 429", resp.StatusCode)
	}
	for h := range clientHeaders {
		if h != "content-type" && resp.Header.Get(h) == "" {
			t.Errorf("the denial lacks %s, which Envoy would pass to the client", h)
		}
	}
}
