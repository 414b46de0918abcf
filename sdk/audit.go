package sdk

import (
	"encoding/json"
	"net/url"
	"strconv"
	"time"
)

// Audit event kinds.
const (
	KindCheck  = "check"
	KindReport = "report"
	KindAdmin  = "admin"
)

// Export formats of ExportAudit.
const (
	FormatNDJSON = "ndjson"
	FormatCSV    = "csv"
)

// AuditEvent is one audit record as GET /v1/audit returns it. Fields that
// do not apply to the event's kind are null on the wire and nil here.
type AuditEvent struct {
	ID           string     `json:"id"`
	At           time.Time  `json:"at"`
	Kind         string     `json:"kind"`
	Action       *string    `json:"action"`
	Decision     *string    `json:"decision"`
	Reason       *string    `json:"reason"`
	Outcome      *string    `json:"outcome"`
	User         *string    `json:"user"`
	IP           *string    `json:"ip"`
	Device       *string    `json:"device"`
	Phone        *string    `json:"phone"`
	Rule         *string    `json:"rule"`
	RetryAfterMs *int64     `json:"retry_after_ms"`
	LockoutUntil *time.Time `json:"lockout_until"`
	Degraded     *bool      `json:"degraded"`
	DryRun       *bool      `json:"dry_run"`
	// APIKey is the name of the key that made the call, never the key.
	APIKey     *string `json:"api_key"`
	DecisionID *string `json:"decision_id"`
	Instance   *string `json:"instance"`
	Note       *string `json:"note"`
}

// MarshalJSON writes e with its times as the wire has them (TimeFormat:
// always three fractional digits, UTC), where time.Time's own encoding
// would drop trailing zeros ("…07.63Z", "…00Z") and keep a zone.
func (e AuditEvent) MarshalJSON() ([]byte, error) {
	type plain AuditEvent
	var until *string
	if e.LockoutUntil != nil {
		u := FormatTime(*e.LockoutUntil)
		until = &u
	}
	return json.Marshal(struct {
		ID string `json:"id"`
		At string `json:"at"`
		plain
		LockoutUntil *string `json:"lockout_until"`
	}{e.ID, FormatTime(e.At), plain(e), until})
}

// AuditPage is one page of GET /v1/audit.
type AuditPage struct {
	// Events come newest first.
	Events []AuditEvent `json:"events"`
	// NextCursor continues after the last event; nil when there is no more.
	NextCursor *string `json:"next_cursor"`
}

// AuditFilter selects audit events; zero fields do not filter and all
// filters combine with AND.
type AuditFilter struct {
	User string
	// IP is an address or a CIDR.
	IP     string
	Device string
	// Phone is normalised by Guard like a request's.
	Phone    string
	Action   string
	Decision string
	Reason   string
	Kind     string
	// Since is inclusive, Until exclusive.
	Since time.Time
	Until time.Time
	// Limit is the page size, 1..1000; 0 means the server default (100).
	// ExportAudit ignores it.
	Limit int
	// Cursor is a previous page's NextCursor.
	Cursor string
}

// Values encodes the filter as GET /v1/audit query parameters.
func (f AuditFilter) Values() url.Values {
	v := url.Values{}
	set := func(k, s string) {
		if s != "" {
			v.Set(k, s)
		}
	}
	set("user", f.User)
	set("ip", f.IP)
	set("device", f.Device)
	set("phone", f.Phone)
	set("action", f.Action)
	set("decision", f.Decision)
	set("reason", f.Reason)
	set("kind", f.Kind)
	if !f.Since.IsZero() {
		v.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		v.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	if f.Limit != 0 {
		v.Set("limit", strconv.Itoa(f.Limit))
	}
	set("cursor", f.Cursor)
	return v
}

// MarshalJSON writes l with its end as the wire has it (TimeFormat), as
// AuditEvent does.
func (l Lockout) MarshalJSON() ([]byte, error) {
	type plain Lockout
	return json.Marshal(struct {
		plain
		Until string `json:"until"`
	}{plain(l), FormatTime(l.Until)})
}

// MarshalJSON writes e with its times as the wire has them (TimeFormat),
// as AuditEvent does.
func (e LockoutEntry) MarshalJSON() ([]byte, error) {
	type plain LockoutEntry
	return json.Marshal(struct {
		plain
		Since string `json:"since"`
		Until string `json:"until"`
	}{plain(e), FormatTime(e.Since), FormatTime(e.Until)})
}
