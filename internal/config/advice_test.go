package config

import (
	"strings"
	"testing"
)

// goodLogin is a login policy that follows the guidance: it draws no
// warning, so each case below shows exactly the warnings of its change.
const goodLogin = `  login:
    limits:
      - {dimension: ip, limit: 60, window: 1m}
    failures:
      - {dimension: user, limit: 50, window: 24h}
    lockout: {ladder: [1m, 5m, 1h]}
`

func TestAdvice(t *testing.T) {
	tests := []struct {
		name    string
		actions string
		want    []string // "LINE: substring" of each warning, in order
	}{
		{"guidance followed", goodLogin, nil},
		{"more than 100 failures per account", `  login:
    limits:
      - {dimension: ip, limit: 60, window: 1m}
    failures:
      - {dimension: user+ip, limit: 10, window: 15m}
      - {dimension: user, limit: 101, window: 24h}
    lockout: {ladder: [1m, 5m]}
`, []string{"7: 101 failures allowed per account before a lockout; at most 100 (NIST SP 800-63B §5.2.2)"}},
		{"exactly 100 failures per account", strings.Replace(goodLogin, "limit: 50", "limit: 100", 1), nil},
		{"no per-account failure rule", strings.Replace(goodLogin, "dimension: user, limit: 50", "dimension: user+ip, limit: 10", 1),
			[]string{"5: no failures rule on dimension user", "NIST SP 800-63B"}},
		{"per-account rule counting distinct devices", strings.Replace(goodLogin, "dimension: user, limit: 50", "dimension: user, distinct: device, limit: 5", 1),
			[]string{"5: no failures rule on dimension user", "NIST SP 800-63B"}},
		{"ladder that never grows", strings.Replace(goodLogin, "[1m, 5m, 1h]", "[15m, 15m]", 1),
			[]string{"7: the lockout ladder never grows ([15m0s, 15m0s])", "OWASP Authentication Cheat Sheet"}},
		{"one-step ladder", strings.Replace(goodLogin, "[1m, 5m, 1h]", "[1h]", 1), []string{"7: the lockout ladder never grows"}},
		{"very long lockout", strings.Replace(goodLogin, "[1m, 5m, 1h]", "[1m, 1h, 168h]", 1),
			[]string{"7: a lockout step of 168h0m0s", "denial of service"}},
		{"login without an ip rule", strings.Replace(goodLogin, "dimension: ip, limit: 60", "dimension: device, limit: 60", 1),
			[]string{"3: no rule on dimension ip", "OWASP Credential Stuffing Prevention Cheat Sheet"}},
		{"login without failures", `  login:
    limits:
      - {dimension: ip, limit: 60, window: 1m}
`, []string{"2: failed attempts are never counted", "NIST SP 800-63B"}},
		{"otp_send without phone or user limit", goodLogin + `  otp_send:
    limits:
      - {dimension: ip, limit: 30, window: 1h}
`, []string{"9: OTP sends have no per-number (phone) or per-user limit", "Twilio"}},
		{"otp_send with a phone limit", goodLogin + `  otp_send:
    limits:
      - {dimension: ip, limit: 30, window: 1h}
      - {dimension: user, limit: 5, window: 10m}
`, nil},
		{"shadow action", goodLogin + `    shadow: true
`, []string{"8: the action is in shadow mode"}},
		{"shadow rule", strings.Replace(goodLogin, "window: 1m}", "window: 1m, shadow: true}", 1),
			[]string{"3: no rule on dimension ip", "4: rule login/ip is in shadow mode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("p.yaml", []byte("actions:\n"+tt.actions), noEnv)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var got []string
			for _, w := range cfg.Warnings {
				if strings.HasPrefix(w.Msg, "action ") { // the policy's, not "no api_keys"
					got = append(got, strings.TrimPrefix(w.Where, "p.yaml:")+": "+w.Msg)
				}
			}
			// A want entry without a line continues the warning before.
			var n int
			for _, w := range tt.want {
				if w[0] >= '0' && w[0] <= '9' {
					n++
				}
			}
			if len(got) != n {
				t.Fatalf("warnings = %q, want %d: %q", got, n, tt.want)
			}
			i := -1
			for _, w := range tt.want {
				if w[0] >= '0' && w[0] <= '9' {
					i++
					if !strings.HasPrefix(got[i], w[:strings.Index(w, ":")+1]) {
						t.Errorf("warning %d = %q, want it on line %s", i, got[i], w[:strings.Index(w, ":")])
					}
					w = w[strings.Index(w, ":")+2:]
				}
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %d = %q, want it to contain %q", i, got[i], w)
				}
			}
		})
	}
}

func TestAdviceSparesTheDefaultPolicy(t *testing.T) {
	cfg, err := Parse("", nil, noEnv)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for _, w := range cfg.Warnings {
		if strings.HasPrefix(w.Msg, "action ") {
			t.Errorf("the built-in policy draws warning %+v, want none", w)
		}
	}
}

func TestWarnSecrets(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		env  Env
		want []string // Where + ": " + the start of Msg
	}{
		{"no api keys", "key_secret: 0123456789abcdef0123\n", noEnv, []string{"g.yaml: no api_keys configured"}},
		{"weak secret in the file", "key_secret: short\napi_keys:\n  - {name: a, scopes: [check], key: k-0123456789abcdef}\n", noEnv,
			[]string{"g.yaml:1: WEAK KEY SECRET: key_secret is 5 bytes"}},
		{"weak secret in the environment", "api_keys:\n  - {name: a, scopes: [check], key: k-0123456789abcdef}\n", Env{EnvKeySecret: "tiny"},
			[]string{"GUARD_KEY_SECRET: WEAK KEY SECRET: key_secret is 4 bytes"}},
		{"neither", "key_secret: 0123456789abcdef0123\napi_keys:\n  - {name: a, scopes: [check], key: k-0123456789abcdef}\n", noEnv, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Parse("g.yaml", []byte(tt.yaml), tt.env)
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Warnings) != len(tt.want) {
				t.Fatalf("warnings = %+v, want %d", cfg.Warnings, len(tt.want))
			}
			for i, w := range tt.want {
				if got := cfg.Warnings[i].Where + ": " + cfg.Warnings[i].Msg; !strings.HasPrefix(got, w) {
					t.Errorf("warning %d = %q, want it to start %q", i, got, w)
				}
			}
		})
	}
}

// TestEveryProblemOnOneLine: a rule written on one line with several bad
// values reports each of them, not only the first the decoder met.
func TestEveryProblemOnOneLine(t *testing.T) {
	y := "actions:\n  login:\n    limits:\n      - {dimension: usr, limit: 0, window: 1x}\n"
	_, err := Parse("p.yaml", []byte(y), noEnv)
	if err == nil {
		t.Fatal("Parse = nil error, want three problems")
	}
	got := strings.Split(err.Error(), "\n")
	want := []string{`window: "1x" is not a duration`, `unknown dimension "usr"`, "limit must be between 1 and"}
	if len(got) != len(want) {
		t.Fatalf("problems = %q, want %d", got, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], "p.yaml:4: ") || !strings.Contains(got[i], w) {
			t.Errorf("problem %d = %q, want p.yaml:4: ... %q", i, got[i], w)
		}
	}
}
