package reload

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// The test stack: a Reloader wired as serve wires it, over a config file
// the tests rewrite.

// recorder keeps the audit events Guard records.
type recorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *recorder) Record(e audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) admin() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []audit.Event
	for _, e := range r.events {
		if e.Kind == audit.KindAdmin {
			out = append(out, e)
		}
	}
	return out
}

// stack is a Reloader wired as serve wires it: one memory store and one
// recorder under every runtime, the config re-read from path.
type stack struct {
	path string
	r    *Reloader
	rec  *recorder
	log  *testenv.SyncBuffer
	srv  *httptest.Server
}

func newStack(t *testing.T, first string, alerts *alert.Notifier) *stack {
	t.Helper()
	s := &stack{path: filepath.Join(t.TempDir(), "guard.yaml"), rec: &recorder{}, log: &testenv.SyncBuffer{}}
	s.write(t, first)
	logger := slog.New(slog.NewTextHandler(s.log, nil))
	store := limits.NewMemory(limits.MemoryConfig{})
	t.Cleanup(func() { store.Close() })
	trail := audit.NewMemoryStore(0)
	// As serve does: one session secret (derived from key_secret, which a
	// reload keeps) and one api.State for every runtime.
	secret := []byte("session-secret")
	state := api.NewState(api.Config{SessionSecret: secret}, nil)
	build := func(cfg *config.Config, prev *Runtime) (*Runtime, error) {
		var g *abuse.Guard
		var err error
		if prev == nil {
			g, err = abuse.New(logger, cfg.Guard, store, s.rec, trail)
		} else {
			g, err = prev.Guard.Reconfigure(logger, cfg.Guard)
		}
		if err != nil {
			return nil, err
		}
		apiCfg := cfg.API
		apiCfg.SessionSecret = secret
		h, err := api.New(logger, apiCfg, api.Deps{Guard: g, Audit: trail, Cursors: audit.NewCursorCodec([]byte("cursor-secret")), State: state})
		if err != nil {
			return nil, err
		}
		return &Runtime{Config: cfg, Guard: g, Handler: h}, nil
	}
	load := func() (*config.Config, error) { return config.Load(s.path, config.Env{}) }
	cfg, err := load()
	if err != nil {
		t.Fatalf("load the first config: %v", err)
	}
	rt, err := build(cfg, nil)
	if err != nil {
		t.Fatalf("build the first runtime: %v", err)
	}
	rc := Config{Load: load, Build: build}
	if alerts != nil {
		rc.Alert = alerts.Event
	}
	s.r, err = New(logger, rc, rt)
	if err != nil {
		t.Fatal(err)
	}
	s.srv = httptest.NewServer(s.r)
	t.Cleanup(s.srv.Close)
	return s
}

func (s *stack) write(t *testing.T, content string) {
	t.Helper()
	// Write and rename, as editors and config management do, so a
	// reload never reads half a file.
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		t.Fatal(err)
	}
}

type checkAnswer struct {
	Decision string `json:"decision"`
	Reason   string `json:"reason"`
	Limits   []struct {
		Rule  string `json:"rule"`
		Limit int    `json:"limit"`
	} `json:"limits"`
}

func (s *stack) check(client *http.Client, key, body string) (int, checkAnswer, error) {
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/v1/check", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, checkAnswer{}, err
	}
	defer resp.Body.Close()
	var a checkAnswer
	err = json.NewDecoder(resp.Body).Decode(&a)
	return resp.StatusCode, a, err
}

// policyOf names the one policy an answer is consistent with, "" when it
// matches neither (a half-applied policy would).
func policyOf(a checkAnswer) string {
	for name, want := range wantLimits {
		got := map[string]int{}
		for _, l := range a.Limits {
			got[l.Rule] = l.Limit
		}
		if a.Decision == "allow" && a.Reason == "ok" && len(got) == len(want) {
			match := true
			for r, l := range want {
				match = match && got[r] == l
			}
			if match {
				return name
			}
		}
	}
	return ""
}
