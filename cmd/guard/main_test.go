package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// envRunMain makes the test binary run guard's main instead of the tests,
// so a test can start a real guard process (main's own signal handling
// included) by re-executing itself.
const envRunMain = "GUARD_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envRunMain) == "1" {
		// os.Args is the guard command line the test chose; the testing
		// flags are never parsed, so they cannot interfere.
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// guardProcess is `guard serve` running as a child process: this test
// binary re-executed with envRunMain set.
type guardProcess struct {
	cmd    *exec.Cmd
	addr   string // host:port it listens on
	base   string // http://host:port
	log    *logWatcher
	stdout bytes.Buffer
	exited chan struct{} // closed when the process has exited
	err    error         // cmd.Wait's result, set before exited closes
}

// running reports whether the process has not exited yet.
func (p *guardProcess) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// wait waits at most d for the process to exit and returns its exit code,
// or -1 when it did not exit in time or died of a signal.
func (p *guardProcess) wait(d time.Duration) (code int, exitedInTime bool) {
	select {
	case <-p.exited:
	case <-time.After(d):
		return -1, false
	}
	var ee *exec.ExitError
	switch {
	case p.err == nil:
		return 0, true
	case errors.As(p.err, &ee):
		return ee.ExitCode(), true
	default:
		return -1, true
	}
}

// startGuardProcess writes config to a file and starts `guard serve
// --config FILE --log-format json extra...` as a child process with env
// added to an environment stripped of the caller's GUARD_ variables. It
// returns once the process logs its listen address; the process is killed
// when the test ends if it is still running.
func startGuardProcess(t *testing.T, config string, env map[string]string, extra ...string) *guardProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("find the test binary: %v", err)
	}
	args := append([]string{"serve", "--config", path, "--log-format", "json"}, extra...)
	p := &guardProcess{cmd: exec.Command(exe, args...), log: newLogWatcher(), exited: make(chan struct{})}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GUARD_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Env = append(p.cmd.Env, envRunMain+"=1")
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout = &p.stdout
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start guard process: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		if p.running() {
			_ = p.cmd.Process.Kill()
		}
		<-p.exited
	})
	select {
	case p.addr = <-p.log.addr:
		p.base = "http://" + p.addr
	case <-p.exited:
		t.Fatalf("guard process exited at start: %v; log:\n%s", p.err, p.log.dump())
	case <-time.After(30 * time.Second):
		t.Fatalf("guard process did not listen within 30s; log:\n%s", p.log.dump())
	}
	return p
}

// logSummary is the process's log without the per-request lines, which
// would bury the rest after a burst.
func (p *guardProcess) logSummary() string {
	p.log.mu.Lock()
	defer p.log.mu.Unlock()
	var b strings.Builder
	skipped := 0
	for _, m := range p.log.lines {
		if m["msg"] == "request" {
			skipped++
			continue
		}
		j, _ := json.Marshal(m)
		b.Write(j)
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "(%d request lines left out)\n", skipped)
	return b.String()
}

func noEnv(string) string { return "" }

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}
