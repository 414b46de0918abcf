package api

import (
	"github.com/guardhq/guard/sdk"
)

// The server's encodings of the answers whose SDK types hold times. The
// SDK's types are the one list of fields (wire_test.go holds these to
// them, name for name and in order); the server writes times in
// sdk.TimeFormat, which time.Time's own JSON form (RFC 3339 with as many
// fractional digits as needed) is not. Keeping the encoders here keeps
// them out of the public SDK.

// lockoutJSON is sdk.Lockout on the wire.
type lockoutJSON struct {
	Dimension string `json:"dimension"`
	Until     string `json:"until"`
	Level     int    `json:"level"`
}

func encodeLockout(l *sdk.Lockout) *lockoutJSON {
	if l == nil {
		return nil
	}
	return &lockoutJSON{Dimension: l.Dimension, Until: sdk.FormatTime(l.Until), Level: l.Level}
}

// reportJSON is sdk.ReportResponse on the wire.
type reportJSON struct {
	Lockout *lockoutJSON `json:"lockout"`
}

// lockoutEntryJSON is sdk.LockoutEntry on the wire.
type lockoutEntryJSON struct {
	Ledger       string  `json:"ledger"`
	Dimension    string  `json:"dimension"`
	User         *string `json:"user,omitempty"`
	IP           *string `json:"ip,omitempty"`
	Device       *string `json:"device,omitempty"`
	Phone        *string `json:"phone,omitempty"`
	PhoneCountry *string `json:"phone_country,omitempty"`
	PhonePrefix  *string `json:"phone_prefix,omitempty"`
	Level        int     `json:"level"`
	Since        string  `json:"since"`
	Until        string  `json:"until"`
}

// lockoutsJSON is sdk.LockoutsResponse on the wire.
type lockoutsJSON struct {
	Lockouts   []lockoutEntryJSON `json:"lockouts"`
	NextCursor *string            `json:"next_cursor"`
}

func encodeLockouts(r sdk.LockoutsResponse) lockoutsJSON {
	out := lockoutsJSON{Lockouts: make([]lockoutEntryJSON, 0, len(r.Lockouts)), NextCursor: r.NextCursor}
	for _, l := range r.Lockouts {
		out.Lockouts = append(out.Lockouts, lockoutEntryJSON{
			Ledger: l.Ledger, Dimension: l.Dimension, User: l.User, IP: l.IP, Device: l.Device,
			Phone: l.Phone, PhoneCountry: l.PhoneCountry, PhonePrefix: l.PhonePrefix,
			Level: l.Level, Since: sdk.FormatTime(l.Since), Until: sdk.FormatTime(l.Until),
		})
	}
	return out
}

// errorBody is every error answer: {"error": {...}}. The SDK reads it
// into sdk.Error.
type errorBody struct {
	Error errorDetail `json:"error"`
}

// errorDetail is the inside of errorBody; Field only when one input field
// is at fault. RequestID is the answer's X-Request-Id (contract v1.1),
// which the SDK reads into sdk.Error.RequestID.
type errorDetail struct {
	Code      string `json:"code"`
	Message   string `json:"message"`
	Field     string `json:"field,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}
