package abuse

import (
	"net/netip"
	"time"
)

// Dimensions a rule can key on.
const (
	DimUser       = "user"
	DimIP         = "ip"
	DimDevice     = "device"
	DimUserIP     = "user+ip"
	DimUserDevice = "user+device"
)

// Dimensions lists every valid dimension, in canonical order.
var Dimensions = []string{DimUser, DimIP, DimDevice, DimUserIP, DimUserDevice}

// Store-failure modes of an action.
const (
	OnFailureLocal = "local"
	OnFailureAllow = "allow"
	OnFailureDeny  = "deny"
)

// Policy is the whole effective policy: what cmd/guard builds from the
// config file (or DefaultPolicy) and Guard enforces.
type Policy struct {
	// Actions by name.
	Actions map[string]Action
	// Allow and Deny lists; deny wins.
	Allow List
	Deny  List
}

// Action is the policy of one action such as "login".
type Action struct {
	// Limits are the attempt rules checked by /v1/check.
	Limits []Rule
	// Failures are the failure rules filled by failed reports.
	Failures []Rule
	// Lockout is the escalation ladder; required when Failures is set.
	Lockout Lockout
	// OnStoreFailure is OnFailureLocal (default), OnFailureAllow or
	// OnFailureDeny.
	OnStoreFailure string
	// Shadow makes every rule of the action shadow.
	Shadow bool
}

// Rule is one sliding-window-log rule.
type Rule struct {
	// Name defaults to "action/dimension" for limits and
	// "action/dimension/failures" for failure rules.
	Name      string
	Dimension string
	Limit     int
	Window    time.Duration
	Shadow    bool
}

// Lockout is an action's escalation policy.
type Lockout struct {
	// Ladder holds the lockout duration per level.
	Ladder []time.Duration
	// Decay is the quiet time after which the level returns to 0.
	Decay time.Duration
	// Ledger names the shared lockout state; default: the action's name.
	Ledger string
	// CountDenials records each rate-limit denial as a failure.
	CountDenials bool
}

// List is an allow or deny list. Users are normalised when the policy is
// validated.
type List struct {
	CIDRs   []netip.Prefix
	Users   []string
	Devices []string
}
