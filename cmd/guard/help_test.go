package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/guardhq/guard/sdk"
)

func TestHelp(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // each must appear on stdout
	}{
		{"guard --help", []string{"--help"}, []string{"serve", "migrate", "audit", "bench", "GUARD_CONFIG"}},
		{"guard -h", []string{"-h"}, []string{"Commands:"}},
		{"guard help", []string{"help"}, []string{"Commands:"}},
		{"guard help serve", []string{"help", "serve"}, []string{"Usage: guard serve", "-config", "-migrate", "SIGTERM"}},
		{"guard serve --help", []string{"serve", "--help"}, []string{"Usage: guard serve", "-log-format", "-shutdown-timeout"}},
		{"guard migrate --help", []string{"migrate", "--help"}, []string{"up|down|version", "-database-url"}},
		{"guard migrate up --help", []string{"migrate", "up", "--help"}, []string{"up|down|version"}},
		{"guard audit --help", []string{"audit", "--help"}, []string{"-user", "-ip", "-device", "-action", "-decision", "-reason", "-kind", "-since", "-until", "-limit", "-format", "GUARD_API_KEY"}},
		{"guard bench --help", []string{"bench", "--help"}, []string{"-duration", "-concurrency", "-redis-url"}},
		{"guard config check --help", []string{"config", "check", "--help"}, []string{"Usage: guard config check", "-strict", "exit 0", "FILE:LINE"}},
		{"guard backtest --help", []string{"backtest", "--help"}, []string{"Usage: guard backtest", "-since", "-until", "-action", "-format", "-database-url", "read-only"}},
		{"guard help config", []string{"help", "config"}, []string{"Usage: guard config check"}},
		{"guard --help serve", []string{"--help", "serve"}, []string{"Usage: guard serve"}},
		{"guard health --help", []string{"health", "--help"}, []string{"/healthz", "-ready", "-url"}},
		{"guard redis --help", []string{"redis", "--help"}, []string{"Usage: guard redis prune", "-dry-run", "GUARD_REDIS_URL"}},
		{"guard redis prune --help", []string{"redis", "prune", "--help"}, []string{"Usage: guard redis prune"}},
		{"guard serve --help names --listen", []string{"serve", "--help"}, []string{"-listen", "GUARD_LISTEN"}},
		{"guard --version", []string{"--version"}, []string{"guard ", runtime.Version()}},
		{"guard version", []string{"version"}, []string{"guard "}},
		{"guard version --help", []string{"version", "--help"}, []string{"Usage: guard version"}},
		{"guard help version", []string{"help", "version"}, []string{"Usage: guard version"}},
		{"guard help config check", []string{"help", "config", "check"}, []string{"Usage: guard config check", "-strict"}},
		{"guard --help config check", []string{"--help", "config", "check"}, []string{"Usage: guard config check"}},
		{"guard help migrate up", []string{"help", "migrate", "up"}, []string{"up|down|version", "-database-url"}},
		{"guard help redis prune", []string{"help", "redis", "prune"}, []string{"Usage: guard redis prune", "-dry-run"}},
		{"guard help --help", []string{"help", "--help"}, []string{"Commands:"}},
		{"guard --help --help", []string{"--help", "--help"}, []string{"Commands:"}},
		{"guard -h help", []string{"-h", "help"}, []string{"Commands:"}},
		{"guard help -h", []string{"help", "-h"}, []string{"Commands:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(context.Background(), append([]string{"guard"}, tt.args...), noEnv, &stdout, &stderr); err != nil {
				t.Fatalf("run: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout.String())
				}
			}
			if stderr.Len() != 0 {
				t.Errorf("stderr = %q, want nothing", stderr.String())
			}
		})
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "no command"},
		{"unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"unknown flag", []string{"serve", "--nope"}, "serve: flag provided but not defined"},
		{"unknown flag of config check", []string{"config", "check", "--nope"}, "config check: flag provided but not defined"},
		{"migrate without direction", []string{"migrate"}, "give a direction"},
		{"audit without key", []string{"audit"}, "no API key"},
		{"audit bad format", []string{"audit", "--key", "k", "--format", "xml"}, "unknown --format"},
		{"audit bad since", []string{"audit", "--key", "k", "--since", "yesterday"}, "--since"},
		{"audit export with --limit", []string{"audit", "--key", "k", "--format", "csv", "--limit", "2"}, "--limit applies to --format table and json"},
		{"audit since offset +24:00", []string{"audit", "--key", "k", "--since", "2026-12-04T00:00:00+24:00"}, "--since"},
		{"audit until offset +00:60", []string{"audit", "--key", "k", "--until", "2026-12-04T00:00:00+00:60"}, "--until"},
		{"serve bad --listen", []string{"serve", "--listen", "8080"}, "--listen"},
		{"config without check", []string{"config"}, `want "guard config check"`},
		{"config check with a bare file", []string{"config", "check", "guard.yaml"}, "unexpected argument guard.yaml"},
		{"bench unknown mode", []string{"bench", "--modes", "raw-multi"}, `unknown mode "raw-multi"`},
		{"bench bad --redis-url", []string{"bench", "--redis-url", "http://x"}, "bench: --redis-url: redis: invalid URL scheme: http"},
		{"bench bad --redis-url database", []string{"bench", "--redis-url", "redis://u:s3cret@x:6379/abc"}, "bench: --redis-url: redis: invalid database number"},
		{"bench mode twice", []string{"bench", "--modes", "check,http,check", "--redis-url", "redis://127.0.0.1:1/0"}, `bench: --modes gives mode "check" twice`},
		{"redis without subcommand", []string{"redis"}, "give a subcommand: prune"},
		{"redis unknown subcommand", []string{"redis", "flush"}, `unknown subcommand "flush"`},
		{"redis prune without Redis", []string{"redis", "prune"}, "no Redis configured"},
		{"redis prune extra argument", []string{"redis", "prune", "now"}, `unexpected argument "now"`},
		{"version with a flag", []string{"version", "--bogus"}, `version: unexpected argument "--bogus"`},
		{"--version with an argument", []string{"--version", "x"}, `version: unexpected argument "x"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"guard"}, tt.args...), noEnv, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
			// main prints "guard: " before the error.
			if err != nil && strings.HasPrefix(err.Error(), "guard") {
				t.Errorf("run(%v) = %q, want it without a \"guard\" prefix of its own", tt.args, err)
			}
		})
	}
}

// TestStrayArguments: every command refuses an argument it does not take
// before doing anything (bench once ignored it and ran a full load run).
// The environment points at servers that are not there, so a command that
// ignored the argument fails for another reason.
func TestStrayArguments(t *testing.T) {
	env := envMap(map[string]string{
		"GUARD_REDIS_URL":    "redis://127.0.0.1:1/0",
		"GUARD_DATABASE_URL": "postgres://127.0.0.1:1/none",
		"GUARD_URL":          "http://127.0.0.1:1",
		"GUARD_API_KEY":      "k-0123456789abcdef",
	})
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serve", []string{"serve", "extra"}, `serve: unexpected argument "extra"`},
		{"config check", []string{"config", "check", "extra"}, "config check: unexpected argument extra"},
		{"migrate up", []string{"migrate", "up", "extra"}, `migrate: unexpected argument "extra"`},
		{"audit", []string{"audit", "extra"}, `audit: unexpected argument "extra"`},
		{"backtest", []string{"backtest", "extra"}, `backtest: unexpected argument "extra"`},
		{"bench", []string{"bench", "extra"}, `bench: unexpected argument "extra"`},
		{"bench after flags", []string{"bench", "--duration", "1s", "extra"}, `bench: unexpected argument "extra"`},
		{"health", []string{"health", "extra"}, `health: unexpected argument "extra"`},
		{"redis prune", []string{"redis", "prune", "extra"}, `redis prune: unexpected argument "extra"`},
		{"version", []string{"version", "extra"}, `version: unexpected argument "extra"`},
		{"help", []string{"help", "serve", "extra"}, `help: unexpected argument "extra"`},
		{"--help", []string{"--help", "serve", "extra"}, `help: unexpected argument "extra"`},
		{"help after a subcommand", []string{"help", "config", "check", "extra"}, `help: unexpected argument "extra"`},
		{"help with an unknown subcommand", []string{"help", "migrate", "sideways"}, `help: unexpected argument "sideways"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"guard"}, tt.args...), env, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestURLSources: a bad URL is refused naming where it came from, the
// flag or the variable: a Guard URL without http:// or https:// (an
// address as GUARD_LISTEN takes it), not with net/url's "first path
// segment in URL cannot contain colon" or the SDK's bare "invalid base
// URL"; bench's Redis URL, from --redis-url or GUARD_REDIS_URL.
func TestURLSources(t *testing.T) {
	const want = ": want an http:// or https:// URL such as http://127.0.0.1:8080"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"health --url address", []string{"health", "--url", "127.0.0.1:8080"}, nil, "health: --url" + want},
		{"health --url host name", []string{"health", "--url", "localhost:8080"}, nil, "health: --url" + want},
		{"health GUARD_URL", []string{"health"}, map[string]string{"GUARD_URL": "127.0.0.1:8080"}, "health: GUARD_URL" + want},
		{"audit --url address", []string{"audit", "--key", "k-0123456789abcdef", "--url", "127.0.0.1:8080"}, nil, "audit: --url" + want},
		{"audit GUARD_URL", []string{"audit", "--format", "csv"}, map[string]string{"GUARD_URL": "ftp://127.0.0.1", "GUARD_API_KEY": "k-0123456789abcdef"}, "audit: GUARD_URL" + want},
		{"bench --redis-url", []string{"bench", "--redis-url", "http://x"}, nil, "bench: --redis-url: redis: invalid URL scheme: http"},
		{"bench GUARD_REDIS_URL", []string{"bench"}, map[string]string{"GUARD_REDIS_URL": "http://x"}, "bench: GUARD_REDIS_URL: redis: invalid URL scheme: http"},
		{"bench --redis-url wins", []string{"bench", "--redis-url", "http://x"}, map[string]string{"GUARD_REDIS_URL": "redis://127.0.0.1:1/0"}, "bench: --redis-url: redis: invalid URL scheme: http"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), append([]string{"guard"}, tt.args...), envMap(tt.env), &stdout, &stderr)
			if err == nil || err.Error() != tt.want {
				t.Errorf("run(%v) = %v, want %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestServeLogSettings: a bad log format or level names where it came
// from, as config check does: the flag, or the variable when no flag was
// given.
func TestServeLogSettings(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	serve := []string{"serve", "--listen", "127.0.0.1:0"}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"--log-format", append(serve, "--log-format", "xml"), nil, `serve: log format "xml": want text or json`},
		{"--log-level", append(serve, "--log-level", "loud"), nil, `serve: log level "loud": want debug, info, warn or error`},
		{"GUARD_LOG_FORMAT", serve, map[string]string{"GUARD_LOG_FORMAT": "xml"}, `serve: GUARD_LOG_FORMAT: log format "xml": want text or json`},
		{"GUARD_LOG_LEVEL", serve, map[string]string{"GUARD_LOG_LEVEL": "loud"}, `serve: GUARD_LOG_LEVEL: log level "loud": want debug, info, warn or error`},
		{"--log-level wins over GUARD_LOG_LEVEL", append(serve, "--log-level", "loud"), map[string]string{"GUARD_LOG_LEVEL": "warn"}, `serve: log level "loud"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(ctx, append([]string{"guard"}, tt.args...), envMap(tt.env), &stdout, &stderr)
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error starting %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestDurationFlags: a duration flag whose zero, negative or tiny value
// makes no sense is refused at start, naming the flag (serve once took
// --shutdown-timeout 0s and failed its stop with "context deadline
// exceeded"). The context is cancelled, so a command that took the value
// stops at once instead of serving.
func TestDurationFlags(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	env := envMap(map[string]string{"GUARD_URL": "http://127.0.0.1:1", "GUARD_REDIS_URL": "redis://127.0.0.1:1/0"})
	serve := []string{"serve", "--listen", "127.0.0.1:0", "--log-level", "error", "--shutdown-timeout"}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"serve 0s", append(serve, "0s"), "serve: --shutdown-timeout 0s: must be at least 1s"},
		{"serve -1s", append(serve, "-1s"), "serve: --shutdown-timeout -1s: must be at least 1s"},
		{"serve 1ns", append(serve, "1ns"), "serve: --shutdown-timeout 1ns: must be at least 1s"},
		{"serve 999ms", append(serve, "999ms"), "serve: --shutdown-timeout 999ms: must be at least 1s"},
		{"health 0s", []string{"health", "--timeout", "0s"}, "health: --timeout 0s: must be at least 1ms"},
		{"health -1s", []string{"health", "--timeout", "-1s"}, "health: --timeout -1s: must be at least 1ms"},
		{"redis prune 0s", []string{"redis", "prune", "--timeout", "0s"}, "redis prune: --timeout 0s: must be at least 1ms"},
		{"redis --timeout before prune", []string{"redis", "--timeout", "1ns", "prune"}, "redis prune: --timeout 1ns: must be at least 1ms"},
		{"bench --duration 0s", []string{"bench", "--duration", "0s"}, "bench: --duration 0s: must be at least 1ms"},
		{"bench --concurrency 0", []string{"bench", "--concurrency", "0"}, "bench: --concurrency 0: must be at least 1"},
		{"bench --keys -1", []string{"bench", "--keys", "-1"}, "bench: --keys -1: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(ctx, append([]string{"guard"}, tt.args...), env, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("run(%v) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestAuditErrorPrefix: an error of the API reaches main under the
// command's name, without the SDK's own "guard: " (main adds one).
func TestAuditErrorPrefix(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		w.Write([]byte(`{"error":{"code":"invalid_request","message":"since is after until"}}`))
	}))
	defer srv.Close()
	for _, format := range []string{"table", "ndjson"} {
		t.Run(format, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"guard", "audit", "--url", srv.URL, "--key", "k-0123456789abcdef", "--format", format}, noEnv, &stdout, &stderr)
			if want := "audit: 400 invalid_request: since is after until"; err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("run = %v, want an error starting %q", err, want)
			}
			var apiErr *sdk.Error
			if !errors.As(err, &apiErr) {
				t.Errorf("run = %v, want it to wrap the *sdk.Error", err)
			}
		})
	}
}

// TestBenchHelpRedisURL: bench --help shows the --redis-url default once
// and never the GUARD_REDIS_URL of the environment (its password).
func TestBenchHelpRedisURL(t *testing.T) {
	var stdout, stderr bytes.Buffer
	env := envMap(map[string]string{"GUARD_REDIS_URL": "redis://u:s3cret@redis.internal:6379/0"})
	if err := run(context.Background(), []string{"guard", "bench", "--help"}, env, &stdout, &stderr); err != nil {
		t.Fatalf("run: %v", err)
	}
	help := stdout.String()
	if strings.Contains(help, "s3cret") || strings.Contains(help, "redis.internal") {
		t.Errorf("bench --help shows GUARD_REDIS_URL:\n%s", help)
	}
	_, line, _ := strings.Cut(help, "-redis-url")
	line, _, _ = strings.Cut(line, "\n  -")
	if got := strings.Count(line, "default"); got != 1 {
		t.Errorf("-redis-url's help names %d defaults, want 1:\n%s", got, line)
	}
}
