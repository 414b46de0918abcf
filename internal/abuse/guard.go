// Package abuse turns Guard's policy into decisions: it normalises and
// hashes identifiers, applies the allow and deny lists, picks an action's
// rules, lockouts and trusted-device record, asks the limits.Store in one
// call, maps the answer to a Decision and records the audit event.
package abuse

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// DefaultTrustTTL is how long a success trusts a device for a user.
const DefaultTrustTTL = 720 * time.Hour

// Config configures a Guard. Zero fields get the documented defaults.
type Config struct {
	// Policy is the policy to enforce; it is validated (and defaulted) by
	// New. Its zero value is replaced by DefaultPolicy().
	Policy Policy
	// KeySecret keys the HMAC-SHA256 hashes that stand for identifiers in
	// Redis. Required (non-empty; 32 random bytes recommended); changing it
	// orphans every key.
	KeySecret []byte
	// KeyPrefix starts every Redis key; default DefaultKeyPrefix
	// ("guard:v2:").
	KeyPrefix string
	// IPv6Prefix is the prefix length (1..128) IPv6 addresses are
	// aggregated to for limiting; default 64.
	IPv6Prefix int
	// Phone is how phone numbers are read (default region, prefix
	// digits); zero fields get PhoneConfig's defaults.
	Phone PhoneConfig
	// TrustTTL is how long a success trusts the device for the user;
	// default DefaultTrustTTL (720h), at most MaxDuration; negative
	// disables trust.
	TrustTTL time.Duration
	// Pseudonymize puts keyed hashes instead of identifiers into audit
	// events (the IP's hash is of the full address, not its network).
	// Lockout listings then name identifiers only from this process's
	// in-memory record of recent strikes or from the filter.
	Pseudonymize bool
	// Instance names this process in audit events.
	Instance string
	// Now is the clock for decision ids and audit times when the store
	// gives none; default time.Now.
	Now func() time.Time
	// Notifier, if set, receives a lockout notification for each strike,
	// manual lockout and unlock (notifications.*); nil sends none.
	Notifier Notifier
}

// Guard decides attempts. It is safe for concurrent use.
type Guard struct {
	log     *slog.Logger
	cfg     Config
	store   limits.Store
	rec     Recorder
	lookup  EventLookup
	keys    *keyer
	policy  Policy // validated; never handed out without copying
	actions map[string]*compiledAction
	ledgers map[string]*compiledLedger
	names   []string // ledger names, sorted
	allow   compiledList
	deny    compiledList
	strikes *strikeCache
}

// New builds a Guard over store. rec receives every audit event and must
// not block; lookup (may be nil) lets lockout listings name identifiers of
// strikes this process did not see. It returns an error for an invalid
// policy (a *PolicyError), a missing KeySecret (a short one is accepted:
// `guard serve` warns about it), or an IPv6Prefix outside 1..128.
func New(logger *slog.Logger, cfg Config, store limits.Store, rec Recorder, lookup EventLookup) (*Guard, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if store == nil {
		return nil, errors.New("abuse: a limits store is required")
	}
	if rec == nil {
		return nil, errors.New("abuse: an audit recorder is required")
	}
	if len(cfg.KeySecret) == 0 {
		return nil, errors.New("abuse: a key secret is required")
	}
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = DefaultKeyPrefix
	}
	if strings.ContainsAny(cfg.KeyPrefix, "{}") {
		// Keys carry their Redis Cluster hash tag right after the prefix;
		// a brace in the prefix would become the tag of every key.
		return nil, fmt.Errorf("abuse: key prefix %q: must not contain { or }", cfg.KeyPrefix)
	}
	if cfg.IPv6Prefix == 0 {
		cfg.IPv6Prefix = DefaultIPv6Prefix
	}
	if cfg.IPv6Prefix < 1 || cfg.IPv6Prefix > 128 {
		return nil, fmt.Errorf("abuse: ipv6 prefix %d outside 1..128", cfg.IPv6Prefix)
	}
	if err := cfg.Phone.validate(); err != nil {
		return nil, fmt.Errorf("abuse: %w", err)
	}
	if cfg.TrustTTL == 0 {
		cfg.TrustTTL = DefaultTrustTTL
	}
	if cfg.TrustTTL < 0 {
		cfg.TrustTTL = 0
	}
	if cfg.TrustTTL > MaxDuration {
		return nil, fmt.Errorf("abuse: trust ttl %v above %s", cfg.TrustTTL, MaxDurationText)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	pol := copyPolicy(cfg.Policy)
	if len(pol.Actions) == 0 && len(pol.Allow.CIDRs)+len(pol.Allow.Users)+len(pol.Allow.Devices)+len(pol.Allow.Countries)+
		len(pol.Deny.CIDRs)+len(pol.Deny.Users)+len(pol.Deny.Devices)+len(pol.Deny.Countries) == 0 {
		pol = DefaultPolicy()
	}
	if err := pol.Validate(); err != nil {
		return nil, fmt.Errorf("abuse: invalid policy: %w", err)
	}
	keys := newKeyer(cfg.KeySecret, cfg.KeyPrefix)
	cfg.Policy = Policy{}
	cfg.KeySecret = nil // the keyer holds its own copy
	g := &Guard{
		keys:    keys,
		log:     logger,
		cfg:     cfg,
		store:   store,
		rec:     rec,
		lookup:  lookup,
		policy:  pol,
		strikes: newStrikeCache(strikeCacheSize),
	}
	g.compile()
	return g, nil
}

// Policy returns the effective policy (validated, defaults filled) as a
// copy the caller may keep or modify.
func (g *Guard) Policy() Policy { return copyPolicy(g.policy) }

// Ledgers returns the names of the lockout ledgers, sorted.
func (g *Guard) Ledgers() []string { return append([]string(nil), g.names...) }

func copyPolicy(p Policy) Policy {
	out := Policy{Actions: make(map[string]Action, len(p.Actions)), Allow: copyList(p.Allow), Deny: copyList(p.Deny)}
	for name, a := range p.Actions {
		a.Limits = slices.Clone(a.Limits)
		a.Failures = slices.Clone(a.Failures)
		a.Lockout.Ladder = slices.Clone(a.Lockout.Ladder)
		out.Actions[name] = a
	}
	return out
}

func copyList(l List) List {
	return List{
		CIDRs:     slices.Clone(l.CIDRs),
		Users:     slices.Clone(l.Users),
		Devices:   slices.Clone(l.Devices),
		Countries: slices.Clone(l.Countries),
	}
}

// action resolves an action name or answers unknown_action.
func (g *Guard) action(name string) (*compiledAction, error) {
	a, ok := g.actions[name]
	if !ok {
		return nil, &InputError{Code: CodeUnknownAction, Field: "action", Message: fmt.Sprintf("unknown action %q", name)}
	}
	return a, nil
}

// subject normalises a request's identifiers and requires at least one.
func (g *Guard) subject(s Subject) (identity, error) {
	id, err := g.identify(s)
	if err != nil {
		return id, err
	}
	if id.empty() {
		return id, &InputError{Code: CodeInvalidRequest, Message: "at least one of user, ip, device and phone is required"}
	}
	return id, nil
}

// nowMs is the injected clock at millisecond precision in UTC, the
// precision of every time Guard reports.
func (g *Guard) nowMs() time.Time { return g.cfg.Now().UTC().Truncate(time.Millisecond) }

func ptr[T any](v T) *T { return &v }
