package config

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/abuse"
)

// Advice: a policy Guard accepts but that departs from published guidance.
// `guard config check` prints these warnings (and fails on them with
// --strict); `guard serve` logs them at start and at every reload. Both
// read them from Config.Warnings, which Parse fills here, so there is one
// list of them.

// Sources cited by the warnings.
const (
	srcNIST         = "NIST SP 800-63B §5.2.2"
	srcOWASPAuth    = "OWASP Authentication Cheat Sheet"
	srcOWASPStuff   = "OWASP Credential Stuffing Prevention Cheat Sheet"
	srcOWASPSMS     = "OWASP Forgot Password and MFA Cheat Sheets; Twilio Verify: 5 sends per number per 10 min"
	srcGuardShadow  = "docs/configuration.md, shadow"
	srcOWASPLockout = "OWASP Authentication Cheat Sheet, account lockout: lockouts can be abused for denial of service"
)

// MaxAccountFailures is NIST SP 800-63B's ceiling on consecutive failed
// attempts allowed on one account before the verifier stops them.
const MaxAccountFailures = 100

// LongLockout is the longest ladder step that passes without a warning: a
// user lockout anyone can trigger by failing with the victim's name turns
// longer ones into a denial of service against that user.
const LongLockout = 24 * time.Hour

// dimPhone is the phone-number dimension (API.md v1.1, "Phone numbers"),
// named here as a string so the advice works whether or not abuse defines
// it yet.
const dimPhone = "phone"

// advise appends a warning for every departure from guidance in the
// (validated) policy, each at the line of the action or rule it is about.
// The built-in default policy follows the guidance and draws none.
func (d *decoder) advise(cfg *Config) {
	if !cfg.PolicyFromFile {
		return
	}
	names := make([]string, 0, len(cfg.Guard.Policy.Actions))
	for name := range cfg.Guard.Policy.Actions {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		a := cfg.Guard.Policy.Actions[name]
		warn := func(path, src, format string, args ...any) {
			line, ok := d.lines["actions."+name+path]
			if !ok {
				line = d.lines["actions."+name]
			}
			cfg.Warnings = append(cfg.Warnings, Warning{
				Where: fmt.Sprintf("%s:%d", d.file, line),
				Msg:   fmt.Sprintf("action %s: %s (%s)", name, fmt.Sprintf(format, args...), src),
			})
		}
		adviseAction(name, a, warn)
	}
}

// adviseAction holds the rules of the advice for one action; warn takes the
// path below the action (".failures[1]") the warning is about.
func adviseAction(name string, a abuse.Action, warn func(path, src, format string, args ...any)) {
	verifies := isVerify(name)
	if verifies && len(a.Failures) == 0 {
		warn("", srcNIST, "failed attempts are never counted (no failures rules), so no lockout ever stops guessing; add failures rules with a lockout ladder")
	}
	if len(a.Failures) > 0 {
		// A distinct rule on user counts the account's distinct devices,
		// not its failures: one device fails without limit under it.
		idx, least := -1, 0
		for i, r := range a.Failures {
			if r.Dimension == abuse.DimUser && r.Distinct == "" && !r.Shadow && (idx < 0 || r.Limit < least) {
				idx, least = i, r.Limit
			}
		}
		switch {
		case idx < 0:
			warn(".failures", srcNIST, "no failures rule on dimension user: an account can fail without limit from many addresses before any lockout; add one with a limit of at most %d", MaxAccountFailures)
		case least > MaxAccountFailures:
			warn(fmt.Sprintf(".failures[%d]", idx), srcNIST, "%d failures allowed per account before a lockout; at most %d", least, MaxAccountFailures)
		}
	}
	if l := a.Lockout.Ladder; len(l) > 0 {
		if slices.Max(l) <= l[0] {
			warn(".lockout.ladder", srcOWASPAuth, "the lockout ladder never grows (%s): a persistent attacker waits out the same lockout again and again; make later steps longer", ladderText(l))
		}
		if top := slices.Max(l); top > LongLockout && hasDim(a.Failures, abuse.DimUser) {
			warn(".lockout.ladder", srcOWASPLockout, "a lockout step of %s: anyone who fails with a victim's user name can lock the victim out that long; keep user lockouts at most %s and rely on the ladder", top, LongLockout)
		}
	}
	if isLogin(name) && !hasDim(a.Limits, abuse.DimIP) && !hasDim(a.Failures, abuse.DimIP) {
		warn(".limits", srcOWASPStuff, "no rule on dimension ip: credential stuffing from one address across many accounts is not limited; add an ip limit")
	}
	if isOTPSend(name) && !hasDim(a.Limits, dimPhone) && !hasDim(a.Limits, abuse.DimUser) {
		warn(".limits", srcOWASPSMS, "OTP sends have no per-number (phone) or per-user limit: one number can be pumped with messages (SMS toll fraud); add a phone or user limit")
	}
	if a.Shadow {
		warn(".shadow", srcGuardShadow, "the action is in shadow mode: its rules decide nothing (answers are allow/shadow); turn shadow off once the rules are tuned")
	}
	for i, r := range a.Limits {
		if r.Shadow && !a.Shadow {
			warn(fmt.Sprintf(".limits[%d]", i), srcGuardShadow, "rule %s is in shadow mode: it decides nothing", r.Name)
		}
	}
	for i, r := range a.Failures {
		if r.Shadow && !a.Shadow {
			warn(fmt.Sprintf(".failures[%d]", i), srcGuardShadow, "failure rule %s is in shadow mode: it strikes no lockout", r.Name)
		}
	}
}

// hasDim reports whether an enforced rule of rules keys on dim.
func hasDim(rules []abuse.Rule, dim string) bool {
	return slices.ContainsFunc(rules, func(r abuse.Rule) bool { return r.Dimension == dim && !r.Shadow })
}

// The advice recognises actions by their names (Guard cannot know what an
// action does): the built-in names and common spellings of them.
func isLogin(name string) bool {
	return strings.Contains(name, "login") || strings.Contains(name, "signin") || strings.Contains(name, "sign_in")
}

func isOTPSend(name string) bool {
	return name == "otp_send" || (strings.Contains(name, "otp") || strings.Contains(name, "sms")) && strings.Contains(name, "send")
}

// isVerify reports actions that check a secret (password, OTP code), whose
// failures must climb a lockout ladder.
func isVerify(name string) bool {
	return isLogin(name) || strings.Contains(name, "verify")
}

func ladderText(l []time.Duration) string {
	s := make([]string, len(l))
	for i, d := range l {
		s[i] = d.String()
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// warnSecrets warns about a short key secret (from the file or
// GUARD_KEY_SECRET) and about a config without API keys.
func (d *decoder) warnSecrets(cfg *Config) {
	if n := len(cfg.Guard.KeySecret); n > 0 && n < WeakSecretBytes {
		where := EnvKeySecret
		if cfg.Env.Get(EnvKeySecret) == "" {
			where = fmt.Sprintf("%s:%d", d.file, d.lines["key_secret"])
		}
		cfg.Warnings = append(cfg.Warnings, Warning{Where: where, Msg: fmt.Sprintf("WEAK KEY SECRET: key_secret is %d bytes, shorter than %d, "+
			"so the hashes of low-entropy identifiers (phone numbers) could be guessed from Redis; use e.g. openssl rand -hex 32", n, WeakSecretBytes)})
	}
	if len(cfg.API.Keys) == 0 {
		cfg.Warnings = append(cfg.Warnings, Warning{Where: d.file, Msg: "no api_keys configured: every /v1 request will be answered 401; add api_keys to the config file"})
	}
}
