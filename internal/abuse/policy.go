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
	// The dimensions of a phone number (phone.go): the E.164 number, its
	// ISO 3166 region and its first phone.prefix_digits digits.
	DimPhone        = "phone"
	DimPhoneCountry = "phone_country"
	DimPhonePrefix  = "phone_prefix"
)

// Dimensions lists every valid dimension, in canonical order.
var Dimensions = []string{DimUser, DimIP, DimDevice, DimUserIP, DimUserDevice, DimPhone, DimPhoneCountry, DimPhonePrefix}

// What a rule does when full (Rule.OnLimit).
const (
	OnLimitDeny      = "deny"
	OnLimitChallenge = "challenge"
)

// Store-failure modes of an action.
const (
	OnFailureLocal = "local"
	OnFailureAllow = "allow"
	OnFailureDeny  = "deny"
)

// Policy is the whole effective policy: what internal/config builds from
// the config file (or DefaultPolicy) and Guard enforces. The yaml tags are
// the config file's keys (internal/config decodes into these types; this
// package does not import a YAML library).
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
	Limits []Rule `yaml:"limits"`
	// Failures are the failure rules filled by failed reports.
	Failures []Rule `yaml:"failures"`
	// Lockout is the escalation ladder; required when Failures is set.
	Lockout Lockout `yaml:"lockout"`
	// OnStoreFailure is OnFailureLocal (default), OnFailureAllow or
	// OnFailureDeny.
	OnStoreFailure string `yaml:"on_store_failure" min:"1"`
	// Shadow makes every rule of the action shadow.
	Shadow bool `yaml:"shadow"`
	// ReserveFailures makes every allowed check add one provisional
	// failure, settled by the report with its decision_id, so parallel
	// attempts cannot outrun the failure limits.
	ReserveFailures bool `yaml:"reserve_failures"`
}

// Algorithms of attempt rules (contract v1.1, "Rule algorithms").
const (
	AlgLog     = "log"
	AlgCounter = "counter"
	AlgBucket  = "bucket"
)

// Rule is one rule: a sliding-window log by default, else the Algorithm
// it names, or a distinct-count rule (Distinct). A config file's explicit
// "" for a string field (min) is an error: only an absent key takes the
// default.
type Rule struct {
	// Name defaults to "action/dimension" for limits and
	// "action/dimension/failures" for failure rules; a distinct rule's
	// defaults are "action/dimension/distinct-<field>" and that plus
	// "/failures".
	Name string `yaml:"name" min:"1"`
	// Dimension is one of Dimensions.
	Dimension string `yaml:"dimension" required:"true"`
	// Limit is the most attempts counted in any window, 1..MaxRuleLimit.
	Limit int `yaml:"limit" required:"true"`
	// Window is the sliding window, 1ms to MaxDuration in whole
	// milliseconds.
	Window time.Duration `yaml:"window" required:"true"`
	// Shadow evaluates the rule without enforcing it.
	Shadow bool `yaml:"shadow"`
	// Distinct, DimUser or DimDevice, makes the rule count the distinct
	// values of that field per key (e.g. the users one IP tried) instead
	// of attempts: password spraying. It must not be part of Dimension.
	Distinct string `yaml:"distinct" min:"1"`
	// Algorithm is AlgLog (the default), AlgCounter or AlgBucket, for
	// attempt rules; failure and distinct rules are always logs.
	Algorithm string `yaml:"algorithm" min:"1"`
	// OnLimit is what a full attempt rule does: OnLimitDeny (default) or
	// OnLimitChallenge (ask the caller to challenge the person instead).
	OnLimit string `yaml:"on_limit" min:"1"`
}

// Lockout is an action's escalation policy. An action with failure rules
// always has one: a nil Ladder is the built-in policy's (1m 5m 15m 1h 6h
// 24h). An action without failure rules has none unless it names a ladder
// (its ledger is then one a manual lockout without ledger covers). An
// empty, non-nil Ladder is an error on every action.
type Lockout struct {
	// Ladder holds the lockout duration per level, each 1ms to
	// MaxDuration.
	Ladder []time.Duration `yaml:"ladder"`
	// Decay is the quiet time after which the level returns to 0; default
	// DefaultDecay (72h), at most MaxDuration. A config file's explicit
	// decay must be at least 1ms (min): only an absent one takes the
	// default.
	Decay time.Duration `yaml:"decay" min:"1ms"`
	// Ledger names the shared lockout state; default: the action's name.
	Ledger string `yaml:"ledger" min:"1"`
	// CountDenials records each rate-limit denial as a failure.
	CountDenials bool `yaml:"count_denials"`
}

// List is an allow or deny list. Users are normalised and countries
// upper-cased when the policy is validated.
type List struct {
	CIDRs   []netip.Prefix `yaml:"cidrs"`
	Users   []string       `yaml:"users"`
	Devices []string       `yaml:"devices"`
	// Countries are ISO 3166 regions (or NonGeoRegion), matched on a
	// request's phone_country.
	Countries []string `yaml:"countries"`
}
