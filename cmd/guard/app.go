package main

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/metrics"
	"github.com/guardhq/guard/internal/notify"
	"github.com/guardhq/guard/internal/reload"
)

// app is one wired Guard: every component `guard serve` runs, built from a
// Config. bench builds one too, so it measures exactly what serve runs.
type app struct {
	log      *slog.Logger
	cfg      *config.Config
	metrics  *metrics.Metrics
	store    limits.Store
	failover *limits.FailoverStore // nil without Redis
	audit    audit.Store
	recorder *audit.Writer
	pg       *audit.PGStore // nil without a database
	guard    *abuse.Guard   // the first runtime's; reloads replace the reloader's
	handler  http.Handler
	reloader *reload.Reloader
	apiState *api.State // review sign-outs and export slots, across reloads
	alerts   *alert.Notifier
	notifier *notify.Notifier
	// stopping is closed when the HTTP server begins a graceful stop; it
	// cuts off audit exports in flight (api.Deps.Stopping).
	stopping chan struct{}
	// stopBackground ends the background loops (partition maintenance,
	// health polling) started by newApp.
	stopBackground context.CancelFunc
	background     chan struct{}

	// pgPingFailed is the last health poll's ping of the audit database
	// (pollHealth, every 2 s): /readyz answers from it rather than pinging
	// on every request, which would take a second per probe while
	// Postgres hangs.
	pgPingFailed atomic.Bool
}

// appOptions are the knobs of newApp that are not in the config file.
type appOptions struct {
	// migrate runs the audit migrations before the store is used.
	migrate bool
	// listen is serve's --listen, which a reload applies again.
	listen string
}

// newApp builds every component of cfg. On error, whatever was built is
// closed again.
func newApp(ctx context.Context, logger *slog.Logger, cfg *config.Config, opts appOptions) (a *app, err error) {
	a = &app{log: logger, cfg: cfg, metrics: metrics.New(), stopping: make(chan struct{})}
	defer func() {
		if err != nil {
			_ = a.close(context.Background())
			a = nil
		}
	}()
	a.metrics.InitSeries(slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions)), alert.Events())
	a.metrics.SetInfo(cfg.Guard.Instance, versionName())
	alerts := cfg.Alerts
	alerts.OnResult = a.metrics.AlertSent
	a.alerts = alert.New(logger, alerts, nil, nil)
	if err := a.buildStore(ctx); err != nil {
		return a, err
	}
	if err := a.buildAudit(ctx, opts.migrate); err != nil {
		return a, err
	}
	if a.notifier, err = newNotifier(logger, cfg, a.metrics); err != nil {
		return a, err
	}
	first, err := a.buildRuntime(cfg, nil)
	if err != nil {
		return a, err
	}
	a.guard = first.Guard
	a.reloader, err = reload.New(logger, reload.Config{
		Load:  func() (*config.Config, error) { return cfg.Reread(opts.listen) },
		Build: a.buildRuntime,
		Alert: a.alerts.Event,
	}, first)
	if err != nil {
		return a, err
	}
	a.handler = a.reloader
	bg, stop := context.WithCancel(context.Background())
	a.stopBackground = stop
	a.background = make(chan struct{})
	go a.runBackground(bg)
	return a, nil
}

// buildRuntime builds what serves requests under cfg: a Guard (sharing
// prev's store and strike record on a reload) and the HTTP API over it.
func (a *app) buildRuntime(cfg *config.Config, prev *reload.Runtime) (*reload.Runtime, error) {
	var g *abuse.Guard
	var err error
	cfg.Guard.Notifier = a.notifier
	if prev == nil {
		g, err = abuse.New(a.log, cfg.Guard, a.store, a.recorder, a.audit)
	} else {
		g, err = prev.Guard.Reconfigure(a.log, cfg.Guard)
	}
	if err != nil {
		return nil, fmt.Errorf("build guard: %w", err)
	}
	a.metrics.InitSeries(slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions)), nil)
	// Review sessions must verify on every instance: the secret derives
	// from the key secret, as the audit cursors' does.
	apiCfg := cfg.API
	apiCfg.SessionSecret = derive(cfg.Guard.KeySecret, "ui-session")
	if a.apiState == nil {
		a.apiState = api.NewState(apiCfg, nil)
	}
	deps := api.Deps{
		State:           a.apiState,
		Guard:           g,
		Audit:           a.audit,
		AuditSync:       a.recorder.Sync,
		Cursors:         audit.NewCursorCodec(derive(cfg.Guard.KeySecret, "audit-cursor")),
		NormalizeUser:   g.AuditUser,
		NormalizeDevice: g.AuditDevice,
		Readiness:       a.readiness,
		Metrics:         a.metrics.Handler(),
		Observer:        a.metrics,
		Stopping:        a.stopping,
	}
	if a.pg != nil {
		// Sign-outs hold on every instance of the database, as the
		// cookies they end do.
		deps.Revocations = a.pg
	}
	h, err := api.New(a.log, apiCfg, deps)
	if err != nil {
		return nil, fmt.Errorf("build api: %w", err)
	}
	// The lockout notifier outlives runtimes: a reload swaps its settings
	// (URL, secret, events, timeout) last, so settings it refuses reject
	// the whole reload and nothing changes.
	if prev != nil {
		if err := a.notifier.Update(cfg.Notify.Settings); err != nil {
			return nil, err
		}
	}
	return &reload.Runtime{Config: cfg, Guard: g, Handler: h}, nil
}

// onMaintain publishes a partition maintenance: rows in the default
// partition (their day had no partition) are a metric and an alert until a
// later maintenance finds none.
func (a *app) onMaintain(rep audit.MaintenanceReport) {
	a.metrics.SetAuditDefaultRows(rep.DefaultRows)
	if rep.DefaultRows > 0 {
		a.alerts.Down(alert.AuditPartition, time.Now(), fmt.Sprintf(
			"%d audit rows landed in audit_events_default (no partition for their day); maintenance moves them", rep.DefaultRows))
		return
	}
	a.alerts.Up(alert.AuditPartition, time.Now(), "")
}

// derive makes a purpose-bound key from the key secret, so the secret
// itself is used for one thing only (identifier hashes).
func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("guard:" + purpose))
	return m.Sum(nil)
}

// buildStore sets up the limits store: memory without Redis, else Redis
// behind the failover store with a memory fallback.
func (a *app) buildStore(ctx context.Context) error {
	if !a.cfg.Redis.Enabled() {
		a.log.Warn("NO REDIS CONFIGURED: using the in-memory limiter. Limits and lockouts are " +
			"per process (not shared between instances) and are lost on restart. " +
			"Set GUARD_REDIS_URL or redis_url for production.")
		a.store = limits.NewMemory(limits.MemoryConfig{})
		a.metrics.SetRedisUp(false)
		return nil
	}
	client, err := limits.NewRedisClient(a.cfg.Redis, a.cfg.Store.Budget)
	if err != nil {
		return err
	}
	primary := limits.NewRedis(client, limits.RedisStoreConfig{})
	pingCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	prepErr := primary.Prepare(pingCtx)
	if prepErr != nil {
		a.log.Error("Redis does not answer at start; deciding from the local fallback until it does", "err", prepErr)
	} else {
		a.log.Info("Redis limiter ready", "redis", a.cfg.Redis.String(), "key_prefix", a.cfg.Guard.KeyPrefix)
	}
	a.failover = limits.NewFailover(a.log, a.cfg.Store, primary, limits.NewMemory(limits.MemoryConfig{}), limits.FailoverEvents{
		OnStateChange: func(up bool, since time.Time, cause error) {
			a.metrics.SetRedisUp(up)
			a.metrics.SetDegraded(!up)
			if up {
				a.alerts.Up(alert.Redis, since, "")
			} else {
				a.alerts.Down(alert.Redis, since, errDetail(cause))
			}
		},
		OnBreakerState: func(s limits.BreakerState) { a.metrics.SetBreakerState(s.String()) },
		OnPrimaryError: func(error) { a.metrics.RedisError() },
	})
	a.store = a.failover
	// Unreachable at start: degraded from the first decision (metrics,
	// alert, /readyz), not after three of them have waited the budget.
	a.failover.MarkUnavailable(prepErr)
	return nil
}

// buildAudit sets up the audit trail: a bounded memory store without a
// database, else Postgres with a batching, spooling writer.
func (a *app) buildAudit(ctx context.Context, migrate bool) error {
	pgcfg := a.cfg.Postgres
	pgcfg.OnMaintain = a.onMaintain
	t, err := audit.OpenTrail(ctx, a.log, audit.TrailConfig{DatabaseURL: a.cfg.DatabaseURL, Migrate: migrate,
		Postgres: pgcfg, Writer: a.cfg.Writer, Hooks: auditHooks(a.metrics, a.alerts, a.cfg.Writer.SpoolDir)})
	if err != nil {
		return errors.New(sanitize(err.Error(), a.cfg.DatabaseURL))
	}
	a.audit, a.recorder, a.pg = t.Store, t.Writer, t.PG
	if !t.Up {
		a.metrics.SetPostgresUp(false)
	}
	return nil
}

// runBackground runs what the app needs besides requests: audit partition
// maintenance and the health gauges, until ctx ends.
func (a *app) runBackground(ctx context.Context) {
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()
		close(a.background)
	}()
	if pg, ok := a.audit.(*audit.PGStore); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = pg.RunMaintenance(ctx)
		}()
	}
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		a.pollHealth(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// pollHealth refreshes the gauges that no event updates. guard_postgres_up
// is polled too: the writer reports only its own transitions and starts
// presuming Postgres up, so a database that was down at start (or has not
// been written to since) would otherwise leave the gauge wrong for good.
func (a *app) pollHealth(ctx context.Context) {
	st := a.recorder.Stats()
	a.metrics.SetAuditBacklog(st.Queued + st.SpoolEvents)
	a.metrics.SetSpoolBytes(st.SpoolBytes)
	if a.pg != nil {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		a.pgPingFailed.Store(a.audit.Ping(pctx) != nil)
		cancel()
		a.metrics.SetPostgresUp(a.postgresUp())
	}
}

// postgresUp reports whether the audit database takes writes: the writer
// has not seen it fail and it answered the last health poll's ping (within
// a second).
func (a *app) postgresUp() bool {
	return a.recorder.PostgresUp() && !a.pgPingFailed.Load()
}

// readiness answers /readyz: Guard can always decide (the fallback limiter
// keeps answering), degraded while Redis is unreachable: from the first
// call it failed, before the breaker opens (FailoverStore.Unreachable).
func (a *app) readiness(ctx context.Context) api.Readiness {
	r := api.Readiness{CanDecide: true, Mode: "normal", Redis: "ok", Postgres: "ok",
		AuditBacklog: int64(a.recorder.Backlog())}
	if a.failover != nil && a.failover.Unreachable() {
		r.Mode, r.Redis = "degraded", "down"
	}
	if a.pg != nil && !a.postgresUp() {
		r.Postgres = "down"
	}
	return r
}

// close stops the background loops, flushes the audit writer (bounded by
// ctx) and closes the stores, in that order: the writer needs the store.
func (a *app) close(ctx context.Context) error {
	var errs []error
	if a.stopBackground != nil {
		a.stopBackground()
		<-a.background
	}
	if a.notifier != nil {
		if err := a.notifier.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close notifier: %w", err))
		}
	}
	if a.recorder != nil {
		if err := a.recorder.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close audit writer: %w", err))
		}
	}
	if a.pg != nil {
		a.pg.Close()
	}
	if a.store != nil {
		if err := a.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close limits store: %w", err))
		}
	}
	if a.alerts != nil {
		if err := a.alerts.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close alerts: %w", err))
		}
	}
	return errors.Join(errs...)
}
