package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/guardhq/guard/sdk"
)

// runDeliverer attempts the pending notifications as they fall due, one at
// a time, until Close cancels the context.
func (n *Notifier) runDeliverer() {
	defer close(n.done)
	for n.ctx.Err() == nil {
		p, wait := n.next()
		if p != nil && wait <= 0 {
			n.attempt(p)
			continue
		}
		var due <-chan time.Time
		var t *time.Timer
		if p != nil {
			t = time.NewTimer(wait)
			due = t.C
		}
		select {
		case <-n.ctx.Done():
		case <-n.wake:
		case <-due:
		}
		if t != nil {
			t.Stop()
		}
	}
}

// next returns the notification due first and how long until it is due;
// nil when nothing is pending or notifications are off (no URL).
func (n *Notifier) next() (*pending, time.Duration) {
	if n.settings.Load().WebhookURL == "" {
		return nil, 0
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var first *pending
	for _, p := range n.queue {
		if first == nil || p.due.Before(first.due) {
			first = p
		}
	}
	if first == nil {
		return nil, 0
	}
	return first, first.due.Sub(n.cfg.Now())
}

// attempt makes one delivery attempt of p and settles or reschedules it.
func (n *Notifier) attempt(p *pending) {
	s := n.settings.Load()
	now := n.cfg.Now()
	if !p.final && now.Sub(p.enqueued) >= n.cfg.MaxAge {
		n.giveUp(p, p.attempts, "not delivered within max age")
		return
	}
	body, err := json.Marshal(p.ev.wire())
	if err != nil {
		// A struct of strings and ints always marshals; stay honest.
		n.giveUp(p, p.attempts, err.Error())
		return
	}
	err = n.post(s, body, now)
	if err == nil {
		n.settle(p)
		n.log.Info("notification delivered", "id", p.ev.ID, "event", p.ev.Event, "attempts", p.attempts+1)
		n.result(p.ev.Event, ResultDelivered)
		return
	}
	if n.ctx.Err() != nil {
		// Cut off by Close: the notification stays on disk for the next
		// run; not a failure of the receiver.
		return
	}
	p.attempts++
	wait := n.backoff(p.attempts)
	now = n.cfg.Now()
	end := p.enqueued.Add(n.cfg.MaxAge)
	if p.final || !now.Before(end) {
		n.giveUp(p, p.attempts, err.Error())
		return
	}
	n.mu.Lock()
	p.due = now.Add(wait)
	if !p.due.Before(end) {
		// Retries go on for all of MaxAge: one last attempt at its end.
		p.due, p.final = end, true
		wait = end.Sub(now)
	}
	n.mu.Unlock()
	// The first failure of a notification is worth a warning; a receiver
	// that stays down would otherwise log once per attempt of each.
	lvl := n.log.Debug
	if p.attempts == 1 {
		lvl = n.log.Warn
	}
	lvl("notification not delivered; will retry", "id", p.ev.ID, "event", p.ev.Event,
		"url", redact(s.WebhookURL), "attempts", p.attempts, "retry_in", wait.Round(time.Millisecond), "err", err)
	n.result(p.ev.Event, ResultRetried)
}

// giveUp drops p for good: MaxAge has passed, or the attempt at its end
// failed.
func (n *Notifier) giveUp(p *pending, attempts int, why string) {
	n.settle(p)
	n.log.Error("notification given up", "id", p.ev.ID, "event", p.ev.Event, "attempts", attempts,
		"enqueued", p.enqueued, "err", why)
	n.result(p.ev.Event, ResultFailed)
}

// settle removes p from the spool and the queue. A file that cannot be
// removed is delivered again after a restart (at least once).
func (n *Notifier) settle(p *pending) {
	n.mu.Lock()
	sp := n.spool
	n.mu.Unlock()
	if err := sp.remove(p.ev.ID); err != nil {
		n.log.Error("delivered notification stays in the spool (it will be sent again after a restart)", "id", p.ev.ID, "err", err)
	}
	n.mu.Lock()
	n.queue = slices.DeleteFunc(n.queue, func(q *pending) bool { return q == p })
	count := len(n.queue)
	n.mu.Unlock()
	n.pendingChanged(count)
}

// backoff is the pause after the attempts-th failed attempt: Backoff
// doubled per further attempt, capped at MaxBackoff, then a random 50-100%
// of it, so that notifications that failed together do not retry together.
func (n *Notifier) backoff(attempts int) time.Duration {
	b := n.cfg.Backoff
	for i := 1; i < attempts && b < n.cfg.MaxBackoff; i++ {
		b *= 2
	}
	b = min(b, n.cfg.MaxBackoff)
	return b/2 + rand.N(b/2+1)
}

// post makes one attempt: body signed with s.Secret at now, to s.WebhookURL
// within s.Timeout. Any answer but 2xx is an error.
func (n *Notifier) post(s *Settings, body []byte, now time.Time) error {
	ctx, cancel := context.WithTimeout(n.ctx, s.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "guard-notify/1")
	req.Header.Set(sdk.SignatureHeader, sdk.SignWebhook([]byte(s.Secret), now, body))
	resp, err := n.client.Do(req)
	if err != nil {
		return fmt.Errorf("post webhook: %w", err)
	}
	// Drain a little so that the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

// redact keeps only the scheme and host of a webhook URL for logs: tokens
// travel in paths and queries.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	return u.Scheme + "://" + u.Host + "/..."
}
