package abuse

import (
	"errors"
	"fmt"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Decision reasons: the wire's (sdk), defined there once.
const (
	ReasonOK               = sdk.ReasonOK
	ReasonRateLimited      = sdk.ReasonRateLimited
	ReasonLockedOut        = sdk.ReasonLockedOut
	ReasonDenylisted       = sdk.ReasonDenylisted
	ReasonAllowlisted      = sdk.ReasonAllowlisted
	ReasonShadow           = sdk.ReasonShadow
	ReasonStoreUnavailable = sdk.ReasonStoreUnavailable
	ReasonChallenge        = sdk.ReasonChallenge
)

// Error codes of InputError.
const (
	CodeInvalidRequest = "invalid_request"
	CodeUnknownAction  = "unknown_action"
)

// InputError is bad input: the API answers 400 with Code, Field and Message.
type InputError struct {
	Code    string
	Field   string
	Message string
}

func (e *InputError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("%s: %s: %s", e.Code, e.Field, e.Message)
	}
	return e.Code + ": " + e.Message
}

// ErrNotFound is returned by Unlock when nothing was locked.
var ErrNotFound = errors.New("not found")

// Subject names who makes an attempt. Nil fields are absent; the values are
// raw caller input, normalised by Guard.
type Subject struct {
	User   *string
	IP     *string
	Device *string
	// Phone is a phone number (phone.go), the source of the phone,
	// phone_country and phone_prefix dimensions.
	Phone *string
	// PhoneCountry and PhonePrefix name a phone_country or phone_prefix
	// key directly ("GB", "+447400"), as lockout listings show them; only
	// manual lockouts and unlocks of those dimensions read them.
	PhoneCountry *string
	PhonePrefix  *string
}

// CheckInput is one /v1/check request.
type CheckInput struct {
	Action  string
	Subject Subject
	// Cost defaults to 1 when 0.
	Cost   int
	DryRun bool
	// ChallengePassed says the person passed the caller's challenge:
	// challenge rules admit (and log) the attempt.
	ChallengePassed bool
	// APIKey is the calling key's name, for the audit trail.
	APIKey string
}

// Decision is Guard's answer to a check.
type Decision struct {
	// ID is the decision_id (a ULID), also the audit event's id.
	ID      string
	At      time.Time
	Action  string
	Allowed bool
	// Challenge is set (with Allowed false) when only challenge rules
	// stand in the way: the caller should challenge the person.
	Challenge bool
	Reason    string
	// RetryAfter is exact (millisecond precision); 0 when allowed.
	RetryAfter time.Duration
	Degraded   bool
	DryRun     bool
	// Limits are the evaluated rules, most restrictive first (least
	// remaining, then latest reset).
	Limits []LimitState
	// Lockout is set when a lockout decided the answer.
	Lockout *LockoutInfo
}

// Verdict is the decision on the wire: allow, deny or challenge.
func (d *Decision) Verdict() string {
	switch {
	case d.Allowed:
		return sdk.DecisionAllow
	case d.Challenge:
		return sdk.DecisionChallenge
	}
	return sdk.DecisionDeny
}

// LimitState is one evaluated rule after a decision.
type LimitState struct {
	Rule      string
	Dimension string
	Limit     int
	Window    time.Duration
	Remaining int
	// Reset is when the window's oldest entry leaves it.
	Reset  time.Duration
	Shadow bool
	// Algorithm is the rule's algorithm (AlgLog for distinct rules too);
	// Distinct the field a distinct rule counts, else "".
	Algorithm string
	Distinct  string
}

// LockoutInfo describes one lockout.
type LockoutInfo struct {
	Ledger    string
	Dimension string
	Level     int
	Since     time.Time
	Until     time.Time
}

// ReportInput is one /v1/report request.
type ReportInput struct {
	Action  string
	Subject Subject
	// Outcome is "success" or "failure".
	Outcome string
	// DecisionID is the check's decision_id when the caller gave it: at
	// most MaxDecisionIDLen bytes of [A-Za-z0-9_-] (a decision_id Guard
	// issued is a 26-character ULID).
	DecisionID string
	APIKey     string
}

// MaxDecisionIDLen bounds a report's decision_id, in bytes.
const MaxDecisionIDLen = 64

// validDecisionID reports whether id is a decision_id a report may carry:
// 1 to MaxDecisionIDLen bytes of [A-Za-z0-9_-]. Anything else would let a
// caller store arbitrary bytes in the audit trail under an id's name.
func validDecisionID(id string) bool {
	if id == "" || len(id) > MaxDecisionIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !(b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

// ReportOutcome is Guard's answer to a report.
type ReportOutcome struct {
	// Lockout is the lockout the report struck or met; nil when none.
	Lockout  *LockoutInfo
	Degraded bool
}

// LockoutFilter selects active lockouts; zero fields do not filter.
type LockoutFilter struct {
	Subject   Subject
	Dimension string
	Ledger    string
	// Limit is the page size, 1 to 1000; 0 means 100.
	Limit int
	// Cursor is a LockoutPage's Next, "" for the first page.
	Cursor string
	// ledgersOnly skips naming identifiers from the audit trail (an
	// unlock only needs to know which ledgers are locked).
	ledgersOnly bool
	// phoneKey is the hash of one key of the phone dimension Dimension
	// (an unlock's): a Subject's Phone selects a number's own lockouts
	// only, and nothing selects a phone_country or phone_prefix key.
	phoneKey string
}

// LockoutPage is one page of a lockout listing.
type LockoutPage struct {
	Lockouts []ActiveLockout
	// Next continues the listing; "" when it is complete.
	Next string
}

// ActiveLockout is one entry of the lockout listing. Only the identifiers
// of its dimension are set; they are nil when Guard cannot resolve them.
type ActiveLockout struct {
	Ledger    string
	Dimension string
	User      *string
	IP        *string
	Device    *string
	// Phone is set for a phone lockout (E.164); PhoneCountry and
	// PhonePrefix for a phone_country and a phone_prefix lockout.
	Phone        *string
	PhoneCountry *string
	PhonePrefix  *string
	Level        int
	Since        time.Time
	Until        time.Time
	// Manual is set for an administrator's manual lockout (POST
	// /v1/lockouts); a key may also have a struck one, listed apart.
	Manual bool
}

// LockInput is one POST /v1/lockouts request: a manual lockout.
type LockInput struct {
	Dimension string
	Subject   Subject
	// Ledger limits the lock to one ledger; "" means every ledger of an
	// action with a lockout ladder.
	Ledger string
	// Duration is 1s to 30 days.
	Duration time.Duration
	Reason   string
	APIKey   string
}

// UnlockInput is one DELETE /v1/lockouts request.
type UnlockInput struct {
	Dimension string
	Subject   Subject
	// Ledger limits the unlock to one ledger; "" means every ledger.
	Ledger string
	Reason string
	APIKey string
}
