package sdk

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Events of a lockout notification (contract v1.1 "Lockout notifications").
const (
	// NotificationLockout: a strike locked a key, or an administrator
	// locked it (POST /v1/lockouts).
	NotificationLockout = "lockout"
	// NotificationUnlock: an administrator lifted a lockout (DELETE
	// /v1/lockouts or the review pages).
	NotificationUnlock = "unlock"
)

// SignatureHeader carries a notification's signature:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>".
const SignatureHeader = "X-Guard-Signature"

// DefaultWebhookTolerance is how far a signature's timestamp may lie from
// the receiver's clock before VerifyWebhook refuses it as a replay.
const DefaultWebhookTolerance = 5 * time.Minute

// Notification is the JSON body Guard POSTs to notifications.webhook_url.
// Identifiers are as the audit event beside it has them (keyed hashes
// under audit.pseudonymize), null when absent: for a strike those of the
// striking request, for a manual lockout or an unlock those of Dimension.
// Dimension says which key is locked (an "ip" lockout may name the user
// whose attempt struck it). Deliveries are at least once: deduplicate on
// ID, which stays the same on every retry.
type Notification struct {
	// ID is unique per notification (a ULID).
	ID string `json:"id"`
	// Event is NotificationLockout or NotificationUnlock.
	Event string `json:"event"`
	// At is when it happened (TimeFormat).
	At string `json:"at"`
	// Instance is the Guard instance that saw it.
	Instance string `json:"instance"`
	// Ledger is the lockout ledger; null only for an unlock of every
	// ledger when Guard could not tell which ledgers were locked.
	Ledger *string `json:"ledger"`
	// Dimension is the locked key's dimension, e.g. "user" or "user+ip".
	Dimension string  `json:"dimension"`
	User      *string `json:"user"`
	IP        *string `json:"ip"`
	Device    *string `json:"device"`
	// Phone is the E.164 number (a hash under audit.pseudonymize), or the
	// region or prefix of a phone_country or phone_prefix lockout (a Guard
	// addition to API.md's list); absent when the lockout involves none,
	// so that such a body has exactly API.md's fields.
	Phone *string `json:"phone,omitempty"`
	// Level is the ladder step after a strike (from 1), the key's current
	// level for a manual lockout (0 without strikes), 0 after an unlock.
	Level int `json:"level"`
	// Until is when the lockout ends (TimeFormat); null for an unlock.
	Until *string `json:"until"`
	// Reason is the striking rule's name for a strike, the
	// administrator's reason for a manual lockout or an unlock.
	Reason string `json:"reason"`
}

// SignWebhook returns the SignatureHeader value for body signed with
// secret at t (Unix seconds). Guard signs with it; receivers' tests can
// too.
func SignWebhook(secret []byte, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(webhookMAC(secret, ts, body))
}

func webhookMAC(secret []byte, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Errors of VerifyWebhook; test with errors.Is.
var (
	// ErrSignatureMissing: no header, or no t= or v1= part in it.
	ErrSignatureMissing = errors.New("guard webhook: signature header missing or malformed")
	// ErrSignatureMismatch: no v1 signature matches body and secret.
	ErrSignatureMismatch = errors.New("guard webhook: signature does not match")
	// ErrSignatureExpired: the timestamp is further from now than the
	// tolerance (a replay, or a clock far off).
	ErrSignatureExpired = errors.New("guard webhook: signature timestamp outside tolerance")
)

// VerifyWebhook checks a notification's SignatureHeader value against the
// raw request body (read it before decoding) and secret: the HMAC is
// compared in constant time, and the timestamp must lie within tolerance
// of now (0 means DefaultWebhookTolerance), so a captured request cannot
// be replayed later. Several v1= parts (a secret rotation) are accepted
// when one matches. It returns nil or an error wrapping
// ErrSignatureMissing, ErrSignatureMismatch or ErrSignatureExpired.
func VerifyWebhook(secret []byte, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if ts == "" || len(sigs) == 0 {
		return ErrSignatureMissing
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: t=%q is not Unix seconds", ErrSignatureMissing, ts)
	}
	want := webhookMAC(secret, ts, body)
	match := false
	for _, s := range sigs {
		// Every candidate is compared, so the time taken does not tell
		// which one matched.
		match = hmac.Equal(s, want) || match
	}
	if !match {
		return ErrSignatureMismatch
	}
	if skew := now.Sub(time.Unix(sec, 0)); skew > tolerance || skew < -tolerance {
		return fmt.Errorf("%w: signed %s from now, tolerance %s", ErrSignatureExpired, skew.Round(time.Second), tolerance)
	}
	return nil
}
