package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// TestBacktestCommand records checks with `guard serve` into Postgres,
// then backtests them with `guard backtest` through a tighter and a
// looser candidate: the JSON report of the contract, and the trail left
// as it was.
func TestBacktestCommand(t *testing.T) {
	dbURL := testenv.Database(t, "guard_cmd_")
	g := startGuard(t, e2eConfig(t.TempDir()), map[string]string{"GUARD_DATABASE_URL": dbURL}, "--migrate")
	client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
	start := time.Now().Add(-time.Minute)
	// The recorded policy allows 3 logins a minute per address: of these
	// 5, 3 are allowed and 2 denied.
	for i := range 5 {
		user := "bt" + string(rune('a'+i)) + "@example.com"
		if _, err := client.Check(context.Background(), sdk.CheckRequest{Action: "login", User: &user, IP: strp("203.0.113.50")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	candidate := func(limit string) string {
		path := filepath.Join(t.TempDir(), "candidate.yaml")
		cfg := strings.Replace(e2eConfig(t.TempDir()), "{dimension: ip, limit: 3, window: 1m}", "{dimension: ip, limit: "+limit+", window: 1m}", 1)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	tests := []struct {
		name, limit string
		want        map[string]int64
	}{
		{"tighter", "1", map[string]int64{"allow->deny": 2, "deny->allow": 0}},
		{"looser", "10", map[string]int64{"allow->deny": 0, "deny->allow": 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := []string{"guard", "backtest", "--config", candidate(tt.limit), "--since", start.UTC().Format(time.RFC3339),
				"--action", "login", "--format", "json"}
			if err := run(context.Background(), args, envMap(map[string]string{"GUARD_DATABASE_URL": dbURL}), &stdout, &stderr); err != nil {
				t.Fatalf("backtest: %v; stderr:\n%s", err, stderr.String())
			}
			var rep struct {
				Actions map[string]struct {
					Replayed int64            `json:"replayed"`
					Changed  map[string]int64 `json:"changed"`
					Lockouts struct {
						Before *int64 `json:"before"`
						After  *int64 `json:"after"`
					} `json:"lockouts"`
					Top map[string][]struct {
						Value   string `json:"value"`
						Changed int64  `json:"changed"`
					} `json:"top"`
				} `json:"actions"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatalf("output is not the report's JSON: %v\n%s", err, stdout.String())
			}
			login, ok := rep.Actions["login"]
			if !ok || len(rep.Actions) != 1 {
				t.Fatalf("actions = %v, want login only", rep.Actions)
			}
			if login.Replayed != 5 {
				t.Errorf("replayed = %d, want 5", login.Replayed)
			}
			for k, v := range tt.want {
				if login.Changed[k] != v {
					t.Errorf("changed[%s] = %d, want %d (all: %v)", k, login.Changed[k], v, login.Changed)
				}
			}
			if login.Lockouts.Before == nil || login.Lockouts.After == nil || *login.Lockouts.Before != 0 || *login.Lockouts.After != 0 {
				t.Errorf("lockouts = %+v, want before 0 and after 0", login.Lockouts)
			}
			if ips := login.Top["ips"]; len(ips) != 1 || ips[0].Value != "203.0.113.50" || ips[0].Changed != 2 {
				t.Errorf("top ips = %+v, want 203.0.113.50 with 2 changes", ips)
			}
		})
	}
	// Without --action every action of the candidate is reported, those
	// without events with zeros.
	var stdout, stderr bytes.Buffer
	two := candidate("1")
	body, err := os.ReadFile(two)
	if err != nil {
		t.Fatal(err)
	}
	body = []byte(strings.Replace(string(body), "actions:\n", "actions:\n  signup:\n    limits:\n      - {dimension: ip, limit: 5, window: 1h}\n", 1))
	if err := os.WriteFile(two, body, 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"guard", "backtest", "--config", two, "--since", start.UTC().Format(time.RFC3339), "--format", "json"}
	if err := run(context.Background(), args, envMap(map[string]string{"GUARD_DATABASE_URL": dbURL}), &stdout, &stderr); err != nil {
		t.Fatalf("backtest: %v; stderr:\n%s", err, stderr.String())
	}
	var all struct {
		Actions map[string]struct {
			Replayed *int64           `json:"replayed"`
			Changed  map[string]int64 `json:"changed"`
			Top      map[string][]any `json:"top"`
		} `json:"actions"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &all); err != nil {
		t.Fatalf("output is not the report's JSON: %v\n%s", err, stdout.String())
	}
	if len(all.Actions) != 2 {
		t.Errorf("actions = %v, want the candidate's login and signup", all.Actions)
	}
	for _, a := range []string{"login", "signup"} {
		r, ok := all.Actions[a]
		want := int64(0)
		if a == "login" {
			want = 5
		}
		if !ok || r.Replayed == nil || *r.Replayed != want || r.Changed["allow->deny"] != map[bool]int64{true: 2}[a == "login"] || r.Top["users"] == nil {
			t.Errorf("action %s: %+v (present %v); want %d replayed, its changes and top lists", a, r, ok, want)
		}
	}
	if got := len(auditIDCounts(t, dbURL)); got != 5 {
		t.Errorf("%d events in the trail after the backtests, want the 5 recorded", got)
	}
}

func TestBacktestUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no candidate", []string{"backtest"}, "a candidate config is required"},
		{"bad format", []string{"backtest", "--config", "x.yaml", "--format", "xml"}, `unknown --format "xml"`},
		{"bad since", []string{"backtest", "--config", "x.yaml", "--since", "yesterday"}, "--since"},
		{"since offset +24:00", []string{"backtest", "--config", "x.yaml", "--since", "2026-12-04T00:00:00+24:00"}, "--since"},
		{"until offset -00:60", []string{"backtest", "--config", "x.yaml", "--until", "2026-12-04T00:00:00-00:60"}, "--until"},
		{"since after until", []string{"backtest", "--config", "x.yaml", "--since", "1h", "--until", "2h"}, "is not before"},
		{"no database", []string{"backtest", "--config", "/nonexistent/x.yaml"}, "read config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"guard"}, tt.args...), noEnv, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// An --action the candidate does not have is refused (a typo would
// otherwise report "no checks or reports in the range" and exit 0).
func TestBacktestUnknownAction(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "candidate.yaml")
	if err := os.WriteFile(cfg, []byte("instance: backtest\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"guard", "backtest", "--config", cfg, "--action", "nope"}, noEnv, &stdout, &stderr)
	want := `--action "nope": the candidate has no such action (it has login, otp_send, otp_verify, password_reset, signup)`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("backtest --action nope = %v, want an error containing %q", err, want)
	}
}
