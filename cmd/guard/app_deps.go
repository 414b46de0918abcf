package main

import (
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/metrics"
	"github.com/guardhq/guard/internal/notify"
)

// auditHooks wire the audit writer to metrics and alerts (Postgres
// outages, a full spool at spoolDir).
func auditHooks(m *metrics.Metrics, alerts *alert.Notifier, spoolDir string) audit.WriterHooks {
	return audit.WriterHooks{
		OnWritten: m.AddAuditWritten,
		OnDropped: m.AddAuditDropped,
		OnStoreState: func(up bool, since time.Time, err error) {
			m.SetPostgresUp(up)
			if up {
				alerts.Up(alert.Postgres, since, "")
			} else {
				alerts.Down(alert.Postgres, since, errDetail(err))
			}
		},
		OnSpoolFull: func(full bool) {
			if full {
				alerts.Down(alert.Spool, time.Now(), "audit spool full at "+spoolDir+"; new audit events are dropped")
			} else {
				alerts.Up(alert.Spool, time.Now(), "")
			}
		},
	}
}

// newNotifier starts the lockout notifier, its results and spool depth
// wired to metrics. Without a webhook URL it spools and sends nothing (a
// reload may set one: Notifier.Update).
func newNotifier(logger *slog.Logger, cfg *config.Config, m *metrics.Metrics) (*notify.Notifier, error) {
	return notify.New(logger, cfg.Notify, nil, notify.Hooks{OnResult: m.NotificationResult, OnPending: m.SetNotificationsPending})
}

// redactURL hides the password of a Redis or Postgres URL for logs.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparseable URL)"
	}
	return u.Redacted()
}

// sanitize removes a URL (and its password) from an error message that may
// repeat it.
func sanitize(msg, raw string) string {
	msg = strings.ReplaceAll(msg, raw, redactURL(raw))
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}

// errDetail is an alert's detail for err: short, and without URLs that
// might carry a password.
func errDetail(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if len(msg) > 300 {
		msg = msg[:300] + "..."
	}
	return msg
}
