// Package audit keeps Guard's audit trail: every decision, report and admin
// action, written asynchronously in batches (Postgres COPY, or a bounded
// in-memory store for development), spooled to disk while Postgres is down,
// and searchable by the audit API and the `guard audit` command.
package audit

import (
	"context"
	"net/netip"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Event kinds: the wire's (sdk).
const (
	KindCheck  = sdk.KindCheck
	KindReport = sdk.KindReport
	KindAdmin  = sdk.KindAdmin
)

// Event is one audit record. String fields that are "" and pointer fields
// that are nil do not apply to the event's kind and are written as SQL NULL
// and JSON null.
type Event struct {
	// ID is unique per event; a check's ID is its decision_id (a ULID).
	ID string
	// At is when Guard made the decision (UTC, millisecond precision).
	At time.Time
	// Kind is KindCheck, KindReport or KindAdmin.
	Kind string
	// Action is the attempt's action, or "unlock" for admin events.
	Action string
	// Decision is "allow", "deny" or "challenge" (check events).
	Decision string
	// Reason is the decision's reason (check events).
	Reason string
	// Outcome is "success" or "failure" (report events).
	Outcome string
	// User, IP and Device are the normalised identifiers (IP in canonical
	// text, IPv4-mapped shown as IPv4, not aggregated), or their keyed
	// hashes when audit.pseudonymize is on.
	User   string
	IP     string
	Device string
	// Phone is the phone number in E.164, or its keyed hash when
	// audit.pseudonymize is on.
	Phone string
	// Rule is the most restrictive rule of a check.
	Rule string
	// RetryAfterMs is the check's retry_after_ms.
	RetryAfterMs *int64
	// LockoutUntil is set when the event struck or met a lockout.
	LockoutUntil *time.Time
	// Degraded is set on checks and reports decided by the fallback.
	Degraded *bool
	// DryRun is set on checks.
	DryRun *bool
	// APIKey is the name (never the secret) of the key that made the call.
	APIKey string
	// DecisionID is the check's decision id; on a report only when the
	// caller gave it.
	DecisionID string
	// Instance names the Guard process that wrote the event.
	Instance string
	// Note is free text: an admin's reason.
	Note string
}

// Filter selects events; zero fields do not filter. All filters combine
// with AND. Identifiers must already be normalised the way events store them.
type Filter struct {
	// ID matches one event's id exactly. Give it a Since/Until window too:
	// events are stored by time, and Postgres finds an id fast only
	// within a time range.
	ID   string
	User string
	IP   netip.Prefix // a single address is a /32 or /128 prefix
	// IPText matches the stored IP text exactly: how pseudonymised events
	// (whose IP is a keyed hash, not an address) are found by address.
	IPText string
	Device string
	// Phone matches the stored phone exactly (E.164 or its hash).
	Phone    string
	Action   string
	Decision string
	Reason   string
	Kind     string
	// Since is inclusive, Until exclusive.
	Since time.Time
	Until time.Time
	// LockedAfter keeps events whose LockoutUntil is after it.
	LockedAfter time.Time
	// Limit is the page size (1..1000) for Query; ignored by Stream.
	Limit int
	// Cursor continues a Query from a previous page's NextCursor.
	Cursor *Cursor
}

// Cursor is the keyset position after the last event of a page: events
// come newest first, ties broken by ID descending.
type Cursor struct {
	At time.Time
	ID string
}

// Page is one page of Query results.
type Page struct {
	Events []Event
	// Next continues after the last event, or nil when there is no more.
	Next *Cursor
}

// Store is where events end up: Postgres (PGStore) or memory (MemoryStore).
type Store interface {
	// Insert writes events; an event whose ID is already stored is skipped,
	// so replays never duplicate.
	Insert(ctx context.Context, events []Event) error
	// Query returns one page, newest first.
	Query(ctx context.Context, f Filter) (Page, error)
	// Stream calls fn for every matching event, newest first, at constant
	// memory; it stops at fn's first error and returns it.
	Stream(ctx context.Context, f Filter, fn func(Event) error) error
	// Ping reports whether the store answers.
	Ping(ctx context.Context) error
}
