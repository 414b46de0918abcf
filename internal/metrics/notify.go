package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/guardhq/guard/sdk"
)

// notificationEvents and notificationResults are the label values of
// guard_notifications_total: the webhook's events (sdk) and the results
// that internal/notify reports (its Result constants).
var (
	notificationEvents  = [...]string{sdk.NotificationLockout, sdk.NotificationUnlock}
	notificationResults = [...]string{"delivered", "retried", "failed", "dropped"}
)

// notifyMetrics are the lockout notification collectors.
type notifyMetrics struct {
	total   *prometheus.CounterVec
	pending prometheus.Gauge
}

// newNotifyMetrics registers the notification collectors in reg, every
// event and result series at 0.
func newNotifyMetrics(reg *prometheus.Registry) notifyMetrics {
	n := notifyMetrics{
		total: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guard_notifications_total",
			Help: "Lockout notification webhooks by event (lockout, unlock) and result: delivered (2xx), retried (an attempt failed, another follows), failed (given up after 24h), dropped (never spooled: spool full or unwritable).",
		}, []string{"event", "result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_notifications_pending",
			Help: "Lockout notifications in the spool awaiting delivery.",
		}),
	}
	reg.MustRegister(n.total, n.pending)
	for _, e := range notificationEvents {
		for _, r := range notificationResults {
			n.total.WithLabelValues(e, r)
		}
	}
	return n
}

// NotificationResult counts one notification result (internal/notify's
// Hooks.OnResult): event "lockout" or "unlock", result "delivered",
// "retried", "failed" or "dropped"; other values count as "other".
func (m *Metrics) NotificationResult(event, result string) {
	m.notify.total.WithLabelValues(known(notificationEvents[:], event), known(notificationResults[:], result)).Inc()
}

// SetNotificationsPending sets guard_notifications_pending to n.
func (m *Metrics) SetNotificationsPending(n int) { m.notify.pending.Set(float64(n)) }

// known returns v if it is one of vs, else "other".
func known(vs []string, v string) string {
	for _, s := range vs {
		if s == v {
			return v
		}
	}
	return "other"
}
