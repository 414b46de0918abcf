// Package metrics holds Guard's Prometheus collectors in a registry of its
// own (no global registry) and serves them on /metrics.
//
// Label values come from a closed set: actions from the config, decisions,
// reasons, events and results from constants in Guard's code. Never pass a
// user, IP, device, key or anything else taken from a request as a label:
// each distinct value is a new time series kept for the life of the process.
// As a last line of defence each label accepts at most MaxLabelValues
// distinct values; later ones are counted under "other".
package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/guardhq/guard/sdk"
)

// MaxLabelValues is the number of distinct values one label accepts before
// further values are reported as "other".
const MaxLabelValues = 64

// breakerStates are the values of guard_breaker_state's state label.
var breakerStates = [...]string{"closed", "open", "half_open"}

// decisionReasons are the decision and reason pairs a check can answer
// (API.md); InitSeries creates them for every action.
var decisionReasons = [...][2]string{
	{sdk.DecisionAllow, sdk.ReasonOK}, {sdk.DecisionAllow, sdk.ReasonAllowlisted},
	{sdk.DecisionAllow, sdk.ReasonShadow}, {sdk.DecisionAllow, sdk.ReasonStoreUnavailable},
	{sdk.DecisionDeny, sdk.ReasonRateLimited}, {sdk.DecisionDeny, sdk.ReasonLockedOut},
	{sdk.DecisionDeny, sdk.ReasonDenylisted}, {sdk.DecisionDeny, sdk.ReasonStoreUnavailable},
	{sdk.DecisionChallenge, sdk.ReasonChallenge},
}

// alertResults are the values of guard_alerts_total's result label.
var alertResults = [...]string{"sent", "failed", "dropped"}

// Metrics owns Guard's collectors and their registry. Its methods are safe
// for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	decisions      *prometheus.CounterVec
	duration       *prometheus.HistogramVec
	degradedTotal  *prometheus.CounterVec
	degraded       prometheus.Gauge
	redisUp        prometheus.Gauge
	redisErrors    prometheus.Counter
	breaker        *prometheus.GaugeVec
	postgresUp     prometheus.Gauge
	auditBacklog   prometheus.Gauge
	auditWritten   prometheus.Counter
	auditDropped   prometheus.Counter
	spoolBytes     prometheus.Gauge
	defaultRows    prometheus.Gauge
	alerts         *prometheus.CounterVec
	info           *prometheus.GaugeVec
	notify         notifyMetrics
	actionLabels   labelSet
	decisionLabels labelSet
	reasonLabels   labelSet
	eventLabels    labelSet
	resultLabels   labelSet
}

// New returns Metrics with every collector registered in a fresh registry,
// together with the Go runtime and process collectors. Gauges start at 0
// except guard_redis_up and guard_postgres_up, which start at 1 and
// guard_breaker_state, which starts "closed"; the owner sets them as soon
// as it knows better.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guard_decisions_total",
			Help: "Decisions answered, by configured action, decision (allow, deny) and reason.",
		}, []string{"action", "decision", "reason"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "guard_decision_duration_seconds",
			Help: "Time to decide one check or report, from request decoded to answer ready, by action.",
			Buckets: []float64{
				0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
				0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 1,
			},
		}, []string{"action"}),
		degradedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guard_degraded_decisions_total",
			Help: "Decisions not answered by Redis (local fallback or on_store_failure allow/deny), by action.",
		}, []string{"action"}),
		degraded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_degraded",
			Help: "1 while decisions come from the local fallback instead of Redis, else 0.",
		}),
		redisUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_redis_up",
			Help: "1 while Redis answers within the call budget (breaker closed), else 0.",
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "guard_redis_errors_total",
			Help: "Redis calls and probes that failed or exceeded the call budget.",
		}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "guard_breaker_state",
			Help: "1 for the Redis circuit breaker's current state (closed, open, half_open), 0 for the others.",
		}, []string{"state"}),
		postgresUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_postgres_up",
			Help: "1 while the audit trail's Postgres accepts writes, else 0.",
		}),
		auditBacklog: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_audit_backlog",
			Help: "Audit events queued or spooled but not yet written to Postgres.",
		}),
		auditWritten: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "guard_audit_written_total",
			Help: "Audit events written to the audit store.",
		}),
		auditDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "guard_audit_dropped_total",
			Help: "Audit events lost (queue and spool full, or spool unwritable).",
		}),
		spoolBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_audit_spool_bytes",
			Help: "Size of the audit spool on disk in bytes.",
		}),
		defaultRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "guard_audit_default_partition_rows",
			Help: "Rows found in audit_events_default at the last partition maintenance (should be 0: events whose day had no partition).",
		}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "guard_alerts_total",
			Help: "Alert webhooks by event and result (sent, failed, dropped).",
		}, []string{"event", "result"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "guard_info",
			Help: "Always 1: the config's instance name (guard_instance; Prometheus keeps instance for the scrape target) and Guard's version.",
		}, []string{"guard_instance", "version"}),
	}
	m.reg.MustRegister(
		m.decisions, m.duration, m.degradedTotal, m.degraded, m.redisUp,
		m.redisErrors, m.breaker, m.postgresUp, m.auditBacklog, m.auditWritten,
		m.auditDropped, m.spoolBytes, m.defaultRows, m.alerts, m.info,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	m.notify = newNotifyMetrics(m.reg)
	m.redisUp.Set(1)
	m.postgresUp.Set(1)
	m.SetBreakerState("closed")
	return m
}

// SetInfo names this process in guard_info: its config's instance (which
// only a restart changes) and version.
func (m *Metrics) SetInfo(instance, version string) {
	m.info.Reset()
	m.info.WithLabelValues(instance, version).Set(1)
}

// InitSeries creates, at 0, every labelled series Guard can produce for
// the given actions and alert events (e.g. "redis_down"), so that each
// metric name is in the exposition from the first scrape rather than only
// after its first event, and rate() sees the step from 0. Both lists come
// from the config and Guard's code, never from requests; like every label
// value they count against MaxLabelValues.
func (m *Metrics) InitSeries(actions, alertEvents []string) {
	for _, a := range actions {
		a = m.actionLabels.value(a)
		for _, dr := range decisionReasons {
			m.decisions.WithLabelValues(a, m.decisionLabels.value(dr[0]), m.reasonLabels.value(dr[1]))
		}
		m.duration.WithLabelValues(a)
		m.degradedTotal.WithLabelValues(a)
	}
	for _, e := range alertEvents {
		e = m.eventLabels.value(e)
		for _, r := range alertResults {
			m.alerts.WithLabelValues(e, m.resultLabels.value(r))
		}
	}
}

// Handler serves the registry in the Prometheus text (or negotiated)
// exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry returns the registry, for packages that bring collectors of
// their own.
func (m *Metrics) Registry() *prometheus.Registry {
	return m.reg
}

// ObserveDecision counts one decision and its latency d. action must be a
// configured action name (never request input); decision is "allow",
// "deny" or "challenge"; reason one of the API's reasons; degraded whether the answer did
// not come from Redis.
func (m *Metrics) ObserveDecision(action, decision, reason string, degraded bool, d time.Duration) {
	action = m.actionLabels.value(action)
	m.decisions.WithLabelValues(action, m.decisionLabels.value(decision), m.reasonLabels.value(reason)).Inc()
	m.duration.WithLabelValues(action).Observe(d.Seconds())
	if degraded {
		m.degradedTotal.WithLabelValues(action).Inc()
	}
}

// SetRedisUp sets guard_redis_up.
func (m *Metrics) SetRedisUp(up bool) { m.redisUp.Set(b2f(up)) }

// SetDegraded sets guard_degraded.
func (m *Metrics) SetDegraded(degraded bool) { m.degraded.Set(b2f(degraded)) }

// SetBreakerState marks state ("closed", "open" or "half_open") as the
// breaker's current state; other values are ignored.
func (m *Metrics) SetBreakerState(state string) {
	known := false
	for _, s := range breakerStates {
		known = known || s == state
	}
	if !known {
		return
	}
	for _, s := range breakerStates {
		m.breaker.WithLabelValues(s).Set(b2f(s == state))
	}
}

// RedisError counts one failed or timed-out Redis call or probe.
func (m *Metrics) RedisError() { m.redisErrors.Inc() }

// SetPostgresUp sets guard_postgres_up.
func (m *Metrics) SetPostgresUp(up bool) { m.postgresUp.Set(b2f(up)) }

// SetAuditBacklog sets guard_audit_backlog to n events.
func (m *Metrics) SetAuditBacklog(n int) { m.auditBacklog.Set(float64(n)) }

// AddAuditWritten adds n to guard_audit_written_total; n <= 0 is ignored.
func (m *Metrics) AddAuditWritten(n int) {
	if n > 0 {
		m.auditWritten.Add(float64(n))
	}
}

// AddAuditDropped adds n to guard_audit_dropped_total; n <= 0 is ignored.
func (m *Metrics) AddAuditDropped(n int) {
	if n > 0 {
		m.auditDropped.Add(float64(n))
	}
}

// SetSpoolBytes sets guard_audit_spool_bytes to n bytes.
func (m *Metrics) SetSpoolBytes(n int64) { m.spoolBytes.Set(float64(n)) }

// SetAuditDefaultRows sets guard_audit_default_partition_rows to n rows.
func (m *Metrics) SetAuditDefaultRows(n int64) { m.defaultRows.Set(float64(n)) }

// AlertSent counts one alert delivery attempt's outcome: event such as
// "redis_down", result "sent", "failed" or "dropped".
func (m *Metrics) AlertSent(event, result string) {
	m.alerts.WithLabelValues(m.eventLabels.value(event), m.resultLabels.value(result)).Inc()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// labelSet admits at most MaxLabelValues distinct values of one label.
type labelSet struct {
	seen sync.Map // string -> struct{}
	mu   sync.Mutex
	n    int
}

// value returns v if it is known or there is room for it, else "other".
func (l *labelSet) value(v string) string {
	if _, ok := l.seen.Load(v); ok {
		return v
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.seen.Load(v); ok {
		return v
	}
	if l.n >= MaxLabelValues {
		return "other"
	}
	l.n++
	l.seen.Store(v, struct{}{})
	return v
}
