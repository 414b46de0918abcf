package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Helpers that run a real `guard serve` in the test process; the servers
// it talks to come from internal/testenv.

// logWatcher is the stderr of a guard under test: it keeps every JSON log
// line and announces the listen address.
type logWatcher struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	lines []map[string]any
	addr  chan string
}

func newLogWatcher() *logWatcher { return &logWatcher{addr: make(chan string, 1)} }

func (w *logWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	for {
		line, err := w.buf.ReadBytes('\n')
		if err != nil {
			w.buf.Write(line) // incomplete: keep for the next write
			break
		}
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		w.lines = append(w.lines, m)
		if m["msg"] == "guard listening" {
			if a, ok := m["addr"].(string); ok {
				select {
				case w.addr <- a:
				default:
				}
			}
		}
	}
	return len(p), nil
}

// has reports whether a log line with this level and message was written.
func (w *logWatcher) has(level, msgPart string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, m := range w.lines {
		if m["level"] == level && bytes.Contains([]byte(fmt.Sprint(m["msg"])), []byte(msgPart)) {
			return true
		}
	}
	return false
}

func (w *logWatcher) dump() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b bytes.Buffer
	for _, m := range w.lines {
		j, _ := json.Marshal(m)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// runningGuard is a `guard serve` started by startGuard.
type runningGuard struct {
	base   string // http://127.0.0.1:port
	log    *logWatcher
	cancel context.CancelFunc
	done   chan struct{} // closed when run has returned
	err    error         // run's error, set before done closes
}

// stop cancels the server's context (SIGINT/SIGTERM in main) and returns
// run's error.
func (g *runningGuard) stop(t *testing.T) error {
	t.Helper()
	g.cancel()
	select {
	case <-g.done:
		return g.err
	case <-time.After(30 * time.Second):
		t.Fatalf("guard did not stop within 30s; log:\n%s", g.log.dump())
		return nil
	}
}

// startGuard writes config to a file and runs `guard serve --config FILE
// extra...` with env as the environment, until the test ends.
func startGuard(t *testing.T, config string, env map[string]string, extra ...string) *runningGuard {
	t.Helper()
	path := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &runningGuard{log: newLogWatcher(), cancel: cancel, done: make(chan struct{})}
	args := append([]string{"guard", "serve", "--config", path, "--log-format", "json"}, extra...)
	var stdout bytes.Buffer
	go func() {
		g.err = run(ctx, args, envMap(env), &stdout, g.log)
		close(g.done)
	}()
	select {
	case addr := <-g.log.addr:
		g.base = "http://" + addr
	case <-g.done:
		cancel()
		t.Fatalf("guard exited at start: %v; log:\n%s", g.err, g.log.dump())
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatalf("guard did not listen within 30s; log:\n%s", g.log.dump())
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-g.done:
		case <-time.After(30 * time.Second):
		}
	})
	return g
}

// scanLines splits s into lines (for help output checks).
func scanLines(s string) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewBufferString(s))
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out
}
