package abuse

import "time"

// defaultLadder is the lockout ladder of the built-in policy: short enough
// that a user who fumbled a password is back within a minute, long enough
// that a sustained guessing attack is throttled to a few hundred guesses a
// day per key.
var defaultLadder = []time.Duration{
	time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour,
}

// DefaultDecay is how long a key must stay quiet (no strikes) before its
// lockout level returns to 0, when an action's lockout does not say. Decay
// counts from the last strike, so it is three times the default ladder's
// top step: a lockout of the top step ends with the level still at the top,
// and a persistent attacker stays at 24h lockouts instead of starting the
// ladder again at 1 minute.
const DefaultDecay = 72 * time.Hour

// DefaultPolicy returns the built-in policy, used when the config file has no
// actions. Its numbers follow published guidance:
//
//   - NIST SP 800-63B §5.2.2 (rate limiting): a verifier limits consecutive
//     failed authentication attempts on one account to at most 100. login
//     strikes at 50 failures of one user in 24h and the ladder then slows
//     guessing to about 50 failures a day per account at its top step.
//     Guard never locks an account for good: past the ladder, permanent
//     measures (a reset, a second factor) are the auth service's call, so
//     it should act on repeated top-level lockouts (see the audit trail).
//   - Twilio Verify: at most 5 verification sends to one destination per 10
//     minutes, and 5 check attempts per verification. otp_send allows 5 sends
//     per user in 10 minutes; otp_verify strikes at 5 failed checks of one
//     user in 10 minutes.
//   - Strict failure budgets: otp_verify reserves a failure at every
//     allowed check (reserve_failures), so N parallel guesses at one code
//     before the first report count as N failures (Keycloak #31726, where
//     parallel OTP requests outran the brute-force counter; Cacti #6996).
//   - Challenge instead of deny: signup's device rule challenges
//     (on_limit: challenge). A device that creates several accounts an
//     hour is as often a shared family or library computer as a bot; a
//     CAPTCHA stops the script and lets the person through, while the IP
//     rule still denies a flood outright (OWASP Automated Threats, OAT-019
//     account creation: CAPTCHA as a countermeasure).
//   - SMS pumping (toll fraud: bots make a service send OTPs to numbers
//     whose operator shares the termination fee). Twilio Verify limits
//     sends per destination (5 per 10 minutes, above) and its Fraud Guard
//     blocks by country and by number prefix, since pumping rotates
//     through the numbers of one range; NIST SP 800-63B-4 §3.1.3 (out-of-
//     band authenticators) requires rate limiting of OTP sends like that of
//     failed attempts. otp_send allows 5 sends per phone number in 10
//     minutes, 50 per phone_prefix (the range of +447400, 10^7 numbers at
//     the default 6 digits) in an hour and 1000 per phone_country in an
//     hour: far above a real user's OTPs, far below the thousands an hour
//     a pumping run sends; a service with more traffic in one country
//     raises the last (docs/threat-model.md, "SMS pumping").
//   - Auth0 brute-force protection: block a user after 10 consecutive failed
//     logins from one IP. login strikes at 10 failures of one user+ip in 15
//     minutes, which locks that user from that address only, so an attacker
//     elsewhere cannot lock the victim out.
//   - OWASP Credential Stuffing Prevention Cheat Sheet and Auth0 Suspicious
//     IP Throttling: password spraying tries a few passwords against many
//     accounts from one address, which per-account limits never see; the
//     defence is to throttle an IP that fails for too many different
//     accounts. login strikes the IP when it fails for 20 distinct users
//     in an hour (a distinct-count failure rule), far above what one
//     household or office behind a NAT fails for, and it climbs the same
//     ladder.
//
// login and otp_verify share the ledger "auth", so failed OTP checks and
// failed passwords of one user climb one ladder. Each call returns a fresh
// Policy the caller may modify.
func DefaultPolicy() Policy {
	ladder := func() []time.Duration { return append([]time.Duration(nil), defaultLadder...) }
	return Policy{
		Actions: map[string]Action{
			"login": {
				Limits: []Rule{
					{Dimension: DimIP, Limit: 60, Window: time.Minute},
					{Dimension: DimUser, Limit: 30, Window: 15 * time.Minute},
				},
				Failures: []Rule{
					{Dimension: DimUserIP, Limit: 10, Window: 15 * time.Minute},
					{Dimension: DimUser, Limit: 50, Window: 24 * time.Hour},
					{Dimension: DimIP, Distinct: DimUser, Limit: 20, Window: time.Hour},
				},
				Lockout: Lockout{Ladder: ladder(), Decay: DefaultDecay, Ledger: "auth"},
			},
			"otp_send": {
				Limits: []Rule{
					{Dimension: DimUser, Limit: 5, Window: 10 * time.Minute},
					{Dimension: DimIP, Limit: 30, Window: time.Hour},
					{Dimension: DimPhone, Limit: 5, Window: 10 * time.Minute},
					// Prefix and country budgets are sliding-window counters:
					// O(1) memory per key, where a log of 1000 entries per
					// country would keep 6 KB (docs/performance.md).
					{Dimension: DimPhonePrefix, Limit: 50, Window: time.Hour, Algorithm: AlgCounter},
					{Dimension: DimPhoneCountry, Limit: 1000, Window: time.Hour, Algorithm: AlgCounter},
				},
			},
			"otp_verify": {
				Limits: []Rule{
					{Dimension: DimIP, Limit: 60, Window: time.Minute},
					{Dimension: DimUser, Limit: 20, Window: 10 * time.Minute},
				},
				Failures: []Rule{
					{Dimension: DimUser, Limit: 5, Window: 10 * time.Minute},
				},
				Lockout:         Lockout{Ladder: ladder(), Decay: DefaultDecay, Ledger: "auth"},
				ReserveFailures: true,
			},
			"signup": {
				Limits: []Rule{
					{Dimension: DimIP, Limit: 10, Window: time.Hour},
					{Dimension: DimDevice, Limit: 5, Window: time.Hour, OnLimit: OnLimitChallenge},
				},
			},
			"password_reset": {
				Limits: []Rule{
					{Dimension: DimUser, Limit: 5, Window: time.Hour},
					{Dimension: DimIP, Limit: 20, Window: time.Hour},
				},
			},
		},
	}
}
