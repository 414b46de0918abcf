package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A spool record's payload is the spool's own versioned encoding of one
// Event, independent of the API's JSON: renaming an API field must never
// change what a spool written before it means.
//
//	version 2: the byte 0x02, then a spoolRecordV2 as JSON: version 1 and
//	           the phone ("ph"). A new version, not an optional field of
//	           version 1, so that a Guard that predates phones refuses
//	           these records (and keeps them spooled) instead of
//	           silently writing them without their phone numbers
//	version 1: the byte 0x01, then a spoolRecordV1 as JSON (times as Unix
//	           milliseconds)
//	version 0: (spools written before versioning) the event's API JSON of
//	           that time, a JSON object, so its first byte is '{'; read by
//	           spoolRecordV0, whose field names are frozen here
//
// New records are always written as the latest version; every version
// ever written stays readable.
const (
	spoolVersion1 byte = 0x01
	spoolVersion2 byte = 0x02
)

// spoolRecordV1 is version 1 of the spool record. Field names are short
// and fixed; empty values are left out.
type spoolRecordV1 struct {
	ID           string `json:"id"`
	AtMs         int64  `json:"at"`
	Kind         string `json:"k,omitempty"`
	Action       string `json:"a,omitempty"`
	Decision     string `json:"d,omitempty"`
	Reason       string `json:"r,omitempty"`
	Outcome      string `json:"o,omitempty"`
	User         string `json:"u,omitempty"`
	IP           string `json:"ip,omitempty"`
	Device       string `json:"dev,omitempty"`
	Rule         string `json:"rule,omitempty"`
	RetryAfterMs *int64 `json:"retry,omitempty"`
	LockoutUntil *int64 `json:"lock,omitempty"`
	Degraded     *bool  `json:"deg,omitempty"`
	DryRun       *bool  `json:"dry,omitempty"`
	APIKey       string `json:"key,omitempty"`
	DecisionID   string `json:"did,omitempty"`
	Instance     string `json:"inst,omitempty"`
	Note         string `json:"note,omitempty"`
}

// spoolRecordV2 is version 2 of the spool record: version 1 and the phone.
type spoolRecordV2 struct {
	spoolRecordV1
	Phone string `json:"ph,omitempty"`
}

// encodeSpoolRecord is the payload of e's spool record (latest version).
func encodeSpoolRecord(e Event) ([]byte, error) {
	r := spoolRecordV2{Phone: e.Phone}
	r.spoolRecordV1 = spoolRecordV1{
		ID: e.ID, AtMs: e.At.UnixMilli(), Kind: e.Kind, Action: e.Action, Decision: e.Decision,
		Reason: e.Reason, Outcome: e.Outcome, User: e.User, IP: e.IP, Device: e.Device, Rule: e.Rule,
		RetryAfterMs: e.RetryAfterMs, Degraded: e.Degraded, DryRun: e.DryRun, APIKey: e.APIKey,
		DecisionID: e.DecisionID, Instance: e.Instance, Note: e.Note,
	}
	if e.LockoutUntil != nil {
		ms := e.LockoutUntil.UnixMilli()
		r.LockoutUntil = &ms
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append([]byte{spoolVersion2}, b...), nil
}

// errSpoolVersion is a record of a version this Guard does not know (a
// spool written by a newer Guard).
var errSpoolVersion = errors.New("unknown spool record version")

// decodeSpoolRecord reads a payload of any version.
func decodeSpoolRecord(p []byte) (Event, error) {
	if len(p) == 0 {
		return Event{}, errors.New("empty spool record")
	}
	switch p[0] {
	case spoolVersion2:
		var r spoolRecordV2
		if err := json.Unmarshal(p[1:], &r); err != nil {
			return Event{}, fmt.Errorf("spool record v2: %w", err)
		}
		e := r.event()
		e.Phone = r.Phone
		return e, nil
	case spoolVersion1:
		var r spoolRecordV1
		if err := json.Unmarshal(p[1:], &r); err != nil {
			return Event{}, fmt.Errorf("spool record v1: %w", err)
		}
		return r.event(), nil
	case '{':
		return decodeSpoolRecordV0(p)
	}
	return Event{}, fmt.Errorf("%w 0x%02x", errSpoolVersion, p[0])
}

// event is the Event a version 1 record holds.
func (r *spoolRecordV1) event() Event {
	e := Event{
		ID: r.ID, At: time.UnixMilli(r.AtMs).UTC(), Kind: r.Kind, Action: r.Action, Decision: r.Decision,
		Reason: r.Reason, Outcome: r.Outcome, User: r.User, IP: r.IP, Device: r.Device, Rule: r.Rule,
		RetryAfterMs: r.RetryAfterMs, Degraded: r.Degraded, DryRun: r.DryRun, APIKey: r.APIKey,
		DecisionID: r.DecisionID, Instance: r.Instance, Note: r.Note,
	}
	if r.LockoutUntil != nil {
		lu := time.UnixMilli(*r.LockoutUntil).UTC()
		e.LockoutUntil = &lu
	}
	return e
}

// spoolRecordV0 is the API JSON of an event as spools held it before
// records were versioned. Frozen: it must not follow the API.
type spoolRecordV0 struct {
	ID           string  `json:"id"`
	At           string  `json:"at"`
	Kind         *string `json:"kind"`
	Action       *string `json:"action"`
	Decision     *string `json:"decision"`
	Reason       *string `json:"reason"`
	Outcome      *string `json:"outcome"`
	User         *string `json:"user"`
	IP           *string `json:"ip"`
	Device       *string `json:"device"`
	Rule         *string `json:"rule"`
	RetryAfterMs *int64  `json:"retry_after_ms"`
	LockoutUntil *string `json:"lockout_until"`
	Degraded     *bool   `json:"degraded"`
	DryRun       *bool   `json:"dry_run"`
	APIKey       *string `json:"api_key"`
	DecisionID   *string `json:"decision_id"`
	Instance     *string `json:"instance"`
	Note         *string `json:"note"`
}

func decodeSpoolRecordV0(p []byte) (Event, error) {
	var r spoolRecordV0
	if err := json.Unmarshal(p, &r); err != nil {
		return Event{}, fmt.Errorf("spool record v0: %w", err)
	}
	at, err := time.Parse(time.RFC3339Nano, r.At)
	if err != nil {
		return Event{}, fmt.Errorf("spool record v0 %q: at: %w", r.ID, err)
	}
	e := Event{
		ID: r.ID, At: at.UTC(), Kind: deref(r.Kind), Action: deref(r.Action), Decision: deref(r.Decision),
		Reason: deref(r.Reason), Outcome: deref(r.Outcome), User: deref(r.User), IP: deref(r.IP),
		Device: deref(r.Device), Rule: deref(r.Rule), RetryAfterMs: r.RetryAfterMs, Degraded: r.Degraded,
		DryRun: r.DryRun, APIKey: deref(r.APIKey), DecisionID: deref(r.DecisionID),
		Instance: deref(r.Instance), Note: deref(r.Note),
	}
	if r.LockoutUntil != nil {
		lu, err := time.Parse(time.RFC3339Nano, *r.LockoutUntil)
		if err != nil {
			return Event{}, fmt.Errorf("spool record v0 %q: lockout_until: %w", r.ID, err)
		}
		lu = lu.UTC()
		e.LockoutUntil = &lu
	}
	return e, nil
}
