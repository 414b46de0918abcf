package notify

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// A spool file holds one pending notification in the spool's own
// versioned encoding, independent of the webhook's JSON: renaming a
// payload field must never change what a file written before it means.
//
//	version 1: the byte 0x01, then a recordV1 as JSON (times as Unix
//	           milliseconds)
//
// New files are always written as the latest version; every version ever
// written stays readable.
const recordVersion1 byte = 0x01

// recordV1 is version 1 of a spool file. Field names are short and fixed.
type recordV1 struct {
	ID        string  `json:"id"`
	Event     string  `json:"ev"`
	AtMs      int64   `json:"at"`
	Instance  string  `json:"inst,omitempty"`
	Ledger    string  `json:"led,omitempty"`
	Dimension string  `json:"dim"`
	User      *string `json:"u,omitempty"`
	IP        *string `json:"ip,omitempty"`
	Device    *string `json:"dev,omitempty"`
	// Phone came after the first files were written: absent in those,
	// which read as before (no phone).
	Phone   *string `json:"ph,omitempty"`
	Level   int     `json:"lvl"`
	UntilMs int64   `json:"until,omitempty"`
	Reason  string  `json:"why,omitempty"`
	// EnqueuedMs is when Guard took the notification; MaxAge counts
	// from it across restarts.
	EnqueuedMs int64 `json:"enq"`
}

// pending is a notification waiting for delivery.
type pending struct {
	ev       Event
	enqueued time.Time
	attempts int
	due      time.Time
	// final marks the attempt due at the end of MaxAge: the last one,
	// made even though the timer fires a moment after that end.
	final bool
}

// encodeRecord is the content of p's spool file (latest version).
func encodeRecord(p *pending) ([]byte, error) {
	e := &p.ev
	r := recordV1{
		ID: e.ID, Event: e.Event, AtMs: e.At.UnixMilli(), Instance: e.Instance, Ledger: e.Ledger,
		Dimension: e.Dimension, User: e.User, IP: e.IP, Device: e.Device, Phone: e.Phone, Level: e.Level,
		Reason: e.Reason, EnqueuedMs: p.enqueued.UnixMilli(),
	}
	if !e.Until.IsZero() {
		r.UntilMs = e.Until.UnixMilli()
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, err
	}
	return append([]byte{recordVersion1}, b...), nil
}

// errRecordVersion is a file of a version this Guard does not know (a
// spool written by a newer Guard).
var errRecordVersion = errors.New("unknown notification record version")

// decodeRecord reads a spool file of any version.
func decodeRecord(b []byte) (*pending, error) {
	if len(b) == 0 {
		return nil, errors.New("empty notification record")
	}
	if b[0] != recordVersion1 {
		return nil, fmt.Errorf("%w %d", errRecordVersion, b[0])
	}
	var r recordV1
	if err := json.Unmarshal(b[1:], &r); err != nil {
		return nil, fmt.Errorf("notification record v1: %w", err)
	}
	if r.ID == "" || r.Event == "" {
		return nil, errors.New("notification record v1: id and event are required")
	}
	p := &pending{
		ev: Event{
			ID: r.ID, Event: r.Event, At: time.UnixMilli(r.AtMs).UTC(), Instance: r.Instance, Ledger: r.Ledger,
			Dimension: r.Dimension, User: r.User, IP: r.IP, Device: r.Device, Phone: r.Phone, Level: r.Level, Reason: r.Reason,
		},
		enqueued: time.UnixMilli(r.EnqueuedMs).UTC(),
	}
	if r.UntilMs != 0 {
		p.ev.Until = time.UnixMilli(r.UntilMs).UTC()
	}
	return p, nil
}
