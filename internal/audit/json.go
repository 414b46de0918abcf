package audit

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/guardhq/guard/sdk"
)

// TimeFormat is how event times appear in JSON, NDJSON and CSV: RFC 3339 in
// UTC with exactly three fractional digits (2026-11-30T05:30:43.123Z), the
// wire's sdk.TimeFormat.
const TimeFormat = sdk.TimeFormat

// wireEvent is the API's JSON shape of an Event; pointers make empty
// fields null rather than "".
type wireEvent struct {
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
	Phone        *string `json:"phone"`
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

// MarshalJSON writes the event with the API's field names (see CSVHeader
// for the order); empty strings and nil pointers become null, times are
// formatted with TimeFormat.
func (e Event) MarshalJSON() ([]byte, error) {
	w := wireEvent{
		ID:           e.ID,
		At:           formatTime(e.At),
		Kind:         nullString(e.Kind),
		Action:       nullString(e.Action),
		Decision:     nullString(e.Decision),
		Reason:       nullString(e.Reason),
		Outcome:      nullString(e.Outcome),
		User:         nullString(e.User),
		IP:           nullString(e.IP),
		Device:       nullString(e.Device),
		Phone:        nullString(e.Phone),
		Rule:         nullString(e.Rule),
		RetryAfterMs: e.RetryAfterMs,
		Degraded:     e.Degraded,
		DryRun:       e.DryRun,
		APIKey:       nullString(e.APIKey),
		DecisionID:   nullString(e.DecisionID),
		Instance:     nullString(e.Instance),
		Note:         nullString(e.Note),
	}
	if e.LockoutUntil != nil {
		s := formatTime(*e.LockoutUntil)
		w.LockoutUntil = &s
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON writes (the CLI, tests and the
// spool use it); a bad time is an error.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w wireEvent
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, w.At)
	if err != nil {
		return fmt.Errorf("event %q: at: %w", w.ID, err)
	}
	out := Event{
		ID:           w.ID,
		At:           at.UTC(),
		Kind:         deref(w.Kind),
		Action:       deref(w.Action),
		Decision:     deref(w.Decision),
		Reason:       deref(w.Reason),
		Outcome:      deref(w.Outcome),
		User:         deref(w.User),
		IP:           deref(w.IP),
		Device:       deref(w.Device),
		Phone:        deref(w.Phone),
		Rule:         deref(w.Rule),
		RetryAfterMs: w.RetryAfterMs,
		Degraded:     w.Degraded,
		DryRun:       w.DryRun,
		APIKey:       deref(w.APIKey),
		DecisionID:   deref(w.DecisionID),
		Instance:     deref(w.Instance),
		Note:         deref(w.Note),
	}
	if w.LockoutUntil != nil {
		lu, err := time.Parse(time.RFC3339Nano, *w.LockoutUntil)
		if err != nil {
			return fmt.Errorf("event %q: lockout_until: %w", w.ID, err)
		}
		lu = lu.UTC()
		out.LockoutUntil = &lu
	}
	*e = out
	return nil
}

func formatTime(t time.Time) string { return t.UTC().Format(TimeFormat) }

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// normalize puts times in UTC at millisecond precision, the precision the
// API shows; every store and the spool keep exactly this, so an event read
// back, replayed or paged through a cursor compares equal to what was
// recorded.
func normalize(e Event) Event {
	e.At = e.At.UTC().Truncate(time.Millisecond)
	if e.LockoutUntil != nil {
		lu := e.LockoutUntil.UTC().Truncate(time.Millisecond)
		e.LockoutUntil = &lu
	}
	return e
}
