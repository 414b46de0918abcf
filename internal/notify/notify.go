// Package notify delivers lockout notifications (contract v1.1): a signed
// webhook POST for each strike that locks a key, each manual lockout and
// each unlock, so the application can tell the account owner.
//
// # Delivery
//
// Notify only enqueues: it never blocks the decision that calls it. A
// background spooler writes each notification to its own file in SpoolDir
// (written to a temporary file, fsync'd, renamed, the directory fsync'd)
// before it is attempted, so a notification survives a stop or a crash
// once it is on disk; the window between Notify and that write is the
// only one in which a crash loses it. One background deliverer POSTs the
// pending notifications one at a time, the one due first first (a new
// one at once, a failed one after its backoff), each signed afresh per attempt
// (sdk.SignatureHeader; the body and the id stay the same). A 2xx answer
// delivers it and deletes its file; anything else (3xx, 4xx, 5xx, a
// network error, a timeout) is retried with exponential backoff and
// jitter, capped at MaxBackoff, until MaxAge after it was enqueued, then
// it is given up and counted as failed. 4xx answers are retried too: a
// receiver answers them for mistakes an operator fixes (a route not yet
// deployed, a secret being rotated, a clock off so that the receiver
// refuses the timestamp), and the account owner should still hear of a
// lockout once they are fixed; MaxAge bounds the cost. Redirects are not
// followed: a signed body goes only to the configured URL.
//
// Deliveries are at least once: a receiver that answers after Guard's
// timeout, or a stop between the answer and the file's removal, gets the
// notification again, with the same id. Receivers deduplicate on it.
package notify

import (
	"errors"
	"fmt"
	"net/url"
	"slices"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Events lists the notification events, the values notifications.events
// accepts.
var Events = []string{sdk.NotificationLockout, sdk.NotificationUnlock}

// Results of a notification, reported to Hooks.OnResult (and counted as
// guard_notifications_total{event,result}).
const (
	// ResultDelivered: the receiver answered 2xx.
	ResultDelivered = "delivered"
	// ResultRetried: one attempt failed; another follows.
	ResultRetried = "retried"
	// ResultFailed: given up MaxAge after it was enqueued.
	ResultFailed = "failed"
	// ResultDropped: never spooled (spool full or unwritable, or the
	// notifier closed).
	ResultDropped = "dropped"
)

// Defaults of Config and Settings.
const (
	DefaultTimeout    = 2 * time.Second
	DefaultMaxPending = 10000
	DefaultBackoff    = time.Second
	DefaultMaxBackoff = 10 * time.Minute
	DefaultMaxAge     = 24 * time.Hour
	DefaultQueueSize  = 1024
	// DefaultSpoolSubdir is the spool's directory under audit.spool_dir
	// when notifications.spool_dir is not set.
	DefaultSpoolSubdir = "notifications"
)

// Settings are what notifications.* in the config file set; Update swaps
// them at run time (hot reload).
type Settings struct {
	// WebhookURL receives the notifications; "" turns them off (nothing
	// is spooled; pending ones wait until a URL is set again or MaxAge).
	WebhookURL string
	// Secret signs every delivery; required with a WebhookURL.
	Secret string
	// Events are the events to send, a subset of Events; nil or empty
	// means all of them.
	Events []string
	// Timeout bounds one delivery attempt; default DefaultTimeout (2s).
	Timeout time.Duration
}

// Validate reports the first problem of s: a WebhookURL that is not an
// absolute http(s) URL, a missing Secret, an unknown event or a negative
// timeout.
func (s Settings) Validate() error {
	if s.WebhookURL != "" {
		u, err := url.Parse(s.WebhookURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return errors.New("webhook_url must be an http:// or https:// URL with a host")
		}
		if s.Secret == "" {
			return errors.New("secret is required with a webhook_url (receivers verify the signature with it)")
		}
	}
	for _, e := range s.Events {
		if !slices.Contains(Events, e) {
			return fmt.Errorf("unknown event %q: want lockout or unlock", e)
		}
	}
	if s.Timeout < 0 {
		return errors.New("timeout must be positive")
	}
	return nil
}

// wants reports whether s sends event e.
func (s *Settings) wants(e string) bool {
	return s.WebhookURL != "" && (len(s.Events) == 0 || slices.Contains(s.Events, e))
}

// Config configures New. Zero fields get the defaults stated on each.
type Config struct {
	Settings
	// SpoolDir holds the pending notifications, one file each. Required.
	SpoolDir string
	// MaxPending bounds the notifications on disk (default
	// DefaultMaxPending); one more is dropped, logged and counted.
	MaxPending int
	// Backoff is the pause before the first retry, doubled before each
	// further one up to MaxBackoff, each with jitter (a random 50-100% of
	// it); defaults DefaultBackoff (1s) and DefaultMaxBackoff (10m).
	Backoff    time.Duration
	MaxBackoff time.Duration
	// MaxAge is how long after it was enqueued a notification is retried
	// (default DefaultMaxAge, 24h).
	MaxAge time.Duration
	// QueueSize bounds the notifications waiting for the spooler (default
	// DefaultQueueSize); one that does not fit is dropped.
	QueueSize int
	// Now is the clock of notification ages and signatures (default
	// time.Now); waits use timers, so tests run in a testing/synctest
	// bubble.
	Now func() time.Time
}

// Hooks report what the notifier does; nil fields are not called.
type Hooks struct {
	// OnResult is called with an event and one of the Result constants.
	OnResult func(event, result string)
	// OnPending is called with the number of notifications on disk
	// whenever it changes.
	OnPending func(n int)
}

// Event is one notification as Guard emits it (see sdk.Notification for
// the fields' meaning on the wire).
type Event struct {
	// ID is unique (a ULID) and stays the same on every retry.
	ID       string
	Event    string
	At       time.Time
	Instance string
	// Ledger is "" for an unlock of every ledger whose locked ledgers
	// were not known.
	Ledger    string
	Dimension string
	User      *string
	IP        *string
	Device    *string
	// Phone is the E.164 number (or its hash), or the phone_country or
	// phone_prefix value of such a lock, as the audit event has it.
	Phone *string
	Level int
	// Until is zero for an unlock.
	Until  time.Time
	Reason string
}

// wire is e's webhook body.
func (e Event) wire() sdk.Notification {
	n := sdk.Notification{
		ID: e.ID, Event: e.Event, At: sdk.FormatTime(e.At), Instance: e.Instance,
		Dimension: e.Dimension, User: e.User, IP: e.IP, Device: e.Device, Phone: e.Phone, Level: e.Level, Reason: e.Reason,
	}
	if e.Ledger != "" {
		n.Ledger = &e.Ledger
	}
	if !e.Until.IsZero() {
		u := sdk.FormatTime(e.Until)
		n.Until = &u
	}
	return n
}
