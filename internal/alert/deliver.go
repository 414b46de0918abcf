package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

// run delivers queued alerts in order until the queue is closed.
func (n *Notifier) run() {
	defer close(n.done)
	for p := range n.queue {
		n.deliver(p)
	}
}

// deliver POSTs p, retrying with doubling backoff, and records the result.
func (n *Notifier) deliver(p Payload) {
	body, err := json.Marshal(p)
	if err != nil {
		// A Payload of strings and ints always marshals; keep the
		// error path honest anyway.
		n.logger.Error("alert not delivered", "event", p.Event, "err", err)
		n.result(p.Event, "failed")
		return
	}
	backoff := n.cfg.Backoff
	var last error
	for attempt := 1; ; attempt++ {
		retry, err := n.post(body)
		if err == nil {
			n.logger.Info("alert delivered", "event", p.Event, "attempts", attempt)
			n.result(p.Event, "sent")
			return
		}
		last = err
		if !retry || attempt > n.cfg.Retries || !n.sleep(backoff) {
			break
		}
		backoff *= 2
	}
	n.logger.Error("alert not delivered", "event", p.Event, "url", redact(n.cfg.WebhookURL), "err", last)
	n.result(p.Event, "failed")
}

// sleep waits d, or less when Close gives up; it reports whether the full
// time passed.
func (n *Notifier) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-n.ctx.Done():
		return false
	}
}

// post makes one delivery attempt. retry reports whether a failure is worth
// another attempt.
func (n *Notifier) post(body []byte) (retry bool, err error) {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.cfg.WebhookURL, bytes.NewReader(body))
	if err != nil {
		return false, fmt.Errorf("build webhook request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "guard-alert/1")
	resp, err := n.client.Do(req)
	if err != nil {
		return true, fmt.Errorf("post webhook: %w", err)
	}
	// Drain a little so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	switch code := resp.StatusCode; {
	case code >= 200 && code < 300:
		return false, nil
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return true, fmt.Errorf("webhook answered %d", code)
	default:
		return false, fmt.Errorf("webhook answered %d", code)
	}
}

// redact keeps only the scheme and host of a webhook URL for logs: tokens
// travel in paths (Slack, Teams) and queries as often as in user info.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(invalid url)"
	}
	return u.Scheme + "://" + u.Host + "/..."
}
