package guardgin_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
	"github.com/guardhq/guard/sdk/guardgin"
)

// startGuard runs a real Guard ($GUARD_BIN, or one built from
// ../../cmd/guard) on a free port with the in-memory stores.
func startGuard(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("GUARD_BIN")
	dir := t.TempDir()
	if bin == "" {
		root, _ := filepath.Abs("../..")
		bin = filepath.Join(dir, "guard")
		build := exec.Command("go", "build", "-o", bin, "./cmd/guard")
		build.Dir = root
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("go build ./cmd/guard (or set GUARD_BIN): %v\n%s", err, out)
		}
	}
	cfg := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:0\nkey_secret: guardgin-test-secret-0123456789\n"+
		"api_keys:\n  - {name: auth-service, scopes: [check], key: k-check}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", "--config", cfg, "--log-format", "json")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir}
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var l struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == "guard listening" {
				addr <- l.Addr
			}
		}
	}()
	select {
	case a := <-addr:
		return "http://" + a
	case <-time.After(20 * time.Second):
		t.Fatal("guard did not start")
	}
	return ""
}

func TestGinMiddleware(t *testing.T) {
	gin.SetMode(gin.TestMode)
	client := sdk.New(startGuard(t), "k-check")
	r := gin.New()
	r.POST("/login", guardgin.Middleware(&sdk.Middleware{
		Client: client, Action: "login",
		User: func(r *http.Request) string { return r.PostFormValue("email") },
	}), func(c *gin.Context) {
		a := guardgin.AttemptFrom(c)
		if a == nil || sdk.AttemptFrom(c.Request.Context()) != a {
			c.String(http.StatusInternalServerError, "no attempt")
			return
		}
		a.Report(c.Request.Context(), sdk.OutcomeFailure)
		c.String(http.StatusUnauthorized, "wrong e-mail or password")
	})
	app := httptest.NewServer(r)
	defer app.Close()

	var last *http.Response
	for i := range 11 {
		resp, err := http.Post(app.URL+"/login", "application/x-www-form-urlencoded", strings.NewReader("email=gina@example.com"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if i < 10 && resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("attempt %d: %d", i+1, resp.StatusCode)
		}
		last = resp
		if err := client.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if last.StatusCode != http.StatusTooManyRequests || last.Header.Get("Retry-After") != "60" || last.Header.Get("RateLimit") == "" {
		t.Errorf("11th attempt: %d %v; want 429 with Retry-After 60 and RateLimit", last.StatusCode, last.Header)
	}
}

// TestModuleGraph: the gin middleware brings gin and the SDK, none of the
// server's dependencies.
func TestModuleGraph(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "all").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -m all: %v\n%s", err, out)
	}
	for _, server := range []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/golang-migrate",
		"github.com/prometheus", "go.yaml.in/yaml", "github.com/guardhq/guard "} {
		if strings.Contains(string(out), server) {
			t.Errorf("module graph holds %s:\n%s", server, out)
		}
	}
	if !strings.Contains(string(out), "github.com/guardhq/guard/sdk ") {
		t.Errorf("module graph lacks the SDK:\n%s", out)
	}
}

// TestGinChallenge: a challenged sign-up (the built-in policy challenges a
// device after 5 an hour) aborts the chain with 429 challenge_required; a
// verified proof lets the handler run.
func TestGinChallenge(t *testing.T) {
	gin.SetMode(gin.TestMode)
	client := sdk.New(startGuard(t), "k-check")
	r := gin.New()
	ran := 0
	r.POST("/signup", guardgin.Middleware(&sdk.Middleware{
		Client: client, Action: "signup", DeviceHeader: "X-Device",
		ChallengePassed: func(r *http.Request) bool { return r.Header.Get("X-Captcha") == "verified" },
	}), func(c *gin.Context) {
		ran++
		c.Status(http.StatusNoContent)
	})
	app := httptest.NewServer(r)
	defer app.Close()
	post := func(captcha string) *http.Response {
		req, _ := http.NewRequest("POST", app.URL+"/signup", nil)
		req.Header.Set("X-Device", "d-gin")
		if captcha != "" {
			req.Header.Set("X-Captcha", captcha)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for i := range 5 {
		if resp := post(""); resp.StatusCode != http.StatusNoContent {
			t.Fatalf("sign-up %d: %d", i+1, resp.StatusCode)
		}
	}
	resp := post("")
	var body struct{ Error struct{ Code string } }
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != http.StatusTooManyRequests || body.Error.Code != "challenge_required" || resp.Header.Get("Retry-After") != "" || ran != 5 {
		t.Errorf("sixth sign-up: %d %q Retry-After %q, handler ran %d times; want 429 challenge_required, no Retry-After, 5 runs",
			resp.StatusCode, body.Error.Code, resp.Header.Get("Retry-After"), ran)
	}
	if resp := post("verified"); resp.StatusCode != http.StatusNoContent || ran != 6 {
		t.Errorf("with a verified proof: %d, handler ran %d times; want 204, 6", resp.StatusCode, ran)
	}
}
