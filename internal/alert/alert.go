// Package alert tells operators when a dependency of Guard goes down or
// comes back: one log line and one webhook per transition, never one per
// request.
//
// # Deduplication and hysteresis
//
// Each Condition (redis, postgres, spool, audit_partition) is either up or down. Down
// announces "<condition>_down" at once; repeating Down while down is a
// no-op. Up does not announce "<condition>_recovered" at once: the
// condition must stay up for Hold first. If it goes down again within Hold
// it is the same outage: neither the pending recovery nor a second down is
// sent, and the outage's transitions count goes up. So a flapping
// dependency yields one down alert, and one recovery after it has been
// stable for Hold; at most one down/recovered pair per Hold.
//
// # Delivery
//
// Webhooks are POSTed in order by one background goroutine, never on the
// caller's goroutine: each attempt has Timeout, failed attempts (network
// errors, 408, 429, 5xx) are retried Retries times with Backoff doubling
// between them; other 4xx answers are not retried. Without a WebhookURL the
// alerts are logged only.
package alert

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Condition names a watched dependency.
type Condition string

// The watched conditions and their events.
const (
	// Redis: events redis_down and redis_recovered.
	Redis Condition = "redis"
	// Postgres: the audit trail's database; postgres_down and
	// postgres_recovered.
	Postgres Condition = "postgres"
	// Spool: the audit spool is full and events are being dropped;
	// spool_full and spool_recovered.
	Spool Condition = "spool"
	// AuditPartition: audit rows landed in the default partition (their day
	// had no partition); audit_default_partition and
	// audit_partition_recovered.
	AuditPartition Condition = "audit_partition"
)

// Conditions lists every watched condition.
var Conditions = []Condition{Redis, Postgres, Spool, AuditPartition}

// Events lists every event the notifier can send, down and up for each of
// Conditions and the one-off events of Notifier.Event (for
// guard_alerts_total's series).
func Events() []string {
	out := make([]string, 0, 2*len(Conditions)+len(oneOffEvents))
	for _, c := range Conditions {
		out = append(out, c.DownEvent(), c.UpEvent())
	}
	return append(out, oneOffEvents...)
}

// DownEvent returns the event sent when c goes down, e.g. "redis_down".
func (c Condition) DownEvent() string {
	switch c {
	case Spool:
		return "spool_full"
	case AuditPartition:
		return "audit_default_partition"
	}
	return string(c) + "_down"
}

// UpEvent returns the event sent when c recovers, e.g. "redis_recovered".
func (c Condition) UpEvent() string {
	return string(c) + "_recovered"
}

// Config configures New. Zero fields get the defaults stated on each.
type Config struct {
	// WebhookURL receives the alerts as JSON POSTs; "" logs them only.
	WebhookURL string
	// Timeout bounds one delivery attempt (default 2s).
	Timeout time.Duration
	// Retries is the number of further attempts after a failed one
	// (default 3; negative means none).
	Retries int
	// Backoff is the pause before the first retry, doubled before each
	// further one (default 200ms).
	Backoff time.Duration
	// Hold is how long a condition must stay up before its recovery is
	// announced; a relapse within Hold continues the same outage (default
	// 10s; negative announces recoveries at once).
	Hold time.Duration
	// Instance names this Guard process in every alert.
	Instance string
	// QueueSize bounds the alerts waiting for delivery (default 64); an
	// alert that does not fit is dropped, logged and counted.
	QueueSize int
	// OnResult, if set, is called once per alert with its event and
	// result: "sent", "failed" (every attempt failed) or "dropped" (queue
	// full or notifier closing). Alerts without a WebhookURL are not
	// counted. It feeds guard_alerts_total{event,result}.
	OnResult func(event, result string)
}

// Payload is the JSON body of a webhook.
type Payload struct {
	// Event is e.g. "redis_down" or "redis_recovered".
	Event string `json:"event"`
	// Instance is Config.Instance.
	Instance string `json:"instance"`
	// Since is when the outage began (RFC 3339, milliseconds, UTC).
	Since string `json:"since"`
	// At is when this transition happened: the outage start for a down
	// event, the return for a recovery.
	At string `json:"at"`
	// Detail is the cause given by the caller, e.g. the last Redis error.
	Detail string `json:"detail"`
	// Counts describe the outage so far.
	Counts Counts `json:"counts"`
}

// Counts are the numbers an alert carries.
type Counts struct {
	// Transitions is the number of times the condition went down during
	// this outage (1, or more when flaps within Hold were collapsed).
	Transitions int `json:"transitions"`
	// DownMS is the outage's length in milliseconds; 0 in a down event.
	DownMS int64 `json:"down_ms"`
}

// Notifier raises and clears conditions and delivers their alerts. Its
// methods are safe for concurrent use and never block on the network.
type Notifier struct {
	logger *slog.Logger
	cfg    Config
	client *http.Client
	now    func() time.Time

	mu     sync.Mutex
	conds  map[Condition]*condition
	closed bool

	queue  chan Payload
	done   chan struct{}
	ctx    context.Context // ends in-flight deliveries when Close gives up
	cancel context.CancelFunc
}

// condition is the state of one Condition; guarded by Notifier.mu.
type condition struct {
	down        bool // as last reported by Down/Up
	alerted     bool // a down alert went out, its recovery not yet
	since       time.Time
	transitions int
	upAt        time.Time
	upDetail    string
	timer       *time.Timer // pending recovery announcement
	gen         int         // invalidates a superseded timer
}

// New returns a Notifier and starts its delivery goroutine; Close stops it.
// A nil client gets a fresh http.Client; a nil now gets time.Now.
func New(logger *slog.Logger, cfg Config, client *http.Client, now func() time.Time) *Notifier {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Second
	}
	switch {
	case cfg.Retries == 0:
		cfg.Retries = 3
	case cfg.Retries < 0:
		cfg.Retries = 0
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 200 * time.Millisecond
	}
	if cfg.Hold == 0 {
		cfg.Hold = 10 * time.Second
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 64
	}
	if client == nil {
		client = &http.Client{}
	}
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Notifier{
		logger: logger,
		cfg:    cfg,
		client: client,
		now:    now,
		conds:  map[Condition]*condition{},
		queue:  make(chan Payload, cfg.QueueSize),
		done:   make(chan struct{}),
		ctx:    ctx,
		cancel: cancel,
	}
	go n.run()
	return n
}

// Down reports that c is down since the given time, with a short
// human-readable detail (no secrets, no identifiers). The first Down of an
// outage logs at WARN (its source logged the transition at ERROR) and
// sends c.DownEvent(); see the package
// documentation for repeats and flapping.
func (n *Notifier) Down(c Condition, since time.Time, detail string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	st := n.conds[c]
	if st == nil {
		st = &condition{}
		n.conds[c] = st
	}
	if st.down {
		return
	}
	st.down = true
	if st.alerted {
		// Back down before the recovery was announced: the same outage.
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
		st.gen++
		st.transitions++
		n.logger.Warn("alert suppressed: relapse within hold", "condition", string(c),
			"transitions", st.transitions, "hold", n.cfg.Hold, "detail", detail)
		return
	}
	st.alerted = true
	st.since = since
	st.transitions = 1
	event := c.DownEvent()
	// WARN, not ERROR: the component that went down logged its own
	// transition at ERROR, once (API.md: once per transition).
	n.logger.Warn("alert", "event", event, "instance", n.cfg.Instance, "since", since, "detail", detail)
	n.enqueue(Payload{
		Event:    event,
		Instance: n.cfg.Instance,
		Since:    stamp(since),
		At:       stamp(n.now()),
		Detail:   detail,
		Counts:   Counts{Transitions: 1},
	})
}

// Up reports that c works again as of at. Once c has stayed up for Hold
// since at, its recovery is logged at WARN and c.UpEvent() is sent, once
// per outage.
// Up for a condition that is not down is a no-op.
func (n *Notifier) Up(c Condition, at time.Time, detail string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.conds[c]
	if n.closed || st == nil || !st.down {
		return
	}
	st.down = false
	if !st.alerted {
		return
	}
	st.upAt = at
	st.upDetail = detail
	st.gen++
	if n.cfg.Hold < 0 {
		n.recoverLocked(c, st)
		return
	}
	gen := st.gen
	// Hold counts from at, when c came back, not from this call: a caller
	// that confirms a recovery before reporting it (the breaker's good
	// probes) must not delay the announcement by its confirmation.
	wait := min(max(n.cfg.Hold-n.now().Sub(at), 0), n.cfg.Hold)
	st.timer = time.AfterFunc(wait, func() {
		n.mu.Lock()
		defer n.mu.Unlock()
		if n.closed || st.gen != gen || st.down || !st.alerted {
			return
		}
		n.recoverLocked(c, st)
	})
}

// recoverLocked announces c's recovery; n.mu is held.
func (n *Notifier) recoverLocked(c Condition, st *condition) {
	st.alerted = false
	st.timer = nil
	event := c.UpEvent()
	down := st.upAt.Sub(st.since)
	n.logger.Warn("alert", "event", event, "instance", n.cfg.Instance, "since", st.since,
		"down_for", down.Round(time.Millisecond), "transitions", st.transitions)
	n.enqueue(Payload{
		Event:    event,
		Instance: n.cfg.Instance,
		Since:    stamp(st.since),
		At:       stamp(st.upAt),
		Detail:   st.upDetail,
		Counts:   Counts{Transitions: st.transitions, DownMS: down.Milliseconds()},
	})
}

// enqueue hands p to the delivery goroutine without blocking; n.mu is held.
func (n *Notifier) enqueue(p Payload) {
	if n.cfg.WebhookURL == "" {
		return
	}
	select {
	case n.queue <- p:
	default:
		n.logger.Error("alert dropped: delivery queue full", "event", p.Event, "queue_size", n.cfg.QueueSize)
		n.result(p.Event, "dropped")
	}
}

// Close announces pending recoveries at once (the dependency is up; only
// the hold had not elapsed), then waits for queued and in-flight deliveries
// until ctx ends, at which point it abandons them and returns ctx's error.
// Down and Up after Close are ignored.
func (n *Notifier) Close(ctx context.Context) error {
	n.mu.Lock()
	if !n.closed {
		for c, st := range n.conds {
			if st.timer != nil && st.alerted && !st.down {
				// A timer already firing waits for n.mu and then sees
				// n.closed, so the recovery goes out once.
				st.timer.Stop()
				n.recoverLocked(c, st)
			}
		}
		n.closed = true
		close(n.queue)
	}
	n.mu.Unlock()
	select {
	case <-n.done:
		n.cancel()
		return nil
	case <-ctx.Done():
		n.cancel()
		<-n.done
		return ctx.Err()
	}
}

func (n *Notifier) result(event, result string) {
	if n.cfg.OnResult != nil {
		n.cfg.OnResult(event, result)
	}
}

// stamp formats t as RFC 3339 with milliseconds in UTC, as the API does.
func stamp(t time.Time) string {
	return t.UTC().Format(sdk.TimeFormat)
}

// Validate reports a WebhookURL that is set but not an absolute http or
// https URL, so the config can be rejected at start rather than at the
// first outage.
func (c Config) Validate() error {
	if c.WebhookURL == "" {
		return nil
	}
	u, err := url.Parse(c.WebhookURL)
	if err != nil {
		return fmt.Errorf("alerts webhook_url: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("alerts webhook_url %q: want an absolute http or https URL", redact(c.WebhookURL))
	}
	return nil
}
