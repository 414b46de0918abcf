// Package sdk is the Go client of the Guard HTTP API (contract v1) and its
// wire types: Client (with a 300 ms default deadline, safe retries and
// FailOpen/FailClosed policies), Middleware for net/http (gin: the
// guardgin module), IPExtractor for client addresses behind proxies, and
// Subject for building requests. It is its own module and depends on the
// standard library only.
//
// Times on the wire are RFC 3339 with milliseconds in UTC; durations are
// integer milliseconds in fields ending in _ms.
package sdk

import (
	"time"
)

// TimeFormat is the layout of every time on the wire: RFC 3339 with
// milliseconds, always in UTC.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// FormatTime renders t the way Guard puts times on the wire (UTC,
// millisecond precision, truncated).
func FormatTime(t time.Time) string {
	return t.UTC().Truncate(time.Millisecond).Format(TimeFormat)
}

// Decisions and reasons of a check. Contract v1.1 adds the decision
// "challenge" (reason "challenge_required"); code that compares
// decisions should treat any decision but DecisionAllow as "not now".
const (
	DecisionAllow     = "allow"
	DecisionDeny      = "deny"
	DecisionChallenge = "challenge"

	ReasonOK               = "ok"
	ReasonRateLimited      = "rate_limited"
	ReasonLockedOut        = "locked_out"
	ReasonDenylisted       = "denylisted"
	ReasonAllowlisted      = "allowlisted"
	ReasonShadow           = "shadow"
	ReasonStoreUnavailable = "store_unavailable"
	ReasonChallenge        = "challenge_required"

	// ReasonGuardUnavailable is never sent by Guard: it is the reason of
	// an answer a FailurePolicy gave because Guard could not answer
	// (CheckResponse.Bypassed).
	ReasonGuardUnavailable = "guard_unavailable"
)

// Report outcomes.
const (
	OutcomeSuccess = "success"
	OutcomeFailure = "failure"
)

// CheckRequest is the body of POST /v1/check. A nil identifier is absent
// (its rules are not evaluated); at least one of User, IP, Device and
// Phone is required.
type CheckRequest struct {
	// Action is one of the configured actions, e.g. "login".
	Action string  `json:"action"`
	User   *string `json:"user,omitempty"`
	IP     *string `json:"ip,omitempty"`
	Device *string `json:"device,omitempty"`
	// Phone is a phone number, E.164 ("+447400123456") or national in the
	// server's phone.default_region; the source of the phone,
	// phone_country and phone_prefix dimensions (contract v1.1).
	Phone *string `json:"phone,omitempty"`
	// Cost counts the attempt as that many requests; nil means 1.
	Cost *int `json:"cost,omitempty"`
	// DryRun evaluates and audits without recording anything.
	DryRun bool `json:"dry_run,omitempty"`
	// ChallengePassed says the person passed the challenge an earlier
	// answer asked for (DecisionChallenge): challenge rules then allow
	// the attempt; deny rules, lockouts and lists apply as always.
	ChallengePassed bool `json:"challenge_passed,omitempty"`
}

// CheckResponse is the answer of POST /v1/check.
type CheckResponse struct {
	// Decision is DecisionAllow, DecisionDeny or DecisionChallenge.
	Decision string `json:"decision"`
	// Reason is one of the Reason constants.
	Reason string `json:"reason"`
	// RetryAfterMs is the exact wait before the same attempt could be
	// allowed, in milliseconds; 0 when allowed.
	RetryAfterMs int64  `json:"retry_after_ms"`
	DecisionID   string `json:"decision_id"`
	// Degraded is set when the local fallback limiter decided.
	Degraded bool `json:"degraded"`
	// Limits holds every evaluated rule, most restrictive first; never nil
	// on the wire.
	Limits []Limit `json:"limits"`
	// Lockout is set when a lockout decided the answer.
	Lockout *Lockout `json:"lockout"`

	// The fields below are not on the wire.

	// RateLimit and RateLimitPolicy are the answer's RateLimit and
	// RateLimit-Policy headers, for relaying to the end client; "" when
	// Guard sent none.
	RateLimit       string `json:"-"`
	RateLimitPolicy string `json:"-"`
	// Bypassed is set when Guard did not decide: it could not answer and
	// the failure policy did (FailOpen: allow, FailClosed: deny; reason
	// ReasonGuardUnavailable). Cause is why.
	Bypassed bool  `json:"-"`
	Cause    error `json:"-"`
}

// Allowed reports whether the decision is DecisionAllow.
func (r *CheckResponse) Allowed() bool { return r.Decision == DecisionAllow }

// Challenge reports whether the decision is DecisionChallenge: show the
// person a challenge (CAPTCHA, step-up MFA) and, once passed, check again
// with ChallengePassed set.
func (r *CheckResponse) Challenge() bool { return r.Decision == DecisionChallenge }

// RetryAfter is RetryAfterMs as a duration: the exact wait before the same
// attempt could be allowed; 0 when allowed or when no wait will do
// (denylisted).
func (r *CheckResponse) RetryAfter() time.Duration {
	return time.Duration(r.RetryAfterMs) * time.Millisecond
}

// Limit is one evaluated rule after a decision.
type Limit struct {
	Rule      string `json:"rule"`
	Dimension string `json:"dimension"`
	Limit     int    `json:"limit"`
	// WindowMs is the rule's window in milliseconds.
	WindowMs  int64 `json:"window_ms"`
	Remaining int   `json:"remaining"`
	// ResetMs is the time until the window's oldest entry leaves it, in
	// milliseconds (rounded up); 0 when the window is empty. For a
	// counter: until its counts weigh nothing; for a bucket: until it is
	// full again.
	ResetMs int64 `json:"reset_ms"`
	// Algorithm is the rule's algorithm: "log", "counter" or "bucket"
	// (contract v1.1; "log" for distinct rules).
	Algorithm string `json:"algorithm"`
	// Distinct is the field a distinct-count rule counts ("user" or
	// "device"; Remaining then counts distinct values left), "" for
	// other rules.
	Distinct string `json:"distinct,omitempty"`
}

// Lockout is a lockout that decided an answer.
type Lockout struct {
	Dimension string    `json:"dimension"`
	Until     time.Time `json:"until"`
	// Level is the key's ladder step, from 1 once it has struck; 0 for a
	// manual lockout of a key without strikes.
	Level int `json:"level"`
}

// ReportRequest is the body of POST /v1/report.
type ReportRequest struct {
	Action string  `json:"action"`
	User   *string `json:"user,omitempty"`
	IP     *string `json:"ip,omitempty"`
	Device *string `json:"device,omitempty"`
	Phone  *string `json:"phone,omitempty"`
	// Outcome is OutcomeSuccess or OutcomeFailure.
	Outcome string `json:"outcome"`
	// DecisionID is the decision_id of the check this report closes;
	// optional.
	DecisionID string `json:"decision_id,omitempty"`
}

// ReportResponse is the answer of POST /v1/report.
type ReportResponse struct {
	// Lockout is the lockout the report struck or met; nil when none.
	Lockout *Lockout `json:"lockout"`
}

// LockoutFilter selects active lockouts for GET /v1/lockouts; empty
// fields do not filter.
type LockoutFilter struct {
	User      string
	IP        string
	Device    string
	Phone     string
	Dimension string
	Ledger    string
	// Limit is the page size, 1 to 1000 (0: the server's default, 100).
	Limit int
	// Cursor is a previous answer's NextCursor, "" for the first page.
	Cursor string
}

// LockoutEntry is one active lockout. Only the identifiers of its
// dimension are set; the others are nil and absent on the wire.
type LockoutEntry struct {
	Ledger    string  `json:"ledger"`
	Dimension string  `json:"dimension"`
	User      *string `json:"user,omitempty"`
	IP        *string `json:"ip,omitempty"`
	Device    *string `json:"device,omitempty"`
	// Phone is set on phone lockouts (E.164), PhoneCountry (ISO 3166)
	// and PhonePrefix on phone_country and phone_prefix lockouts.
	Phone        *string   `json:"phone,omitempty"`
	PhoneCountry *string   `json:"phone_country,omitempty"`
	PhonePrefix  *string   `json:"phone_prefix,omitempty"`
	Level        int       `json:"level"`
	Since        time.Time `json:"since"`
	Until        time.Time `json:"until"`
}

// LockoutsResponse is the answer of GET /v1/lockouts.
type LockoutsResponse struct {
	Lockouts []LockoutEntry `json:"lockouts"`
	// NextCursor continues the listing (as the cursor parameter); nil
	// when it is complete.
	NextCursor *string `json:"next_cursor"`
}

// UnlockRequest is the body of DELETE /v1/lockouts: the dimension and the
// identifiers it needs (for phone_country and phone_prefix: PhoneCountry
// or PhonePrefix, or any Phone in that country or prefix).
type UnlockRequest struct {
	Dimension string  `json:"dimension"`
	User      *string `json:"user,omitempty"`
	IP        *string `json:"ip,omitempty"`
	Device    *string `json:"device,omitempty"`
	Phone     *string `json:"phone,omitempty"`
	// PhoneCountry ("GB") and PhonePrefix ("+447400") name a
	// phone_country or phone_prefix lockout as listings show it, instead
	// of a Phone in it.
	PhoneCountry *string `json:"phone_country,omitempty"`
	PhonePrefix  *string `json:"phone_prefix,omitempty"`
	// Ledger limits the unlock to one ledger; empty means every ledger.
	Ledger string `json:"ledger,omitempty"`
	// Reason is recorded in the audit trail as the admin event's note.
	Reason string `json:"reason,omitempty"`
}

// UnlockResponse is the answer of a successful DELETE /v1/lockouts.
type UnlockResponse struct {
	Unlocked bool `json:"unlocked"`
}

// Policy is the answer of GET /v1/policy: the effective policy, never keys
// or secrets.
type Policy struct {
	Actions map[string]PolicyAction `json:"actions"`
	Lists   PolicyLists             `json:"lists"`
}

// PolicyAction is the policy of one action.
type PolicyAction struct {
	Limits         []PolicyRule  `json:"limits"`
	Failures       []PolicyRule  `json:"failures"`
	Lockout        PolicyLockout `json:"lockout"`
	OnStoreFailure string        `json:"on_store_failure"`
	Shadow         bool          `json:"shadow"`
	// ReserveFailures: every allowed check holds one provisional failure
	// until its report settles it.
	ReserveFailures bool `json:"reserve_failures"`
}

// PolicyRule is one rule: a sliding-window log, a counter or a bucket
// (Algorithm), or a distinct-count rule (Distinct).
type PolicyRule struct {
	Name      string `json:"name"`
	Dimension string `json:"dimension"`
	Limit     int    `json:"limit"`
	WindowMs  int64  `json:"window_ms"`
	Shadow    bool   `json:"shadow"`
	// Distinct is "user" or "device" for a distinct-count rule, else "".
	Distinct string `json:"distinct,omitempty"`
	// Algorithm is "log", "counter" or "bucket".
	Algorithm string `json:"algorithm"`
	// OnLimit is "deny" or "challenge" for attempt rules; empty (absent)
	// for failure rules.
	OnLimit string `json:"on_limit,omitempty"`
}

// PolicyLockout is an action's escalation ladder.
type PolicyLockout struct {
	LadderMs     []int64 `json:"ladder_ms"`
	DecayMs      int64   `json:"decay_ms"`
	Ledger       string  `json:"ledger"`
	CountDenials bool    `json:"count_denials"`
}

// PolicyLists holds the allow and deny lists.
type PolicyLists struct {
	Allow PolicyList `json:"allow"`
	Deny  PolicyList `json:"deny"`
}

// PolicyList is one allow or deny list.
type PolicyList struct {
	CIDRs   []string `json:"cidrs"`
	Users   []string `json:"users"`
	Devices []string `json:"devices"`
	// Countries are ISO 3166 regions, matched on phone_country.
	Countries []string `json:"countries"`
}

// Readiness is the answer of GET /readyz.
type Readiness struct {
	// Mode is "normal" or "degraded" (Redis unreachable).
	Mode string `json:"mode"`
	// Redis and Postgres are "ok" or "down".
	Redis    string `json:"redis"`
	Postgres string `json:"postgres"`
	// AuditBacklog counts events queued or spooled but not yet stored.
	AuditBacklog int64 `json:"audit_backlog"`
}
