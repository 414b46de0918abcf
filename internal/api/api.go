// Package api is Guard's HTTP surface (contract v1, docs: API.md): the gin
// router, API-key authentication, strict request decoding, the one
// error-to-status mapping, the RateLimit and Retry-After headers,
// forward-auth for reverse proxies, the audit API and its review pages.
// It holds no business logic: decisions come from internal/abuse, events
// from internal/audit.
package api

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
)

// Guard is what the API needs of *abuse.Guard.
type Guard interface {
	// Check decides one attempt; bad input is an *abuse.InputError.
	Check(ctx context.Context, in abuse.CheckInput) (abuse.Decision, error)
	// Report records how an attempt ended.
	Report(ctx context.Context, in abuse.ReportInput) (abuse.ReportOutcome, error)
	// Lockouts lists a page of active lockouts.
	Lockouts(ctx context.Context, f abuse.LockoutFilter) (abuse.LockoutPage, error)
	// Lock sets a manual lockout, one entry per ledger.
	Lock(ctx context.Context, in abuse.LockInput) ([]abuse.ActiveLockout, error)
	// Unlock lifts lockouts; abuse.ErrNotFound when nothing was locked.
	Unlock(ctx context.Context, in abuse.UnlockInput) error
	// Policy is the effective policy.
	Policy() abuse.Policy
}

// auditIdentifiers is implemented by *abuse.Guard: identifiers as audit
// events store them (hashed when pseudonymised).
type auditIdentifiers interface {
	AuditUser(raw string) (string, error)
	AuditDevice(raw string) (string, error)
}

// auditPhones is implemented by *abuse.Guard: phone numbers read with its
// phone settings, as audit events store them (hashed when pseudonymised).
type auditPhones interface {
	AuditPhone(raw string) (string, error)
}

// auditAddresses is implemented by *abuse.Guard: with pseudonymised audit
// events an IP filter must match the address's keyed hash.
type auditAddresses interface {
	AuditIP(raw string) (value string, hashed bool, err error)
}

// AuditReader is what the API needs of an audit.Store.
type AuditReader interface {
	// Query returns one page, newest first.
	Query(ctx context.Context, f audit.Filter) (audit.Page, error)
	// Stream calls fn for every matching event, newest first.
	Stream(ctx context.Context, f audit.Filter, fn func(audit.Event) error) error
}

// CursorCodec turns audit cursors into opaque, tamper-evident strings.
// *audit.CursorCodec implements it.
type CursorCodec interface {
	// Encode returns the opaque form of c ("" for nil).
	Encode(c *audit.Cursor) string
	// Decode fails for any string Encode did not produce.
	Decode(s string) (*audit.Cursor, error)
}

// Observer receives one observation per decision (internal/metrics).
type Observer interface {
	// ObserveDecision records a decision of action with its outcome and
	// how long Guard took (d).
	ObserveDecision(action, decision, reason string, degraded bool, d time.Duration)
}

// Readiness is what /readyz reports.
type Readiness struct {
	// CanDecide is false only when Guard cannot answer checks at all; the
	// answer is then 503. Degraded (fallback) mode still decides.
	CanDecide bool
	// Mode is "normal" or "degraded".
	Mode string
	// Redis and Postgres are "ok" or "down".
	Redis    string
	Postgres string
	// AuditBacklog counts events queued or spooled but not yet stored.
	AuditBacklog int64
}

// Config is the HTTP layer's configuration; zero fields get defaults in New.
type Config struct {
	// Keys are the accepted API keys; without any, every authenticated
	// endpoint answers 401.
	Keys []Key
	// ForwardAuth configures GET /v1/forward-auth.
	ForwardAuth ForwardAuthConfig
	// Exports bounds the NDJSON/CSV exports of GET /v1/audit and /ui/export.
	Exports ExportConfig
	// SessionSecret signs review page session cookies and CSRF tokens.
	// Every instance behind one load balancer needs the same one (derive
	// it from key_secret); empty means a random secret per process, so a
	// session is only valid on the instance that started it.
	SessionSecret []byte
}

// ExportConfig bounds audit exports, which stream for as long as the
// filtered trail lasts and the client reads.
type ExportConfig struct {
	// MaxConcurrent is how many exports may run at once; one more is
	// answered 503 with Retry-After. Default 4.
	MaxConcurrent int
	// WriteTimeout is how long an export waits for the client to take
	// more of it: the connection's write deadline, moved forward by every
	// write, so a client that stops reading is cut off after it while one
	// that keeps reading may take as long as it needs. Default 30s.
	WriteTimeout time.Duration
}

// ForwardAuthConfig says where forward-auth finds the subject and how it
// answers. The yaml tags are the config file's forward_auth keys.
type ForwardAuthConfig struct {
	// UserHeader carries the user; default "X-Guard-User".
	UserHeader string `yaml:"user_header"`
	// DeviceHeader carries the device; default "X-Guard-Device".
	DeviceHeader string `yaml:"device_header"`
	// PhoneHeader carries the phone number (E.164, or national in
	// phone.default_region); default "X-Guard-Phone".
	PhoneHeader string `yaml:"phone_header"`
	// TrustedProxies are the networks of the proxies whose X-Forwarded-For
	// and X-Real-IP are believed. None by default, loopback included.
	TrustedProxies []netip.Prefix `yaml:"trusted_proxies"`
	// AllowStatus is the status of an allowed attempt: 204 (default) or
	// 200 (for Envoy ext_authz, which takes every other status for a
	// denial).
	AllowStatus int `yaml:"allow_status"`
}

// Deps are the API's collaborators.
type Deps struct {
	// Guard decides; required.
	Guard Guard
	// Audit answers the audit API and pages; required.
	Audit AuditReader
	// AuditSync, when set, is called before every read of Audit
	// (audit.Writer.Sync): the read waits, at most auditSyncWait, until
	// the events recorded before it are stored, so an instance's answers
	// include its own latest decisions.
	AuditSync func(ctx context.Context) error
	// Cursors encodes audit page cursors (audit.NewCursorCodec); required.
	Cursors CursorCodec
	// NormalizeUser and NormalizeDevice turn audit and UI filter values into
	// what events store. Defaults: Guard's AuditUser and AuditDevice when it
	// has them (*abuse.Guard does; they hash when audit.pseudonymize is on),
	// else abuse.NormalizeUser and abuse.NormalizeDevice.
	NormalizeUser   func(string) (string, error)
	NormalizeDevice func(string) (string, error)
	// NormalizePhone is the same for phone numbers. Default: Guard's
	// AuditPhone when it has it, else abuse.ParsePhone's E.164 form of
	// numbers in international form.
	NormalizePhone func(string) (string, error)
	// Readiness reports /readyz; default: always ready, "normal", "ok",
	// "ok", 0.
	Readiness func(ctx context.Context) Readiness
	// Metrics serves GET /metrics; nil answers 404.
	Metrics http.Handler
	// Observer receives decisions; optional.
	Observer Observer
	// Now is the clock used to time decisions; default time.Now.
	Now func() time.Time
	// Stopping, when set, is closed when the server begins a graceful
	// stop (http.Server.RegisterOnShutdown): exports in flight are cut off
	// then, so a client downloading the trail cannot hold the stop beyond
	// its limit. Other requests finish as usual.
	Stopping <-chan struct{}
	// State, when set, is shared with the handlers of earlier and later
	// configs (NewState; a reload passes the same one); default: a State
	// of this handler's own.
	State *State
	// Revocations, when set, shares review page sign-outs with every
	// instance on the same store (audit.PGStore, migration 000005): a
	// sign-out is recorded there, and a session recorded there is refused.
	// Without it a sign-out holds on this instance only.
	Revocations SessionRevocations
}

// SessionRevocations records and reads review page sign-outs by the
// SHA-256 of the session's nonce (audit.PGStore).
type SessionRevocations interface {
	RevokeSession(ctx context.Context, digest []byte, until time.Time) error
	SessionRevoked(ctx context.Context, digest []byte) (bool, error)
}

// server holds what the handlers share.
type server struct {
	log     *slog.Logger
	keys    []apiKey
	fwd     forwardAuth
	deps    Deps
	now     func() time.Time
	observe func(action, decision, reason string, degraded bool, d time.Duration)
	ui      *uiTemplates
	exports exportLimits
	sess    *sessions
	signIns *signInLimiter
	// exact is set when audit events hold keyed hashes (pseudonymize):
	// review links then match identifiers as stored.
	exact bool
}

// New returns Guard's HTTP handler. It validates cfg (key names, key
// digests, scopes, trusted proxies) and deps (Guard, Audit and Cursors
// are required) and returns an error describing the first problem.
func New(logger *slog.Logger, cfg Config, deps Deps) (http.Handler, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if deps.Guard == nil || deps.Audit == nil || deps.Cursors == nil {
		return nil, errors.New("api: Guard, Audit and Cursors are required")
	}
	if deps.AuditSync != nil {
		deps.Audit = syncAudit(deps.Audit, deps.AuditSync)
	}
	keys, err := compileKeys(cfg.Keys)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	fwd, err := newForwardAuth(cfg.ForwardAuth)
	if err != nil {
		return nil, fmt.Errorf("api: forward_auth: %w", err)
	}
	if ag, ok := deps.Guard.(auditIdentifiers); ok {
		if deps.NormalizeUser == nil {
			deps.NormalizeUser = ag.AuditUser
		}
		if deps.NormalizeDevice == nil {
			deps.NormalizeDevice = ag.AuditDevice
		}
	}
	if ap, ok := deps.Guard.(auditPhones); ok && deps.NormalizePhone == nil {
		deps.NormalizePhone = ap.AuditPhone
	}
	if deps.NormalizePhone == nil {
		deps.NormalizePhone = func(raw string) (string, error) {
			e164, _, _, err := abuse.ParsePhone(raw, "", abuse.DefaultPrefixDigits)
			return e164, err
		}
	}
	if deps.NormalizeUser == nil {
		deps.NormalizeUser = abuse.NormalizeUser
	}
	if deps.NormalizeDevice == nil {
		deps.NormalizeDevice = abuse.NormalizeDevice
	}
	if deps.Readiness == nil {
		deps.Readiness = func(context.Context) Readiness {
			return Readiness{CanDecide: true, Mode: "normal", Redis: "ok", Postgres: "ok"}
		}
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	ps, _ := deps.Guard.(interface{ Pseudonymized() bool })
	exact := ps != nil && ps.Pseudonymized()
	ui, err := parseUITemplates(exact)
	if err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	st := deps.State
	if st == nil {
		st = NewState(cfg, deps.Now)
	}
	s := &server{log: logger, keys: keys, fwd: fwd, deps: deps, now: deps.Now, ui: ui, exact: exact,
		sess:    st.sess,
		signIns: st.signIns,
		observe: func(string, string, string, bool, time.Duration) {},
		exports: st.exports}
	if deps.Observer != nil {
		s.observe = deps.Observer.ObserveDecision
	}
	return s.routes(), nil
}

// newEngine returns a bare gin engine: release mode (gin's mode is
// process-wide; release only silences its debug printing), no default
// logger or recovery, no path "fixing" redirects (an unknown path is a
// 404, not a redirect), and 405 for known paths with another method.
func newEngine() *gin.Engine {
	gin.SetMode(gin.ReleaseMode)
	e := gin.New()
	e.RedirectTrailingSlash = false
	e.RedirectFixedPath = false
	e.HandleMethodNotAllowed = true
	e.ForwardedByClientIP = false
	e.ContextWithFallback = true
	return e
}

// prefixOf parses an address or CIDR; addresses become single-host
// prefixes and IPv4-mapped IPv6 becomes IPv4.
func prefixOf(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return unmapPrefix(p.Masked()), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	if a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q carries an IPv6 zone", s)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// unmapPrefix turns ::ffff:a.b.c.d/n (n >= 96) into the IPv4 prefix it
// covers.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p
}
