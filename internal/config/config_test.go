package config

import (
	"crypto/sha256"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

// apiExample is the config example of API.md, verbatim apart from the hash.
const apiExample = `listen: 127.0.0.1:8080
redis_url: redis://127.0.0.1:6379/0
database_url: postgres://postgres@127.0.0.1:5432/guard?sslmode=disable
key_secret: change-me-to-32-random-bytes
api_keys:
  - {name: auth-service, scopes: [check], key: "k-check-123"}
  - {name: secteam, scopes: ["audit:read"], key_sha256: "a665a45920422f9d417e4867efdc4fb8a04a1f3fff1fa07e998e86f7f7a27ae3"}
actions:
  login:
    limits:
      - {dimension: ip, limit: 60, window: 1m}
      - {dimension: user, limit: 30, window: 15m}
    failures:
      - {dimension: user+ip, limit: 10, window: 15m}
      - {dimension: user, limit: 50, window: 24h}
    lockout: {ladder: [1m, 5m, 15m, 1h, 6h, 24h], decay: 24h, ledger: auth, count_denials: false}
    on_store_failure: local
    shadow: false
lists:
  allow: {cidrs: ["10.0.0.0/8"], users: [], devices: []}
  deny: {cidrs: [], users: [], devices: []}
instance: guard-1                     # names this process in events, alerts, metrics
ip: {ipv6_prefix: 64}                 # aggregation of IPv6 addresses for limiting
trusted_devices: {ttl: 720h}          # how long a success trusts a device for a user
store: {budget: 50ms, fleet_size: 1}  # Redis call budget; instances sharing fallback load
alerts: {webhook_url: "", timeout: 2s}
audit: {pseudonymize: false, spool_dir: /var/lib/guard/spool, retention: 2160h,
        batch_size: 1000, flush_interval: 200ms}
forward_auth: {user_header: X-Guard-User, device_header: X-Guard-Device,
               trusted_proxies: []}
`

var noEnv = Env{}

func envMap(m map[string]string) Env {
	return ReadEnv(func(k string) string { return m[k] })
}

func TestParseConfigAPIExample(t *testing.T) {
	cfg, err := Parse("guard.yaml", []byte(apiExample), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := cfg.Listen, "127.0.0.1:8080"; got != want {
		t.Errorf("Listen = %q, want %q", got, want)
	}
	if got, want := cfg.Instance(), "guard-1"; got != want {
		t.Errorf("Instance = %q, want %q", got, want)
	}
	if !cfg.PolicyFromFile {
		t.Errorf("PolicyFromFile = false, want true")
	}
	if got, want := len(cfg.Guard.Policy.Actions), 1; got != want {
		t.Fatalf("len(Actions) = %d, want %d (file actions replace the defaults)", got, want)
	}
	login := cfg.Guard.Policy.Actions["login"]
	wantLimits := []abuse.Rule{
		{Name: "login/ip", Dimension: "ip", Limit: 60, Window: time.Minute, Algorithm: abuse.AlgLog, OnLimit: "deny"},
		{Name: "login/user", Dimension: "user", Limit: 30, Window: 15 * time.Minute, Algorithm: abuse.AlgLog, OnLimit: "deny"},
	}
	if got := login.Limits; !rulesEqual(got, wantLimits) {
		t.Errorf("login.Limits = %+v, want %+v", got, wantLimits)
	}
	wantFailures := []abuse.Rule{
		{Name: "login/user+ip/failures", Dimension: "user+ip", Limit: 10, Window: 15 * time.Minute, Algorithm: abuse.AlgLog},
		{Name: "login/user/failures", Dimension: "user", Limit: 50, Window: 24 * time.Hour, Algorithm: abuse.AlgLog},
	}
	if got := login.Failures; !rulesEqual(got, wantFailures) {
		t.Errorf("login.Failures = %+v, want %+v", got, wantFailures)
	}
	if got, want := login.Lockout.Ledger, "auth"; got != want {
		t.Errorf("Ledger = %q, want %q", got, want)
	}
	if got, want := len(login.Lockout.Ladder), 6; got != want {
		t.Errorf("len(Ladder) = %d, want %d", got, want)
	}
	if got, want := login.OnStoreFailure, abuse.OnFailureLocal; got != want {
		t.Errorf("OnStoreFailure = %q, want %q", got, want)
	}
	if got, want := cfg.Guard.Policy.Allow.CIDRs, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}; len(got) != 1 || got[0] != want[0] {
		t.Errorf("Allow.CIDRs = %v, want %v", got, want)
	}
	if got, want := len(cfg.API.Keys), 2; got != want {
		t.Fatalf("len(APIKeys) = %d, want %d", got, want)
	}
	if got, want := cfg.API.Keys[0].SHA256, sha256.Sum256([]byte("k-check-123")); got != want {
		t.Errorf("APIKeys[0].SHA256 = %x, want %x", got, want)
	}
	if got, want := cfg.API.Keys[1].SHA256, sha256.Sum256([]byte("123")); got != want {
		t.Errorf("APIKeys[1].SHA256 = %x, want sha256(123) %x", got, want)
	}
	if got, want := cfg.Writer.SpoolDir, "/var/lib/guard/spool"; got != want {
		t.Errorf("SpoolDir = %q, want %q", got, want)
	}
	if got, want := cfg.Writer.FlushInterval, 200*time.Millisecond; got != want {
		t.Errorf("FlushInterval = %v, want %v", got, want)
	}
	if got, want := cfg.Store.Budget, 50*time.Millisecond; got != want {
		t.Errorf("Budget = %v, want %v", got, want)
	}
}

func rulesEqual(a, b []abuse.Rule) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestParseConfigDefaults(t *testing.T) {
	cfg, err := Parse("", nil, noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	def := abuse.DefaultPolicy()
	if got, want := len(cfg.Guard.Policy.Actions), len(def.Actions); got != want {
		t.Errorf("len(Actions) = %d, want the default policy's %d", got, want)
	}
	if cfg.PolicyFromFile {
		t.Errorf("PolicyFromFile = true, want false")
	}
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"listen", cfg.Listen, "127.0.0.1:8080"},
		{"key prefix", cfg.Guard.KeyPrefix, abuse.DefaultKeyPrefix},
		{"ipv6 prefix", cfg.Guard.IPv6Prefix, 64},
		{"trust ttl", cfg.Guard.TrustTTL, 720 * time.Hour},
		{"budget", cfg.Store.Budget, 50 * time.Millisecond},
		{"allow status", cfg.API.ForwardAuth.AllowStatus, 204},
		// Zero: the package's own default (limits, alert, audit, api).
		{"fleet size", cfg.Store.FleetSize, 0},
		{"alert timeout", cfg.Alerts.Timeout, time.Duration(0)},
		{"retention", cfg.Postgres.Retention, time.Duration(0)},
		{"batch size", cfg.Writer.BatchSize, 0},
		{"flush interval", cfg.Writer.FlushInterval, time.Duration(0)},
		{"user header", cfg.API.ForwardAuth.UserHeader, ""},
		{"redis", cfg.Redis.Enabled(), false},
		{"database url", cfg.DatabaseURL, ""},
		{"key secret", cfg.KeySecret(), ""},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
	if cfg.Instance() == "" {
		t.Errorf("Instance is empty, want the host name")
	}
	if cfg.Writer.SpoolDir == "" {
		t.Errorf("SpoolDir is empty, want a default")
	}
}

func TestParseConfigListsKeepDefaultPolicy(t *testing.T) {
	cfg, err := Parse("g.yaml", []byte("lists:\n  deny: {users: [mallory@example.com]}\n"), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := len(cfg.Guard.Policy.Actions), len(abuse.DefaultPolicy().Actions); got != want {
		t.Errorf("len(Actions) = %d, want %d", got, want)
	}
	if got := cfg.Guard.Policy.Deny.Users; len(got) != 1 {
		t.Errorf("Deny.Users = %v, want one user", got)
	}
}

func TestParseConfigEnvOverrides(t *testing.T) {
	file := "listen: 127.0.0.1:9000\nredis_url: redis://file:6379/0\nkey_secret: from-file-0123456789\n"
	env := envMap(map[string]string{
		"GUARD_LISTEN":       "0.0.0.0:8081",
		"GUARD_REDIS_URL":    "redis://env:6379/1",
		"GUARD_DATABASE_URL": "postgres://u@db:5432/guard",
		"GUARD_KEY_SECRET":   "from-env-0123456789",
		"GUARD_KEY_PREFIX":   "test:abc:",
		"GUARD_INSTANCE":     "node-7",
		"GUARD_SPOOL_DIR":    "/data/spool",
	})
	cfg, err := Parse("g.yaml", []byte(file), env)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct{ name, got, want string }{
		{"listen", cfg.Listen, "0.0.0.0:8081"},
		{"redis", cfg.Redis.URL, "redis://env:6379/1"},
		{"database", cfg.DatabaseURL, "postgres://u@db:5432/guard"},
		{"secret", cfg.KeySecret(), "from-env-0123456789"},
		{"prefix", cfg.Guard.KeyPrefix, "test:abc:"},
		{"instance", cfg.Instance(), "node-7"},
		{"spool dir", cfg.Writer.SpoolDir, "/data/spool"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

func TestLoadConfigFromEnvFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "guard.yaml")
	if err := os.WriteFile(path, []byte("listen: 127.0.0.1:0\nactions:\n  login:\n    limits: [{dimension: ip, limit: 1, window: 1s}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load("", envMap(map[string]string{"GUARD_CONFIG": path}))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if got, want := cfg.File, path; got != want {
		t.Errorf("File = %q, want %q", got, want)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml"), noEnv); err == nil {
		t.Errorf("Load(missing file) = nil error, want one")
	}
}

func TestParseConfigRejects(t *testing.T) {
	const login = "actions:\n  login:\n    limits:\n"
	tests := []struct {
		name string
		yaml string
		line int
		want string // part of the message
	}{
		{"syntax error", "listen: [1, 2\n", 1, "invalid YAML"},
		{"tab indentation", "store:\n\tbudget: 1s\n", 2, "invalid YAML"},
		{"top not a mapping", "- a\n- b\n", 1, "config must be a mapping"},
		{"second document", "instance: a\n---\nbogus: 1\n", 2, "the file holds more than one YAML document"},
		{"second document after an empty one", "instance: a\n---\n---\nbogus: 1\n", 3, "the file holds more than one YAML document"},
		{"second document null", "instance: a\n---\n~\n", 2, "the file holds more than one YAML document"},
		{"second document inline", "instance: a\n--- bogus\n", 2, "the file holds more than one YAML document"},
		{"syntax error in second document", "instance: a\n---\nstore:\n\tbudget: 1s\n", 4, "invalid YAML"},
		{"unknown top key", "listen: 127.0.0.1:1\nlisten_addr: x\n", 2, `unknown key "listen_addr"`},
		{"duplicate top key", "instance: a\ninstance: b\n", 2, `key "instance" appears twice (first on line 1)`},
		{"bad listen", "listen: localhost\n", 1, "not host:port"},
		{"bad listen port", "listen: 127.0.0.1:http2x\n", 1, "bad port"},
		{"redis url scheme", "redis_url: http://x:6379\n", 1, "scheme must be one of redis"},
		{"database url scheme", "database_url: mysql://x/db\n", 1, "scheme must be one of postgres"},
		{"redis url port", "redis_url: redis://127.0.0.1:99999/0\n", 1, "redis_url: port 99999 outside 1..65535"},
		{"database url port", "database_url: postgres://u:secret@x:0/db\n", 1, "database_url: port 0 outside 1..65535"},
		{"database url no host", "database_url: postgres:///db\n", 1, "no host"},
		{"unknown key in action", login + "      - {dimension: ip, limit: 1, window: 1m}\n    limts: []\n", 5, `unknown key "limts"`},
		{"unknown key in rule", login + "      - {dimension: ip, limit: 1, window: 1m, burst: 2}\n", 4, `unknown key "burst"`},
		{"limit zero", login + "      - {dimension: ip, limit: 0, window: 1m}\n", 4, "limit must be between 1 and"},
		{"limit negative", login + "      - dimension: ip\n        limit: -3\n        window: 1m\n", 5, "limit must be between 1 and"},
		{"limit not a number", login + "      - {dimension: ip, limit: ten, window: 1m}\n", 4, "limit must be a whole number"},
		{"limit float", login + "      - {dimension: ip, limit: 1.5, window: 1m}\n", 4, "limit must be a whole number"},
		{"limit huge", login + "      - {dimension: ip, limit: 99999999999, window: 1m}\n", 4, "limit must be between"},
		{"bad window", login + "      - dimension: ip\n        limit: 5\n        window: 1 minute\n", 6, "is not a duration"},
		{"window unitless", login + "      - {dimension: ip, limit: 5, window: 60}\n", 4, "is not a duration"},
		{"window past 292 years", login + "      - {dimension: ip, limit: 5, window: 100000000h}\n", 4, `"100000000h" is too long a duration`},
		{"window zero", login + "      - {dimension: ip, limit: 5, window: 0s}\n", 4, "window must be at least 1ms"},
		{"window negative", login + "      - {dimension: ip, limit: 5, window: -1m}\n", 4, "window must be at least 1ms"},
		{"window above the maximum", login + "      - {dimension: ip, limit: 5, window: 8784h1ms}\n", 4, "window must be at most 8784h (366 days)"},
		{"window of 2562047h", login + "      - {dimension: ip, limit: 5, window: 2562047h, algorithm: counter}\n", 4, "window must be at most 8784h (366 days)"},
		{"failure window above the maximum", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 8785h}]\n", 3, "window must be at most 8784h"},
		{"ladder step above the maximum", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      ladder: [1m, 8785h]\n", 5, "lockout.ladder[1]: ladder step must be at most 8784h (366 days)"},
		{"decay above the maximum", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      decay: 8784h1ms\n", 5, "decay must be at most 8784h (366 days)"},
		{"trust ttl above the maximum", "trusted_devices:\n  ttl: 8785h\n", 2, "trusted_devices.ttl must be at most 8784h (366 days), not 8785h"},
		{"window sub-millisecond", login + "      - {dimension: ip, limit: 5, window: 1500us}\n", 4, "whole milliseconds"},
		{"missing window", login + "      - {dimension: ip, limit: 5}\n", 4, "window is required"},
		{"missing dimension", login + "      - {limit: 5, window: 1m}\n", 4, "dimension is required"},
		{"unknown dimension", login + "      - {dimension: email, limit: 5, window: 1m}\n", 4, `unknown dimension "email"`},
		{"unknown dimension in failures", "actions:\n  login:\n    failures:\n      - {dimension: user+email, limit: 5, window: 1m}\n    lockout: {ladder: [1m]}\n", 4, `unknown dimension "user+email"`},
		{"two rules one dimension unnamed", login + "      - {dimension: ip, limit: 5, window: 1m}\n      - {dimension: ip, limit: 50, window: 1h}\n", 4, "each needs its own name"},
		{"two rules one dimension same name", login + "      - {dimension: ip, limit: 5, window: 1m, name: a}\n      - {dimension: ip, limit: 50, window: 1h, name: a}\n", 5, `rule name "a" is already used on line 4`},
		{"limit with a leading zero", login + "      - {dimension: ip, limit: 010, window: 1m}\n", 4, "actions.login.limits[0].limit: 010 has a leading zero"},
		{"limit with a leading zero and a digit group", login + "      - {dimension: ip, limit: 0_10, window: 1m}\n", 4, "actions.login.limits[0].limit: 0_10 has a leading zero"},
		{"empty rule name", login + "      - {dimension: ip, limit: 5, window: 1m, name: \"\"}\n", 4, "actions.login.limits[0].name must not be empty"},
		{"empty distinct", login + "      - {dimension: ip, limit: 5, window: 1m, distinct: \"\"}\n", 4, "actions.login.limits[0].distinct must not be empty"},
		{"empty algorithm", login + "      - {dimension: ip, limit: 5, window: 1m, algorithm: ''}\n", 4, "actions.login.limits[0].algorithm must not be empty"},
		{"empty on_limit", login + "      - {dimension: ip, limit: 5, window: 1m, on_limit: \"\"}\n", 4, "actions.login.limits[0].on_limit must not be empty"},
		{"empty distinct in failures", "actions:\n  login:\n    failures: [{dimension: ip, limit: 5, window: 1m, distinct: ''}]\n", 3, "actions.login.failures[0].distinct must not be empty"},
		{"empty on_store_failure", login + "      - {dimension: ip, limit: 5, window: 1m}\n    on_store_failure: \"\"\n", 5, "actions.login.on_store_failure must not be empty"},
		{"empty dimension", login + "      - {dimension: \"\", limit: 5, window: 1m}\n", 4, `unknown dimension ""`},
		{"allow_status zero", "forward_auth: {allow_status: 0}\n", 1, "forward_auth.allow_status must be 204 or 200, not 0"},
		{"empty ledger", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout: {ladder: [1m], ledger: ''}\n", 4, "actions.login.lockout.ledger must not be empty"},
		{"rule name with quote", login + "      - {dimension: ip, limit: 5, window: 1m, name: 'a\"b'}\n", 4, "printable ASCII"},
		{"shadow not bool", login + "      - {dimension: ip, limit: 5, window: 1m, shadow: maybe}\n", 4, "must be true or false"},
		{"no rules", "actions:\n  login:\n    shadow: true\n", 2, "needs at least one rule"},
		{"empty actions", "actions: {}\n", 1, "at least one action"},
		{"bad action name", "actions:\n  log in:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n", 2, "not a valid action name"},
		{"duplicate action", "actions:\n  login:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n  login:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n", 4, `key "login" appears twice`},
		{"empty ladder", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout: {ladder: [], decay: 1h}\n", 4, "needs at least one step"},
		{"empty ladder", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout: {ladder: []}\n", 4, "at least one step"},
		{"empty ladder without failures", "actions:\n  login:\n    limits: [{dimension: ip, limit: 3, window: 1m}]\n    lockout: {ladder: []}\n", 4, "lockout.ladder: ladder needs at least one step"},
		{"empty ladder without failures, block form", "actions:\n  login:\n    limits: [{dimension: ip, limit: 3, window: 1m}]\n    lockout:\n      ladder: []\n", 5, "at least one step"},
		{"bad ladder step", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      ladder: [1m, 5x]\n", 5, `"5x" is not a duration`},
		{"bad decay", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      ladder: [1m]\n      decay: soon\n", 6, "is not a duration"},
		{"decay zero", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout: {ladder: [1m], decay: 0s}\n", 4, "actions.login.lockout.decay must be at least 1ms, not 0s"},
		{"decay sub-millisecond", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      decay: 500us\n", 5, "whole milliseconds"},
		{"decay negative", "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n    lockout:\n      decay: -1h\n", 5, "decay must be at least 1ms, not -1h"},
		{"count_denials without failures", "actions:\n  login:\n    limits: [{dimension: ip, limit: 5, window: 1m}]\n    lockout: {ladder: [1m], count_denials: true}\n", 4, "count_denials needs failures"},
		{"bad on_store_failure", "actions:\n  login:\n    limits: [{dimension: ip, limit: 5, window: 1m}]\n    on_store_failure: panic\n", 4, "must be local, allow or deny"},
		{"limits not a list", "actions:\n  login:\n    limits: {dimension: ip}\n", 3, "must be a list"},
		{"bad cidr", "lists:\n  allow:\n    cidrs: [10.0.0.0/33]\n", 3, "is not a CIDR"},
		{"cidr host bits", "lists:\n  deny:\n    cidrs:\n      - 10.1.2.3/8\n", 4, "did you mean 10.0.0.0/8"},
		{"bad address in list", "lists:\n  deny: {cidrs: [not-an-ip]}\n", 2, "not an IP address"},
		{"unknown list key", "lists:\n  block: {cidrs: []}\n", 2, `unknown key "block"`},
		{"empty list user", "lists:\n  deny: {users: [\"\"]}\n", 2, "must not be empty"},
		{"ipv6 prefix range", "ip: {ipv6_prefix: 129}\n", 1, "between 1 and 128"},
		{"ttl bad", "trusted_devices:\n  ttl: forever\n", 2, "not a duration"},
		{"budget zero", "store: {budget: 0s}\n", 1, "at least 1ms"},
		{"fleet size zero", "store:\n  fleet_size: 0\n", 2, "between 1 and"},
		{"bad key prefix", "store: {key_prefix: \"has space\"}\n", 1, "key_prefix"},
		{"webhook scheme", "alerts: {webhook_url: \"ftp://x\"}\n", 1, "scheme must be one of http"},
		{"alert timeout", "alerts:\n  timeout: 2\n", 2, "not a duration"},
		{"retention short", "audit: {retention: 1h}\n", 1, "at least 24h"},
		{"batch size zero", "audit: {batch_size: 0}\n", 1, "between 1 and"},
		{"pseudonymize string", "audit: {pseudonymize: \"yes please\"}\n", 1, "true or false"},
		{"flush interval", "audit:\n  flush_interval: 0\n", 2, "at least 1ms"},
		{"bad header", "forward_auth: {user_header: \"X User\"}\n", 1, "not a valid HTTP header name"},
		{"bad trusted proxy", "forward_auth: {trusted_proxies: [\"1.2.3\"]}\n", 1, "not an IP address"},
		{"api key no name", "api_keys:\n  - {scopes: [check], key: a}\n", 2, "name is required"},
		{"api key duplicate name", "api_keys:\n  - {name: a, scopes: [check], key: a}\n  - {name: a, scopes: [check], key: b}\n", 3, `key name "a" is already used on line 2`},
		{"api key unknown scope", "api_keys:\n  - {name: a, scopes: [check, write], key: a}\n", 2, `unknown scope "write"`},
		{"api key no scopes", "api_keys:\n  - {name: a, key: a}\n", 2, "scopes are required"},
		{"api key both forms", "api_keys:\n  - {name: a, scopes: [check], key: a, key_sha256: " + strings.Repeat("0", 64) + "}\n", 2, "not both"},
		{"api key none", "api_keys:\n  - {name: a, scopes: [check]}\n", 2, "key or key_sha256 is required"},
		{"api key bad hash", "api_keys:\n  - {name: a, scopes: [check], key_sha256: abc}\n", 2, "64 hex digits"},
		{"api key same secret", "api_keys:\n  - {name: a, scopes: [check], key: same}\n  - {name: b, scopes: [admin], key: same}\n", 3, "same key is already configured on line 2"},
		// HTTP trims a field value's surrounding white space and refuses
		// control characters in it: no Authorization header could carry
		// such a key, so no request could authenticate with it.
		{"api key with surrounding space", "api_keys:\n  - {name: a, scopes: [check], key: \" k-0123456789abcdef\"}\n", 2, "cannot be sent in an Authorization header"},
		{"api key with a control character", "api_keys:\n  - {name: a, scopes: [check], key: \"k-0123456789\\x01abcdef\"}\n", 2, "cannot be sent in an Authorization header"},
		{"api key unknown field", "api_keys:\n  - {name: a, scopes: [check], key: a, secret: b}\n", 2, `unknown key "secret"`},
		{"merge key", "base: &b {budget: 1s}\nstore:\n  <<: *b\n", 1, `unknown key "base"`},
		{"instance name", "instance: \"guard 1\"\n", 1, "instance"},
		{"list user abuse rejects", "lists:\n  deny:\n    users:\n      - ok@example.com\n      - \"a\\0b\"\n", 5, "must not contain NUL"},
		{"empty key secret", "key_secret: \"\"\n", 1, "must not be empty"},
		{"phone region unknown", "phone:\n  default_region: XX\n", 2, "phone.default_region \"XX\" is not an ISO 3166 region"},
		{"phone region alpha-3", "phone: {default_region: GBR}\n", 1, "phone.default_region"},
		{"phone region non-geographic", "phone: {default_region: \"001\"}\n", 1, "phone.default_region"},
		{"phone prefix digits zero", "phone:\n  prefix_digits: 0\n", 2, "between 1 and 15"},
		{"phone prefix digits too many", "phone: {prefix_digits: 16}\n", 1, "between 1 and 15"},
		{"phone unknown key", "phone: {region: GB}\n", 1, `unknown key "region"`},
		{"bad country in deny list", "lists:\n  deny:\n    countries: [GB, Narnia]\n", 3, `"Narnia" is not an ISO 3166 region`},
		{"bad phone header", "forward_auth: {phone_header: \"X Phone\"}\n", 1, "not a valid HTTP header name"},
		{"user header is the api key", "forward_auth: {user_header: authorization}\n", 1, "carries Guard's API key"},
		{"device header is the api key", "forward_auth:\n  device_header: Authorization\n", 2, "carries Guard's API key"},
		// Go's HTTP server moves Host into Request.Host and drops
		// Transfer-Encoding from the headers: a forward-auth identifier
		// read from either would never be there (every request anonymous).
		{"user header is Host", "forward_auth: {user_header: host}\n", 1, "never reaches Guard as a header"},
		{"phone header is Transfer-Encoding", "forward_auth:\n  phone_header: Transfer-Encoding\n", 2, "never reaches Guard as a header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("guard.yaml", []byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want line %d: %s", tt.yaml, tt.line, tt.want)
			}
			prefix := "guard.yaml:" + strconv.Itoa(tt.line) + ": "
			var found bool
			for _, line := range strings.Split(err.Error(), "\n") {
				if strings.HasPrefix(line, prefix) && strings.Contains(line, tt.want) {
					found = true
				}
			}
			if !found {
				t.Errorf("error = %q, want a line starting %q containing %q", err, prefix, tt.want)
			}
		})
	}
}

// TestParseConfigOneDocument: documents with nothing in them, around the
// one that holds the config, are harmless and accepted (docs/configuration.md).
func TestParseConfigOneDocument(t *testing.T) {
	tests := []struct{ name, yaml string }{
		{"leading marker", "---\ninstance: a\n"},
		{"trailing marker", "instance: a\n---\n"},
		{"trailing markers", "instance: a\n---\n---\n"},
		{"trailing comment", "instance: a\n---\n# instance: b\n"},
		{"end marker", "instance: a\n...\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("guard.yaml", []byte(tt.yaml), noEnv)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.yaml, err)
			}
			if got, want := cfg.Instance(), "a"; got != want {
				t.Errorf("Instance = %q, want %q", got, want)
			}
		})
	}
	if _, err := Parse("guard.yaml", []byte("# nothing but a comment\n"), noEnv); err != nil {
		t.Errorf("Parse(comment only): %v", err)
	}
}

// TestParseConfigMaxDuration: windows, ladder steps, decay and the trust
// TTL may be as long as abuse.MaxDuration, 366 days (one more millisecond
// is refused: TestParseConfigRejects).
func TestParseConfigMaxDuration(t *testing.T) {
	const y = `actions:
  login:
    limits: [{dimension: ip, limit: 5, window: 8784h, algorithm: counter}]
    failures: [{dimension: user, limit: 5, window: 8784h}]
    lockout: {ladder: [8784h], decay: 8784h}
trusted_devices: {ttl: 8784h}
`
	cfg, err := Parse("guard.yaml", []byte(y), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	const want = 366 * 24 * time.Hour
	login := cfg.Guard.Policy.Actions["login"]
	for _, got := range []time.Duration{login.Limits[0].Window, login.Failures[0].Window, login.Lockout.Ladder[0], login.Lockout.Decay, cfg.Guard.TrustTTL} {
		if got != want {
			t.Errorf("duration = %v, want %v", got, want)
		}
	}
	if abuse.MaxDuration != want {
		t.Errorf("abuse.MaxDuration = %v, want %v (docs/configuration.md)", abuse.MaxDuration, want)
	}
}

// TestParseConfigDecay: an absent decay is the default, an explicit one is
// kept (0s is refused: TestParseConfigRejects).
func TestParseConfigDecay(t *testing.T) {
	const action = "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n"
	tests := []struct {
		name, lockout string
		want          time.Duration
	}{
		{"absent", "    lockout: {ladder: [1m]}\n", abuse.DefaultDecay},
		{"no lockout", "", abuse.DefaultDecay},
		{"1ms", "    lockout: {ladder: [1m], decay: 1ms}\n", time.Millisecond},
		{"24h", "    lockout: {ladder: [1m], decay: 24h}\n", 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("guard.yaml", []byte(action+tt.lockout), noEnv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Guard.Policy.Actions["login"].Lockout.Decay; got != tt.want {
				t.Errorf("Decay = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseConfigReportsEveryProblem(t *testing.T) {
	_, err := Parse("g.yaml", []byte("listen: nope\nip: {ipv6_prefix: 0}\nstore: {fleet_size: -1}\n"), noEnv)
	if err == nil {
		t.Fatal("parseConfig = nil error, want three problems")
	}
	if got, want := strings.Count(err.Error(), "\n")+1, 3; got != want {
		t.Errorf("problems reported = %d, want %d: %v", got, want, err)
	}
}

func TestParseConfigEnvRejects(t *testing.T) {
	tests := []struct {
		name, key, value, want string
	}{
		{"listen", "GUARD_LISTEN", "8080", "GUARD_LISTEN: "},
		{"redis", "GUARD_REDIS_URL", "localhost:6379", "GUARD_REDIS_URL: "},
		{"database", "GUARD_DATABASE_URL", "host=x dbname=y", "GUARD_DATABASE_URL: "},
		{"prefix", "GUARD_KEY_PREFIX", "a b", "GUARD_KEY_PREFIX: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("", nil, envMap(map[string]string{tt.key: tt.value}))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Errorf("error = %v, want one starting %q", err, tt.want)
			}
		})
	}
}

func TestParseConfigURLErrorsHidePasswords(t *testing.T) {
	_, err := Parse("g.yaml", []byte("database_url: mysql://u:s3cret@x/db\n"), noEnv)
	if err == nil {
		t.Fatal("parseConfig = nil error, want one")
	}
	if strings.Contains(err.Error(), "s3cret") {
		t.Errorf("error %q repeats the password", err)
	}
}

func TestParseConfigAnchors(t *testing.T) {
	y := `actions:
  login:
    limits: &lim
      - {dimension: ip, limit: 5, window: 1m}
  otp_send:
    limits: *lim
`
	cfg, err := Parse("g.yaml", []byte(y), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := cfg.Guard.Policy.Actions["otp_send"].Limits[0].Name, "otp_send/ip"; got != want {
		t.Errorf("aliased rule name = %q, want %q", got, want)
	}
}

func TestParsePrefix(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"203.0.113.7", "203.0.113.7/32"},
		{"2001:db8::/32", "2001:db8::/32"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
		{"::ffff:10.0.0.1", "10.0.0.1/32"},
	}
	for _, tt := range tests {
		got, err := parsePrefix(tt.in)
		if err != nil || got.String() != tt.want {
			t.Errorf("parsePrefix(%q) = %v, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// TestShippedConfigsParse keeps the config files shipped in the repository
// valid (scripts/dev.yaml, mounted by docker-compose.yml).
func TestShippedConfigsParse(t *testing.T) {
	for _, path := range []string{"../../scripts/dev.yaml"} {
		if _, err := Load(path, noEnv); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
}

// TestDocumentedExampleParses keeps the complete example of
// docs/configuration.md (its first yaml block) a valid config.
func TestDocumentedExampleParses(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	example, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/configuration.md has no yaml block")
	}
	// The example's placeholders are not valid values.
	example = strings.NewReplacer(`"<openssl rand -hex 32>"`, "s-0123456789abcdef",
		`"<hex sha-256 of the key>"`, `"`+strings.Repeat("ab", 32)+`"`).Replace(example)
	if _, err := Parse("configuration.md", []byte(example), noEnv); err != nil {
		t.Errorf("the documented example does not parse:\n%v", err)
	}
}

func TestParseConfigPhone(t *testing.T) {
	tests := []struct {
		name       string
		yaml       string
		want       abuse.PhoneConfig
		deny, allw []string
		header     string
	}{
		{"defaults", "", abuse.PhoneConfig{PrefixDigits: abuse.DefaultPrefixDigits}, []string{}, []string{}, "X-Guard-Phone"},
		{"set", "phone: {default_region: gb, prefix_digits: 8}\nlists:\n  deny: {countries: [ru, \"001\"]}\n  allow: {countries: [GB]}\n" +
			"forward_auth: {phone_header: x-phone}\n",
			abuse.PhoneConfig{DefaultRegion: "GB", PrefixDigits: 8}, []string{"RU", "001"}, []string{"GB"}, "X-Phone"},
		{"empty region", "phone: {default_region: \"\"}\n", abuse.PhoneConfig{PrefixDigits: abuse.DefaultPrefixDigits}, []string{}, []string{}, "X-Guard-Phone"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("guard.yaml", []byte(tt.yaml), noEnv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got := cfg.Guard.Phone; got != tt.want {
				t.Errorf("phone = %+v; want %+v", got, tt.want)
			}
			if got := cfg.Guard.Policy.Deny.Countries; strings.Join(got, ",") != strings.Join(tt.deny, ",") {
				t.Errorf("deny countries = %q; want %q", got, tt.deny)
			}
			if got := cfg.Guard.Policy.Allow.Countries; strings.Join(got, ",") != strings.Join(tt.allw, ",") {
				t.Errorf("allow countries = %q; want %q", got, tt.allw)
			}
			if tt.header != "X-Guard-Phone" && cfg.API.ForwardAuth.PhoneHeader != tt.header {
				t.Errorf("phone header = %q; want %q", cfg.API.ForwardAuth.PhoneHeader, tt.header)
			}
		})
	}
	// The bounds of prefix_digits in the file are abuse's.
	for _, n := range []int{abuse.MinPrefixDigits, abuse.MaxPrefixDigits} {
		if _, err := Parse("guard.yaml", []byte("phone: {prefix_digits: "+strconv.Itoa(n)+"}\n"), noEnv); err != nil {
			t.Errorf("prefix_digits %d: %v", n, err)
		}
	}
}

// TestRereadKeySecretRule: a reload reads the file as serve would start on
// it, so a file that configures a Redis without a key secret is refused
// (serve and config check refuse it too), even though the running secret
// would be kept; the environment's secret still counts.
func TestRereadKeySecretRule(t *testing.T) {
	const redis = "redis_url: redis://127.0.0.1:6379/0\n"
	tests := []struct {
		name    string
		reload  string
		env     map[string]string
		wantErr string // "" for a valid reload
	}{
		{"secret kept in the file", redis + "key_secret: 0123456789abcdef0123\n", nil, ""},
		{"secret dropped from the file", redis, nil, "g.yaml:1: key_secret is required with a Redis URL"},
		{"secret in the environment", redis, map[string]string{EnvKeySecret: "0123456789abcdef0123"}, ""},
		{"no Redis, no secret", "listen: 127.0.0.1:8080\n", nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "g.yaml")
			if err := os.WriteFile(path, []byte(redis+"key_secret: 0123456789abcdef0123\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			running, err := Load(path, envMap(tt.env))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if err := os.WriteFile(path, []byte(tt.reload), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = running.Reread("")
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Reread: %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.HasPrefix(err.Error(), filepath.Dir(path)+"/"+tt.wantErr)):
				t.Errorf("Reread: %v, want %q", err, tt.wantErr)
			}
		})
	}
}
