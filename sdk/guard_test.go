package sdk_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

// The SDK's examples and end-to-end tests run against a real Guard: the
// binary of this repository (built once per test run, or GUARD_BIN), one
// fresh process per example on a free loopback port, with the in-memory
// limiter and audit store. The SDK module cannot import the server's
// packages, and must not: that is what keeps it free of the server's
// dependencies.

// guardBin is the Guard binary the tests start.
var guardBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := guardBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sdk tests: no Guard binary to test against:", err)
		os.Exit(1)
	}
	guardBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// guardBinary returns $GUARD_BIN, or builds ../cmd/guard.
func guardBinary() (string, func(), error) {
	if bin := os.Getenv("GUARD_BIN"); bin != "" {
		return bin, func() {}, nil
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return "", nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "guard")); err != nil {
		return "", nil, fmt.Errorf("set GUARD_BIN outside the Guard repository: %w", err)
	}
	dir, err := os.MkdirTemp("", "guard-sdk-test-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "guard")
	build := exec.Command("go", "build", "-o", bin, "./cmd/guard")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build ./cmd/guard: %v\n%s", err, out)
	}
	return bin, func() { os.RemoveAll(dir) }, nil
}

// testClient is a client of a test Guard with a 5 s timeout: the SDK's
// default (300 ms) is a production budget, and a loaded CI machine can take
// longer for a call whose timing is not what the test is about.
func testClient(url, key string) *sdk.Client {
	return sdk.New(url, key, sdk.WithTimeout(5*time.Second))
}

// Keys of every test Guard.
const (
	keyCheck = "k-check"
	keyAdmin = "k-admin"
	keyAudit = "k-audit"
)

// testConfig is the config of a test Guard; extra is appended (top-level
// YAML keys).
func testConfig(extra string) string {
	return `listen: 127.0.0.1:0
key_secret: sdk-test-secret-0123456789abcdef
instance: guard-example
api_keys:
  - {name: auth-service, scopes: [check], key: "` + keyCheck + `"}
  - {name: ops, scopes: [admin], key: "` + keyAdmin + `"}
  - {name: secteam, scopes: ["audit:read"], key: "` + keyAudit + `"}
audit: {flush_interval: 10ms}
` + extra
}

// startGuard starts a Guard process with the default policy and returns
// its base URL and a function that stops it.
func startGuard() (string, func()) {
	url, stop, err := startGuardConfig(testConfig(""))
	if err != nil {
		panic(err)
	}
	return url, stop
}

func startGuardConfig(config string) (string, func(), error) {
	dir, err := os.MkdirTemp("", "guard-sdk-")
	if err != nil {
		return "", nil, err
	}
	file := filepath.Join(dir, "guard.yaml")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(guardBin, "serve", "--config", file, "--log-format", "json")
	// Nothing from the caller's environment (GUARD_REDIS_URL, ...).
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + os.TempDir()}
	cmd.Dir = dir
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		os.RemoveAll(dir)
	}
	addr := make(chan string, 1)
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "guard listening" {
				addr <- line.Addr
				break
			}
			log.Write(sc.Bytes())
			log.WriteByte('\n')
		}
		close(addr)
		_, _ = io.Copy(io.Discard, stderr)
	}()
	select {
	case a, ok := <-addr:
		if !ok {
			stop()
			return "", nil, fmt.Errorf("guard did not start:\n%s", log.String())
		}
		return "http://" + a, stop, nil
	case <-time.After(20 * time.Second):
		stop()
		return "", nil, fmt.Errorf("guard did not start in 20s")
	}
}

// startTestGuard is startGuardConfig for a test.
func startTestGuard(t *testing.T, extra string) string {
	t.Helper()
	url, stop, err := startGuardConfig(testConfig(extra))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return url
}
