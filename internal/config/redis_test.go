package config

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestParseRedisDeployments(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		want func(t *testing.T, c *Config)
	}{
		{"cluster", "redis:\n  cluster: [10.0.0.1:7000, \"redis-b:7001\"]\n  username: guard\n  password: pw\n  tls: true\n", nil, func(t *testing.T, c *Config) {
			if got, want := c.Redis.Cluster, []string{"10.0.0.1:7000", "redis-b:7001"}; !slices.Equal(got, want) {
				t.Errorf("Cluster = %v, want %v", got, want)
			}
			if c.Redis.Username != "guard" || c.Redis.Password != "pw" || !c.Redis.TLS || !c.Redis.Enabled() {
				t.Errorf("Redis = %+v, want guard/pw over TLS, enabled", c.Redis)
			}
		}},
		{"sentinel", "redis:\n  sentinel: {master: guard, addrs: [127.0.0.1:26379]}\n", nil, func(t *testing.T, c *Config) {
			s := c.Redis.Sentinel
			if s == nil || s.Master != "guard" || !slices.Equal(s.Addrs, []string{"127.0.0.1:26379"}) {
				t.Errorf("Sentinel = %+v, want master guard at 127.0.0.1:26379", s)
			}
			if c.Redis.URL != "" || !c.Redis.Enabled() {
				t.Errorf("Redis = %+v, want no URL, enabled", c.Redis)
			}
		}},
		// The contract's defaults next to a redis_url, and credentials for
		// the URL's Redis (limits.NewRedisClient applies them).
		{"url with the redis defaults", "redis_url: redis://a:6379/0\nredis:\n  username: \"\"\n  password: \"\"\n  tls: false\n", nil, func(t *testing.T, c *Config) {
			if c.Redis.URL != "redis://a:6379/0" || c.Redis.Username != "" || c.Redis.Password != "" || c.Redis.TLS {
				t.Errorf("Redis = %+v, want the URL alone", c.Redis)
			}
		}},
		{"url with credentials", "redis_url: rediss://a:6380/0\nredis: {username: guard, password: pw}\n", nil, func(t *testing.T, c *Config) {
			if c.Redis.Username != "guard" || c.Redis.Password != "pw" {
				t.Errorf("Redis = %+v, want guard/pw", c.Redis)
			}
		}},
		{"env url with file credentials", "redis: {password: pw}\n", map[string]string{"GUARD_REDIS_URL": "redis://env:6379/0"}, func(t *testing.T, c *Config) {
			if c.Redis.URL != "redis://env:6379/0" || c.Redis.Password != "pw" {
				t.Errorf("Redis = %+v, want the env URL with password pw", c.Redis)
			}
		}},
		// An empty URL is no URL: memory, or what the environment gives.
		{"empty urls", "redis_url: \"\"\ndatabase_url: \"\"\n", nil, func(t *testing.T, c *Config) {
			if c.Redis.Enabled() || c.DatabaseURL != "" {
				t.Errorf("Redis = %+v, database %q; want neither", c.Redis, c.DatabaseURL)
			}
		}},
		{"empty url, env url", "redis_url: \"\"\n", map[string]string{"GUARD_REDIS_URL": "redis://env:6379/0"}, func(t *testing.T, c *Config) {
			if c.Redis.URL != "redis://env:6379/0" {
				t.Errorf("URL = %q, want the env's", c.Redis.URL)
			}
		}},
		{"empty url and cluster", "redis_url: \"\"\nredis: {cluster: [a:7000]}\n", nil, func(t *testing.T, c *Config) {
			if c.Redis.URL != "" || len(c.Redis.Cluster) != 1 {
				t.Errorf("Redis = %+v, want the cluster alone", c.Redis)
			}
		}},
		{"env overrides redis_url only", "redis_url: redis://file:6379/0\n", map[string]string{"GUARD_REDIS_URL": "redis://env:6379/0"}, func(t *testing.T, c *Config) {
			if got, want := c.Redis.URL, "redis://env:6379/0"; got != want {
				t.Errorf("URL = %q, want %q", got, want)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse("g.yaml", []byte(tt.yaml), envMap(tt.env))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.want(t, c)
		})
	}
}

// TestParseRejectsV11 covers the v1.1 keys this loader parses (redis,
// forward_auth.allow_status) and those it must still refuse because Guard
// does not implement them.
func TestParseRejectsV11(t *testing.T) {
	const rule = "actions:\n  login:\n    limits:\n      - {dimension: ip, limit: 1, window: 1m"
	tests := []struct {
		name string
		yaml string
		env  map[string]string
		file string // "" for guard.yaml
		line int
		want string
	}{
		{"url and cluster", "redis_url: redis://a:6379\nredis:\n  cluster: [a:7000]\n", nil, "", 1, "give one Redis deployment"},
		{"url and sentinel", "redis_url: redis://a:6379\nredis: {sentinel: {master: m, addrs: [a:26379]}}\n", nil, "", 1, "give one Redis deployment"},
		// The file's half of the clash has a line: the problem is reported
		// there, naming the variable.
		{"env url and cluster", "key_secret: s\nredis:\n  cluster: [a:7000]\n", map[string]string{"GUARD_REDIS_URL": "redis://a:6379"}, "", 3, "redis.cluster and GUARD_REDIS_URL: give one Redis deployment"},
		{"env url and sentinel", "redis:\n  sentinel: {master: m, addrs: [a:26379]}\n", map[string]string{"GUARD_REDIS_URL": "redis://a:6379"}, "", 2, "redis.sentinel and GUARD_REDIS_URL: give one Redis deployment"},
		// As for redis_url: the key is there, whatever its value.
		{"env url and empty sentinel", "redis:\n  sentinel:\n", map[string]string{"GUARD_REDIS_URL": "redis://a:6379"}, "", 2, "redis.sentinel and GUARD_REDIS_URL: give one Redis deployment"},
		{"url and empty sentinel", "redis_url: redis://a:6379\nredis:\n  sentinel:\n", nil, "", 1, "give one Redis deployment"},
		{"cluster and sentinel", "redis:\n  cluster: [a:7000]\n  sentinel: {master: m, addrs: [a:26379]}\n", nil, "", 3, "cluster or sentinel, not both"},
		{"cluster bad addr", "redis:\n  cluster:\n    - a:7000\n    - nohost\n", nil, "", 4, "not host:port"},
		{"cluster empty", "redis:\n  cluster: []\n", nil, "", 2, "at least one node"},
		{"sentinel no master", "redis:\n  sentinel:\n    addrs: [a:26379]\n", nil, "", 2, "master is required"},
		{"sentinel no addrs", "redis:\n  sentinel: {master: m}\n", nil, "", 2, "addrs is required"},
		{"sentinel bad port", "redis:\n  sentinel: {master: m, addrs: [\"a:0\"]}\n", nil, "", 2, "bad port"},
		{"unknown redis key", "redis:\n  cluster: [a:7000]\n  db: 3\n", nil, "", 3, `unknown key "db"`},
		{"password without deployment", "redis:\n  password: x\n", nil, "", 2, "no Redis is configured"},
		{"tls without deployment", "redis_url: \"\"\nredis: {tls: true}\n", nil, "", 2, "no Redis is configured"},
		{"tls on a unix socket", "redis_url: unix:///run/redis.sock\nredis: {tls: true}\n", nil, "", 1, "has no TLS"},
		{"env unix socket and tls", "redis: {tls: true}\n", map[string]string{"GUARD_REDIS_URL": "unix:///run/redis.sock"}, "GUARD_REDIS_URL", 0, "has no TLS"},
		{"url password and redis.password differ", "redis_url: redis://guard:one@a:6379/0\nredis: {password: two}\n", nil, "", 1, "differ"},
		{"env url username and redis.username differ", "redis: {username: admin}\n", map[string]string{"GUARD_REDIS_URL": "redis://guard:pw@a:6379/0"}, "GUARD_REDIS_URL", 0, "differ"},
		{"tls not bool", "redis: {cluster: [a:7000], tls: yes-please}\n", nil, "", 1, "true or false"},
		{"allow status", "forward_auth:\n  allow_status: 201\n", nil, "", 2, "must be 204 or 200, not 201"},
		{"allow status text", "forward_auth: {allow_status: ok}\n", nil, "", 1, "whole number"},
		{"algorithm unknown", rule + ", algorithm: fifo}\n", nil, "", 4, `unknown algorithm "fifo"`},
		{"algorithm on a failure rule", "actions:\n  login:\n    failures:\n      - {dimension: ip, limit: 1, window: 1m, algorithm: counter}\n    lockout: {ladder: [1m]}\n", nil, "", 4, "failure rules are always logs"},
		{"algorithm on a distinct rule", rule + ", distinct: user, algorithm: bucket}\n", nil, "", 4, "does not apply"},
		{"distinct unknown", rule + ", distinct: ip}\n", nil, "", 4, "distinct must be user or device"},
		{"distinct in the dimension", "actions:\n  login:\n    limits:\n      - {dimension: user+ip, limit: 1, window: 1m, distinct: user}\n", nil, "", 4, "must differ from the dimension"},
		{"on_limit unknown", rule + ", on_limit: captcha}\n", nil, "", 4, `on_limit must be deny or challenge, not "captcha"`},
		{"on_limit on a failure rule", "actions:\n  login:\n    lockout: {ladder: [1m]}\n    failures:\n      - {dimension: user, limit: 3, window: 1m, on_limit: challenge}\n", nil, "", 5, "on_limit applies to limits only"},
		{"reserve_failures without failures", "actions:\n  login:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n    reserve_failures: true\n", nil, "", 4, "reserve_failures needs failures"},
		{"reserve_failures not a bool", "actions:\n  login:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n    reserve_failures: often\n", nil, "", 4, "true or false"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("guard.yaml", []byte(tt.yaml), envMap(tt.env))
			if err == nil {
				t.Fatalf("Parse(%q) = nil error, want %s", tt.yaml, tt.want)
			}
			prefix := "guard.yaml:" + strconv.Itoa(tt.line) + ": "
			if tt.file != "" {
				prefix = tt.file + ": "
			}
			var found bool
			for _, line := range strings.Split(err.Error(), "\n") {
				found = found || (strings.HasPrefix(line, prefix) && strings.Contains(line, tt.want))
			}
			if !found {
				t.Errorf("error = %q, want a line starting %q containing %q", err, prefix, tt.want)
			}
		})
	}
}

func TestParseAllowStatus(t *testing.T) {
	for _, s := range []int{200, 204} {
		c, err := Parse("g.yaml", []byte("forward_auth: {allow_status: "+strconv.Itoa(s)+"}\n"), noEnv)
		if err != nil {
			t.Fatalf("allow_status %d: %v", s, err)
		}
		if got := c.API.ForwardAuth.AllowStatus; got != s {
			t.Errorf("AllowStatus = %d, want %d", got, s)
		}
	}
}

func TestParsePolicyProblemsAllAtOnce(t *testing.T) {
	y := "actions:\n  login:\n    limits:\n      - {dimension: email, limit: 1, window: 1m}\n      - {dimension: ip, limit: 0, window: 1m}\n  signup:\n    shadow: true\n"
	_, err := Parse("g.yaml", []byte(y), noEnv)
	if err == nil {
		t.Fatal("Parse = nil error, want three problems")
	}
	for _, want := range []string{"g.yaml:4: ", "g.yaml:5: ", "g.yaml:6: "} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks a problem at %q", err, want)
		}
	}
}

func TestParseWarnsShortAPIKeys(t *testing.T) {
	y := "api_keys:\n  - {name: short, scopes: [check], key: k-123}\n  - {name: long, scopes: [check], key: k-0123456789abcdef}\n" +
		"  - {name: hashed, scopes: [check], key_sha256: \"" + strings.Repeat("ab", 32) + "\"}\n"
	c, err := Parse("g.yaml", []byte(y), noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, want := len(c.Warnings), 1; got != want {
		t.Fatalf("warnings = %v, want %d", c.Warnings, want)
	}
	if w := c.Warnings[0]; w.Where != "g.yaml:2" || !strings.Contains(w.Msg, `"short"`) || !strings.Contains(w.Msg, "5 bytes") {
		t.Errorf("warning = %+v, want g.yaml:2 naming key \"short\" of 5 bytes", w)
	}
}

func TestParseFileAndPolicyProblemsTogether(t *testing.T) {
	const login = "actions:\n  login:\n    limits:\n"
	tests := []struct {
		name  string
		yaml  string
		lines []string // every problem, in order
	}{
		{"both kinds at once", "listen: nope\n" + login + "      - {dimension: email, limit: 5, window: 1m}\n",
			[]string{"g.yaml:1: ", "g.yaml:5: "}},
		{"a bad number is not also out of range", login + "      - {dimension: ip, limit: ten, window: 1m}\n",
			[]string{"g.yaml:4: "}},
		{"a missing window is not also too short", login + "      - {dimension: ip, limit: 5}\n",
			[]string{"g.yaml:4: "}},
		{"a bad action name is not also bad rule and ledger names", "actions:\n  log in:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n",
			[]string{"g.yaml:2: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("g.yaml", []byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatal("Parse = nil error")
			}
			got := strings.Split(err.Error(), "\n")
			if len(got) != len(tt.lines) {
				t.Fatalf("problems = %q, want %d starting %q", got, len(tt.lines), tt.lines)
			}
			for i, p := range tt.lines {
				if !strings.HasPrefix(got[i], p) {
					t.Errorf("problem %d = %q, want it to start %q", i, got[i], p)
				}
			}
		})
	}
}
