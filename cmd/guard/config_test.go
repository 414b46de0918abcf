package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigCheck drives `guard config check` as an operator would: its
// exit status (run's error) and what it prints.
func TestConfigCheck(t *testing.T) {
	const good = "key_secret: check-secret-0123456789\napi_keys:\n  - {name: a, scopes: [check], key: k-0123456789abcdef}\nactions:\n  login:\n    limits:\n      - {dimension: ip, limit: 60, window: 1m}\n" +
		"    failures:\n      - {dimension: user, limit: 50, window: 24h}\n    lockout: {ladder: [1m, 5m]}\n"
	tests := []struct {
		name       string
		file       string
		args       []string
		env        map[string]string
		wantErr    string // "" for exit 0
		wantStdout string
		wantOutput []string // on stdout, after the file name is shortened
	}{
		{name: "valid", file: good, wantStdout: "guard.yaml: ok (1 action, 0 warnings)"},
		{name: "two actions", file: good + "  signup:\n    limits:\n      - {dimension: ip, limit: 60, window: 1m}\n", wantStdout: "guard.yaml: ok (2 actions, 0 warnings)"},
		{name: "two warnings", file: strings.Replace(good, "limit: 50", "limit: 500", 1) + "  signup:\n    limits:\n      - {dimension: ip, limit: 60, window: 1m, shadow: true}\n",
			wantStdout: "guard.yaml: ok (2 actions, 2 warnings)"},
		{name: "problems", file: "actions:\n  login:\n    limits:\n      - {dimension: usr, limit: 0, window: 1m}\nlisten: nope\n",
			wantErr: "3 problems", wantOutput: []string{"guard.yaml:4: ", `unknown dimension "usr"`, "limit must be between", "guard.yaml:5: listen"}},
		{name: "warnings pass", file: strings.Replace(good, "limit: 50", "limit: 500", 1),
			wantStdout: "guard.yaml: ok (1 action, 1 warning)\n", wantOutput: []string{"guard.yaml:9: warning: action login: 500 failures allowed per account", "NIST SP 800-63B"}},
		{name: "warnings fail with --strict", file: strings.Replace(good, "limit: 50", "limit: 500", 1), args: []string{"--strict"},
			wantErr: "1 warning (--strict)", wantStdout: "guard.yaml: fails under --strict (1 action, 1 warning)\n", wantOutput: []string{"guard.yaml:9: warning:"}},
		{name: "environment as serve reads it", file: good, env: map[string]string{"GUARD_DATABASE_URL": "mysql://x"},
			wantErr: "1 problem", wantOutput: []string{"GUARD_DATABASE_URL: scheme must be one of postgres"}},
		{name: "serve's log settings from the environment", file: good, env: map[string]string{"GUARD_LOG_FORMAT": "xml", "GUARD_LOG_LEVEL": "loud"},
			wantErr: "2 problems", wantOutput: []string{`GUARD_LOG_FORMAT: log format "xml": want text or json`, `GUARD_LOG_LEVEL: log level "loud": want debug`}},
		{name: "serve's key secret rule", file: strings.Replace(good, "key_secret: check-secret-0123456789\n", "redis_url: redis://127.0.0.1:6379/0\n", 1),
			wantErr: "1 problem", wantOutput: []string{"guard.yaml:1: key_secret is required with a Redis URL"}},
		{name: "serve's key secret rule, Redis from the environment", file: strings.Replace(good, "key_secret: check-secret-0123456789\n", "", 1),
			env: map[string]string{"GUARD_REDIS_URL": "redis://127.0.0.1:6379/0"}, wantErr: "1 problem", wantOutput: []string{"GUARD_REDIS_URL: key_secret is required"}},
		{name: "serve's spool directory: a warning of this machine", file: good + "database_url: postgres://postgres@127.0.0.1:5432/guard\naudit: {spool_dir: /dev/null/spool}\n",
			wantStdout: "1 warning", wantOutput: []string{"guard.yaml:12: warning: audit.spool_dir: cannot use /dev/null/spool: /dev/null is not a directory; serve would not start on this machine"}},
		{name: "serve's spool directory fails with --strict", file: good + "database_url: postgres://postgres@127.0.0.1:5432/guard\naudit: {spool_dir: /dev/null/spool}\n",
			args: []string{"--strict"}, wantErr: "1 warning (--strict)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "guard.yaml")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			args := append([]string{"guard", "config", "check", "--config", path}, tt.args...)
			err := run(context.Background(), args, envMap(tt.env), &stdout, &stderr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("run = %v, want success; stderr:\n%s", err, stderr.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("run = %v, want an error containing %q; stderr:\n%s", err, tt.wantErr, stderr.String())
			}
			got := strings.ReplaceAll(stdout.String(), path, "guard.yaml")
			if !strings.Contains(got, tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", got, tt.wantStdout)
			}
			for _, w := range tt.wantOutput {
				if !strings.Contains(got, w) {
					t.Errorf("stdout lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestConfigFlagsBeforeCheck: flags may come before the subcommand, as
// with migrate and redis ("guard config --config FILE check").
func TestConfigFlagsBeforeCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(path, []byte("actions:\n  signup:\n    limits:\n      - {dimension: ip, limit: 60, window: 1m, shadow: true}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for exit 0
	}{
		{"--config before check", []string{"--config", path, "check"}, ""},
		{"--strict before check", []string{"--strict", "check", "--config", path}, "(--strict)"},
		{"unknown subcommand", []string{"--config", path, "lint"}, `config: unknown subcommand "lint" (want check)`},
		{"stray argument after check", []string{"--config", path, "check", "extra"}, "config check: unexpected argument extra"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"guard", "config"}, tt.args...), noEnv, &stdout, &stderr)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("run = %v, want success; stdout:\n%s", err, stdout.String())
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("run = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestServeLogsPolicyWarnings: serve logs the warnings config check
// prints, from the same list.
func TestServeLogsPolicyWarnings(t *testing.T) {
	cfg := strings.Replace(e2eConfig(t.TempDir()), "{dimension: user, limit: 2, window: 15m}", "{dimension: user, limit: 500, window: 24h}", 1)
	g := startGuard(t, cfg, nil)
	if !g.log.has("WARN", "500 failures allowed per account before a lockout; at most 100 (NIST SP 800-63B §5.2.2)") {
		t.Errorf("serve did not log the policy warning; log:\n%s", g.log.dump())
	}
}
