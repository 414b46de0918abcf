// Package limits keeps Guard's sliding-window logs and lockout state.
//
// A Store answers one decision in one atomic step: for Redis that is one
// FCALL of an embedded Lua function library, for the in-memory store one critical
// section. Keys are opaque to the store: the caller (internal/abuse) builds
// them, already prefixed and hashed, and the store never sees a raw
// identifier.
//
// # Semantics every implementation follows
//
// Time is an integer count of milliseconds. The Redis store takes "now" from
// Redis TIME (one clock for every Guard instance); the memory store takes it
// from its injected clock. A log entry stamped ts counts at time now iff
// now-W < ts <= now, so it stops counting at exactly ts+W.
//
// Check, in order, all as one atomic step:
//
//  1. Lockouts: every LockRef in Locks whose record has until > now is
//     active. A LockRef with SpareIfTrusted is ignored when TrustKey is set
//     and that trust record exists (a device the user succeeded from). If any
//     lockout is active the attempt is denied with Locked set to the active
//     lockout that ends last; the rules are still trimmed and counted (read
//     only) so the caller can show what remains, and nothing is logged.
//  2. Rules: each rule's log is trimmed to (now-W, now] and counted. A rule
//     allows iff count+Cost <= Limit (counters, buckets and distinct sets
//     decide as kinds.go says). The attempt is allowed iff every rule that
//     is not Shadow allows it.
//  3. If allowed and not DryRun: Cost entries are added to the log of every
//     rule that allows it (enforced rules all do; a shadow rule that would
//     deny logs nothing); a log that several rules name receives them once,
//     and every rule is answered from the log as it was before this
//     attempt. Denied attempts are never logged.
//  4. If denied by a rule (not by a lockout), not DryRun, and DenialFailures
//     is set (lockout.count_denials), one failure is recorded exactly as
//     Report does for a failure, which may strike; strikes are returned in
//     Struck, but the answer stays a rate-limit denial. A denial that is a
//     challenge (see Rule.Challenge) records no failure.
//  5. If allowed, not DryRun, and Reserve is set (reserve_failures), one
//     provisional failure is recorded in every failure log of
//     Reserve.Escalation (a distinct rule's in its Pending set, see
//     FailureRule) exactly as Report does (which may strike: the
//     strike is returned in Struck and the answer stays allowed), and a
//     reservation record remembers what was added (see Reservation).
//
// Challenge rules: a rule with Challenge set counts like any enforced rule,
// but when every enforced rule that denies is a Challenge rule and no
// lockout is active, CheckResult.Challenge is set: nothing is logged and no
// denial failure is recorded. A rule with Passed set (a challenge the
// person passed) admits the attempt whatever its count and logs Cost
// entries like an admitting rule; its log then keeps its newest
// max(Limit+Cost, PassedKeep) entries: exact (count and reset) up to that
// many in the window, and bounded beyond, where later attempts are
// decided exactly as the full log would decide them.
//
// Report records a failure or a success:
//
//   - Failure: each FailureRule's log is trimmed and gets one entry; a log
//     that then holds Limit entries is a strike on the rule's LockKey: the
//     log is emptied, the lock's level is raised by one (first reset to 0 if
//     the last strike is at least Decay old; capped at len(Ladder)), and the
//     lock is set to [now, now+Ladder[level-1]) — also while already locked.
//   - Success: the logs in Clear are deleted and TrustKey is set to expire
//     after TrustTTL.
//   - In both cases Locked is the active lockout among Locks (after the
//     report, SpareIfTrusted honoured) that ends last, or nil.
//   - Settlement: with Records (the reservation records of the check the
//     report closes), each record that exists settles its share exactly
//     once: a pending record's failure logs get no second entry for a
//     failure, and lose the provisional entry for a success (before Clear
//     as usual); the record then becomes a settled tombstone until its
//     TTL, and a report meeting a tombstone changes nothing in that
//     record's slot (no failure, no clearing, no trust). Failure logs
//     without a record behave as without Records.
//
// A lock record lives until max(until, lastStrike+Decay) and then vanishes,
// which is how the level decays to 0.
//
// Strictness: no interleaving of concurrent calls, from any number of Store
// values sharing one backend, may let Limit+1 entries into a window or
// produce two strikes for one threshold crossing.
package limits

import (
	"context"
	"errors"
	"time"
)

// ErrUnavailable is returned (wrapped) when the backend cannot answer: it
// cannot be reached within the call's budget, the connection is refused or
// reset, or the server says it cannot answer now (LOADING, a failover under
// way, CLUSTERDOWN, ...). Only such errors open the failover store's
// breaker; any other error (a script or type error) is a bug.
var ErrUnavailable = errors.New("limit store unavailable")

// Store is the contract of a limit backend. Implementations: RedisStore,
// MemoryStore, and FailoverStore (Redis with a memory fallback). All of them
// pass the shared conformance suite in conformance_test.go.
type Store interface {
	// Check decides one attempt; see the package documentation.
	Check(ctx context.Context, req *CheckRequest) (CheckResult, error)
	// Report records a failure or success; see the package documentation.
	Report(ctx context.Context, req *ReportRequest) (ReportResult, error)
	// Unlock deletes the given lock records (level included) and failure
	// logs. It reports whether any of the locks was active.
	Unlock(ctx context.Context, req *UnlockRequest) (bool, error)
	// Lockouts lists one page of the active lockouts (until > now) that q
	// selects; see LockQuery. It is an admin read: the failover store gives
	// it its own timeout, never answers it from the fallback while the
	// primary is up, and never counts it towards the breaker.
	Lockouts(ctx context.Context, q *LockQuery) (LockPage, error)
	// Lock sets manual lockouts (see LockRequest) and returns, per lock,
	// its state with the level of its strike record and the later of the
	// two ends. Manual lock records are listed by Lockouts like struck ones.
	Lock(ctx context.Context, req *LockRequest) ([]LockState, error)
	// Ping reports whether the backend answers.
	Ping(ctx context.Context) error
	// Close releases the backend's resources.
	Close() error
}

// Rule is one sliding-window-log limit applied to one key.
type Rule struct {
	// Key is the log's full key, e.g. "guard:v2:{<hash>}l:login/ip".
	Key string
	// Limit is the number of entries the window holds; at least 1.
	Limit int
	// Window is W; whole milliseconds, at least 1ms.
	Window time.Duration
	// Keep is how long the log lives after its newest entry: the longest
	// window any rule uses Key with (a log two actions share), fixed at
	// start-up. Entries older than Keep are trimmed. Below Window (or 0) it
	// counts as Window.
	Keep time.Duration
	// Shadow rules are evaluated and logged but never deny.
	Shadow bool
	// Algorithm is how the rule counts (see Algorithm); AlgLog, the zero
	// value, is the sliding-window log above.
	Algorithm Algorithm
	// Distinct, when set, makes this a distinct-count rule (see kinds.go):
	// the attempt's distinct value (a user's or device's keyed hash, built
	// by the caller; 1 to MaxDistinctBytes bytes). Key is then a set of
	// the distinct values seen in the window, Limit how many it may hold,
	// and Cost does not apply. Only with AlgLog.
	Distinct string
	// Challenge rules challenge instead of denying (on_limit: challenge);
	// see the package documentation.
	Challenge bool
	// Passed admits the attempt whatever the count and caps the log at
	// its newest max(Limit+Cost, PassedKeep) entries (a challenge rule
	// whose challenge the person passed); see the package documentation.
	Passed bool
}

// LockRef names a lockout record to consult.
type LockRef struct {
	// Key is the lock record's full key,
	// e.g. "guard:v2:{<hash>}k:auth:user".
	Key string
	// SpareIfTrusted makes the lock not apply when the request's TrustKey
	// exists (user-level lockouts spare trusted devices).
	SpareIfTrusted bool
	// SharesLevel says this record's key has the level of the record
	// before it in the list (a manual lockout right after its key's struck
	// record, on the same slot): when this lock decides, its level is the
	// higher of the two records', since a strike during a manual lockout
	// raises the key's level as usual.
	SharesLevel bool
}

// FailureRule is a failure log whose filling strikes LockKey.
type FailureRule struct {
	// Key is the failure log's full key.
	Key string
	// Limit is the number of failures in Window that make a strike.
	Limit int
	// Window is the failure log's window.
	Window time.Duration
	// Keep is as in Rule.
	Keep time.Duration
	// LockKey is the lock record struck when the log fills.
	LockKey string
	// Indexes are the lockout index keys a strike adds LockKey to (one per
	// identity the lock involves), so that listings by identity need no
	// index that every decision shares. LockQuery.Index names one of them.
	Indexes []string
	// Name is the rule's name, opaque to the store: a strike of this rule
	// answers it in LockState.Rule (never stored).
	Name string
	// Info is stored with the lock record when it strikes and returned by
	// Lockouts (the caller keeps ledger, dimension and identifier hashes in
	// it; never raw identifiers). At most 512 bytes.
	Info string
	// Distinct, when set, makes Key a set of distinct values (as in
	// Rule.Distinct): a failure adds or refreshes this value, and the set
	// reaching Limit values in Window is the strike.
	Distinct string
	// Pending, with Distinct, is the key of the rule's provisional values
	// (reserve_failures; same hash tag as Key): a reservation adds its
	// value there, one holder per check, instead of to Key, and a success
	// that settles the check takes its holder back, so a value another
	// check or a reported failure holds stays counted. The rule then
	// counts the distinct values of Key and Pending together; a strike
	// empties both. "" for a rule no reservation reaches.
	Pending string
}

// Escalation is the lockout policy applied when failures strike.
type Escalation struct {
	// Failures are the logs that receive one entry per failure, each
	// rule a log (Key) of its own.
	Failures []FailureRule
	// Ladder holds the lockout duration of each level; at least one step.
	Ladder []time.Duration
	// Decay is the quiet time after which the level returns to 0.
	Decay time.Duration
}

// OnFailure says what the failover store does for a request while the
// backend is unavailable.
type OnFailure int

const (
	// FailLocal answers from the in-memory fallback store (the default).
	FailLocal OnFailure = iota
	// FailAllow answers allowed, with Unavailable set.
	FailAllow
	// FailDeny answers denied, with Unavailable set.
	FailDeny
)

// CheckRequest is one attempt to decide.
type CheckRequest struct {
	// Rules are the attempt rules that apply (dimension present).
	Rules []Rule
	// Cost is how many entries the attempt counts for; at least 1.
	Cost int
	// DryRun evaluates without writing anything.
	DryRun bool
	// Locks are consulted before the rules.
	Locks []LockRef
	// TrustKey is the trusted-device record of the request's user and
	// device, or "" when either is absent.
	TrustKey string
	// DenialFailures, when set, records one failure on a rule denial.
	DenialFailures *Escalation
	// Reserve, when set, records one provisional failure per allowed
	// check (reserve_failures); see Reservation.
	Reserve *Reservation
	// Nonce makes this call's log members unique; [A-Za-z0-9_-], at most
	// 32 bytes. Callers pass a fresh random value per call.
	Nonce string
	// OnFailure is honoured by the failover store only.
	OnFailure OnFailure
}

// RuleResult is one rule's state after a decision.
type RuleResult struct {
	// Allowed reports whether this rule alone admits the attempt.
	Allowed bool
	// Count is the number of entries in the window after the decision (as
	// if recorded, for a dry run); for a counter its estimate rounded up,
	// for a bucket Limit-Remaining, for a distinct rule the values in the
	// window.
	Count int
	// Remaining is Limit-Count, never below 0.
	Remaining int
	// Reset is the time until the oldest entry in the window leaves it; 0
	// when the window is empty. For a counter: until its counts weigh
	// nothing; for a bucket: until it is full.
	Reset time.Duration
	// RetryAfter is, for a rule that does not allow, the time until enough
	// entries have left for Cost to fit; 0 otherwise.
	RetryAfter time.Duration
	// Limit, when not 0, is the limit this answer enforced instead of the
	// request's: the fallback's share of it (FailoverStore, FleetSize).
	Limit int
}

// LockState is a lock record as seen at one moment.
type LockState struct {
	// Key is the lock record's key.
	Key string
	// Level is the ladder step, from 1.
	Level int
	// Since is when the current lockout started (the last strike).
	Since time.Time
	// Until is when the current lockout ends.
	Until time.Time
	// Info is what the striking FailureRule carried.
	Info string
	// Rule is the striking FailureRule's Name in a CheckResult's or
	// ReportResult's Struck; "" elsewhere (listings, active locks).
	Rule string
}

// CheckResult is the outcome of Check.
type CheckResult struct {
	// Now is the store's clock at the decision.
	Now time.Time
	// Allowed is the decision (shadow rules cannot make it false).
	Allowed bool
	// Rules holds one result per request rule, in request order.
	Rules []RuleResult
	// Locked is the active lockout that denied the attempt, or nil.
	Locked *LockState
	// Trusted reports, for a denial that struck (DenialFailures), that
	// TrustKey named a trusted device: the struck locks with
	// SpareIfTrusted do not apply to this device's next attempt. False
	// otherwise (an allowed check's reservation strikes do not read it).
	Trusted bool
	// Struck lists lockouts set by DenialFailures or Reserve during this
	// call.
	Struck []LockState
	// Challenge is set when the attempt is denied only by Challenge rules
	// (no lockout, no other enforced rule denies): nothing was recorded.
	Challenge bool
	// Degraded is set by the failover store when the answer did not come
	// from the primary backend.
	Degraded bool
	// Unavailable is set by the failover store when OnFailure was FailAllow
	// or FailDeny and the backend was down (Rules is then empty).
	Unavailable bool
}

// ReportRequest is one reported outcome.
type ReportRequest struct {
	// Failure selects a failure (true) or a success (false).
	Failure bool
	// Escalation is the failure policy; used for failures.
	Escalation Escalation
	// Locks are the lock records to answer with (see package doc).
	Locks []LockRef
	// TrustKey is the trusted-device record of the user and device, or "".
	TrustKey string
	// Clear lists the failure logs a success deletes.
	Clear []string
	// TrustTTL is how long a success trusts the device; 0 disables it.
	TrustTTL time.Duration
	// Records are the reservation records of the check this report
	// closes (Reservation.Records of that check), or nil. With Records a
	// success needs Escalation too: the failure logs whose provisional
	// entries it removes.
	Records []string
	// Nonce as in CheckRequest.
	Nonce string
	// OnFailure is honoured by the failover store only.
	OnFailure OnFailure
}

// ReportResult is the outcome of Report.
type ReportResult struct {
	// Now is the store's clock at the report.
	Now time.Time
	// Struck lists the lockouts this failure set. A lock struck during a
	// manual lockout of its key (the manual record right after the key's
	// struck record in Locks, SharesLevel) ends at the later of the two
	// ends, which its Until says.
	Struck []LockState
	// Locked is the active lockout among the request's Locks that ends
	// last, after the report; nil when none.
	Locked *LockState
	// Degraded as in CheckResult.
	Degraded bool
	// Unavailable as in CheckResult.
	Unavailable bool
}

// UnlockRequest names what an administrator lifts.
type UnlockRequest struct {
	// Locks are lock record keys to delete.
	Locks []string
	// Failures are failure log keys to delete.
	Failures []string
}

// LockQuery selects a page of active lockouts for Store.Lockouts.
type LockQuery struct {
	// Index, when set, is a lockout index key (FailureRule.Indexes): the
	// candidates are the locks struck with it. Else every lock record
	// whose key matches Pattern is a candidate.
	Index string
	// Pattern is a key pattern in which '*' matches any run of bytes and
	// every other byte itself, e.g. "guard:v2:{*}k:*". Required without
	// Index.
	Pattern string
	// Keep, when set, drops candidates before paging.
	Keep func(LockState) bool
	// Partner, when set, names the strike record of a manual lock record
	// ("" for any other key): a manual record's entry then carries the
	// level of its strike record when that exists, the key's level, as
	// Lock answers it and checks see it.
	Partner func(key string) string
	// Limit is the most lockouts a page holds; 1 to 1000.
	Limit int
	// Cursor is a page's Next, or "" for the first page.
	Cursor string
}

// LockPage is one page of a listing.
type LockPage struct {
	// Locks holds the page's lockouts, ending last first.
	Locks []LockState
	// Next continues the listing; "" when it is complete. A store's cursor
	// is opaque and only meaningful to the same store.
	Next string
}
