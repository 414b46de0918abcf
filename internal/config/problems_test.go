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
