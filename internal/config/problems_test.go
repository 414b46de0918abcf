package config

import (
	"strings"
	"testing"
)

// TestParseReportsEachProblemOnce: a value the decoder rejects is not
// reported again by the checks that run after decoding (the policy's, the
// sections'), which would see only its zero stand-in; problems of other
// values next to it still are.
func TestParseReportsEachProblemOnce(t *testing.T) {
	const failures = "actions:\n  login:\n    failures: [{dimension: user, limit: 5, window: 1m}]\n"
	tests := []struct {
		name string
		yaml string
		want []string // every problem, in order
	}{
		{"list entries", "lists:\n  allow:\n    cidrs:\n      - 10.0.0.0/8\n      - nope\n    users:\n      - bob\n      - \"   \"\n  deny:\n    devices: [\"\"]\n",
			[]string{
				`g.yaml:5: lists.allow.cidrs[1]: "nope" is not an IP address or CIDR`,
				"g.yaml:8: lists.allow.users[1]: user is empty after normalisation",
				"g.yaml:10: lists.deny.devices[0]: must not be empty",
			}},
		{"cidr with host bits", "lists:\n  deny: {cidrs: [10.0.0.1/8]}\n",
			[]string{`g.yaml:2: lists.deny.cidrs[0]: "10.0.0.1/8" has host bits set (did you mean 10.0.0.0/8?)`}},
		{"ladder step not a duration", failures + "    lockout: {ladder: [1m, x]}\n",
			[]string{`g.yaml:4: actions.login.lockout.ladder[1]: "x" is not a duration (Go syntax such as 500ms, 15m, 24h)`}},
		{"ladder step zero", failures + "    lockout: {ladder: [1m, 0s]}\n",
			[]string{`g.yaml:4: action "login": lockout.ladder[1]: ladder step must be at least 1ms, not 0s`}},
		{"redis cluster not a list", "redis: {cluster: 127.0.0.1:7000}\n",
			[]string{`g.yaml:1: redis.cluster must be a list, not "127.0.0.1:7000"`}},
		{"redis cluster node not a value", "redis:\n  cluster: [[a]]\n",
			[]string{"g.yaml:2: redis.cluster[0] must be a single value, not a list"}},
		{"redis sentinel not a mapping", "redis: {sentinel: x}\n",
			[]string{`g.yaml:1: redis.sentinel must be a mapping, not "x"`}},
		{"redis sentinel addrs not a list", "redis:\n  sentinel: {master: m, addrs: 127.0.0.1:26379}\n",
			[]string{`g.yaml:2: redis.sentinel.addrs must be a list, not "127.0.0.1:26379"`}},
		{"redis sentinel bad and cluster too", "redis:\n  cluster: [127.0.0.1:7000]\n  sentinel: x\n",
			[]string{`g.yaml:3: redis.sentinel must be a mapping, not "x"`, "g.yaml:3: redis: give cluster or sentinel, not both"}},
		{"listen not a value", "listen: [a]\n",
			[]string{"g.yaml:1: listen must be a single value, not a list"}},
		{"key secret not a value", "key_secret: {a: b}\n",
			[]string{"g.yaml:1: key_secret must be a single value, not a mapping"}},
		{"header not a value", "forward_auth: {user_header: [a]}\n",
			[]string{"g.yaml:1: forward_auth.user_header must be a single value, not a list"}},
		{"notification events not a list", "notifications: {events: lockout}\n",
			[]string{`g.yaml:1: notifications.events must be a list, not "lockout"`}},
		{"notification secret not a value", "notifications:\n  webhook_url: https://example.com/h\n  secret: [a]\n",
			[]string{"g.yaml:3: notifications.secret must be a single value, not a list"}},
		{"notification spool not a value", "notifications: {spool_dir: [a]}\n",
			[]string{"g.yaml:1: notifications.spool_dir must be a single value, not a list"}},
		{"api key not a value", "api_keys:\n  - {name: a, scopes: [check], key: [k]}\n",
			[]string{"g.yaml:2: api_keys[0].key must be a single value, not a list"}},
		{"api key not a mapping", "api_keys: [k]\n",
			[]string{`g.yaml:1: api_keys[0] must be a mapping, not "k"`}},
		{"rule not a mapping", "actions:\n  login:\n    limits: [5]\n",
			[]string{`g.yaml:3: actions.login.limits[0] must be a mapping, not "5"`}},
		{"a missing window does not hide a bad dimension", "actions:\n  login:\n    limits:\n      - {dimension: email, limit: 5}\n",
			[]string{
				"g.yaml:4: actions.login.limits[0]: window is required",
				`g.yaml:4: action "login": limits[0].dimension: unknown dimension "email" (known: user, ip, device, user+ip, user+device, phone, phone_country, phone_prefix)`,
			}},
		{"an unknown key does not hide a bad action name", "actions:\n  log in:\n    limits: [{dimension: ip, limit: 1, window: 1m}]\n    bogus: 1\n",
			[]string{
				`g.yaml:4: actions.log in: unknown key "bogus" (known: failures, limits, lockout, on_store_failure, reserve_failures, shadow)`,
				`g.yaml:2: action "log in": "log in" is not a valid action name (letters, digits, _ . -, at most 64)`,
			}},
		{"an unknown key does not hide a bad limit", "actions:\n  login:\n    limits:\n      - {dimension: ip, limit: 0, window: 1m, burst: 2}\n",
			[]string{
				`g.yaml:4: actions.login.limits[0]: unknown key "burst" (known: algorithm, dimension, distinct, limit, name, on_limit, shadow, window)`,
				`g.yaml:4: action "login": limits[0].limit: limit must be between 1 and 1000000, not 0`,
			}},
		{"a misspelt rules key is the problem", "actions:\n  login:\n    limts: [{dimension: ip, limit: 1, window: 1m}]\n",
			[]string{`g.yaml:3: actions.login: unknown key "limts" (known: failures, limits, lockout, on_store_failure, reserve_failures, shadow)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("g.yaml", []byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse = nil error, want %q", tt.want)
			}
			if got, want := err.Error(), strings.Join(tt.want, "\n"); got != want {
				t.Errorf("problems =\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// TestProblemsBoundValues: a problem repeats at most maxQuoted bytes of
// the value it is about, then its length (a 3 MB file that is not YAML
// once came back whole in its one problem).
func TestProblemsBoundValues(t *testing.T) {
	big := strings.Repeat("x", 3<<20)
	head := `"` + strings.Repeat("x", maxQuoted) + `"`
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"a file of one huge scalar", big, "g.yaml:1: config must be a mapping, not " + head + "… (3145728 bytes)"},
		{"a huge unknown key", strings.Repeat("k", 100) + ": 1\n", `g.yaml:1: config: unknown key "` + strings.Repeat("k", 64) + `"… (100 bytes) (known: `},
		{"a huge CIDR", "lists:\n  deny: {cidrs: [" + strings.Repeat("1", 200) + "]}\n", `g.yaml:2: lists.deny.cidrs[0]: "` + strings.Repeat("1", 64) + `"… (200 bytes) is not an IP address or CIDR`},
		{"a huge number", "actions:\n  login:\n    limits: [{dimension: ip, limit: " + strings.Repeat("9", 100) + ", window: 1m}]\n", `limit: ` + strings.Repeat("9", 64) + `… (100 bytes) is too large`},
		{"a huge listen address", "listen: " + strings.Repeat("h", 70) + "\n", `g.yaml:1: listen: "` + strings.Repeat("h", 64) + `"… (70 bytes) is not host:port`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse("g.yaml", []byte(tt.yaml), noEnv)
			if err == nil {
				t.Fatalf("Parse = nil error, want %q", tt.want)
			}
			if got := err.Error(); !strings.Contains(got, tt.want) || len(got) > 1000 {
				t.Errorf("problems = %.2000q\nwant them to contain %q and be short", got, tt.want)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"short", "abc", `"abc"`},
		{"exactly the bound", strings.Repeat("a", maxQuoted), `"` + strings.Repeat("a", maxQuoted) + `"`},
		{"one past", strings.Repeat("a", maxQuoted+1), `"` + strings.Repeat("a", maxQuoted) + `"… (65 bytes)`},
		// "é" is 2 bytes: the 64th byte starts no character, so the cut
		// falls before it rather than in its middle.
		{"cut at a character", strings.Repeat("a", maxQuoted-1) + "é" + "z", `"` + strings.Repeat("a", maxQuoted-1) + `"… (66 bytes)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := quote(tt.in); got != tt.want {
				t.Errorf("quote(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}
