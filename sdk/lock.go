package sdk

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// LockRequest is the body of POST /v1/lockouts: a manual lockout of the
// key that Dimension and its identifiers name, for Duration.
type LockRequest struct {
	Dimension string  `json:"dimension"`
	User      *string `json:"user,omitempty"`
	IP        *string `json:"ip,omitempty"`
	Device    *string `json:"device,omitempty"`
	Phone     *string `json:"phone,omitempty"`
	// PhoneCountry ("GB") and PhonePrefix ("+447400") name a
	// phone_country or phone_prefix key as listings show it, instead of
	// a Phone in it.
	PhoneCountry *string `json:"phone_country,omitempty"`
	PhonePrefix  *string `json:"phone_prefix,omitempty"`
	// Duration is how long the key stays locked, 1s to 30 days, in whole
	// milliseconds.
	Duration time.Duration `json:"-"`
	// Ledger limits the lockout to one ledger; empty means every ledger
	// of an action that has a lockout ladder.
	Ledger string `json:"ledger,omitempty"`
	// Reason is recorded in the audit trail as the admin event's note.
	Reason string `json:"reason,omitempty"`
}

// MarshalJSON writes Duration as the wire's duration_ms.
func (r LockRequest) MarshalJSON() ([]byte, error) {
	type plain LockRequest
	return json.Marshal(struct {
		plain
		DurationMs int64 `json:"duration_ms"`
	}{plain(r), r.Duration.Milliseconds()})
}

// Lock sets a manual lockout (scope admin) and returns one entry per
// ledger it locked: Level is the key's strike level (a manual lockout is
// not a strike, so 0 for a key without strikes) and Until the later of
// the manual end and any struck one. A bad request is an *Error with
// Status 400 and the Field at fault. Like Unlock it is not retried after
// a timeout.
func (c *Client) Lock(ctx context.Context, req LockRequest) (*LockoutsResponse, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("guard: encode lock: %w", err)
	}
	var out LockoutsResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/lockouts", body: b, timeout: c.adminTimeout}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
