package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPprofBuild: a guard built with -tags pprof serves net/http/pprof on
// GUARD_PPROF_ADDR, a listener of its own (internal/profiling,
// docs/performance.md "Profiling"); a build without the tag, as this test
// binary is, registers none of it.
func TestPprofBuild(t *testing.T) {
	if _, pattern := http.DefaultServeMux.Handler(httptest.NewRequest(http.MethodGet, "/debug/pprof/", nil)); pattern != "" {
		t.Errorf("a build without -tags pprof registers %q", pattern)
	}
	if testing.Short() {
		t.Skip("builds a guard binary")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build with")
	}
	bin := filepath.Join(t.TempDir(), "guard")
	if out, err := exec.Command(goBin, "build", "-tags", "pprof", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build -tags pprof: %v\n%s", err, out)
	}
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:"+strconv.Itoa(freePort(t)))
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUARD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "GUARD_PPROF_ADDR="+addr)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/debug/pprof/cmdline")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "serve") {
				t.Fatalf("/debug/pprof/cmdline: %d %q, want 200 and the command line", resp.StatusCode, body)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pprof listener on %s: %v", addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
