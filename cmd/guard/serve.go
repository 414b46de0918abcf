package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/limits"
)

const serveHelp = `
Runs the Guard HTTP service until SIGINT or SIGTERM, then
shuts down gracefully: it stops accepting connections, finishes the requests
in flight, flushes the audit trail and closes Redis and Postgres.

SIGHUP re-reads the config file: a valid one replaces the policy, lists and
API keys for every request that starts after it ("config reloaded"); an
invalid one changes nothing (every problem logged, alert config_rejected).
Listen, Redis, database, key secret and audit settings need a restart.

Configuration: the YAML file of --config (or GUARD_CONFIG), then the
environment: GUARD_LISTEN (default 127.0.0.1:8080; --listen wins),
GUARD_REDIS_URL, GUARD_DATABASE_URL, GUARD_KEY_SECRET, GUARD_KEY_PREFIX,
GUARD_INSTANCE, GUARD_SPOOL_DIR, GUARD_LOG_FORMAT, GUARD_LOG_LEVEL.
Without a Redis URL Guard limits in memory, without a database URL it keeps
the audit trail in memory: fine for trying it out, never for production
(single instance, lost on restart); it says so at start.

Without key_secret Guard makes up a random one at start (and warns): limits
then do not survive a restart. With a Redis URL a key_secret is required.`

// defaultShutdownTimeout is serve's --shutdown-timeout default, and
// minShutdownTimeout its least value: less leaves no time to finish
// requests and flush the audit trail, and the stop fails.
const (
	defaultShutdownTimeout = 25 * time.Second
	minShutdownTimeout     = time.Second
)

func runServe(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "serve", "[flags]", serveHelp)
	configPath := fs.String("config", "", "config file (default: GUARD_CONFIG; none: built-in defaults)")
	listen := fs.String("listen", "", "address to listen on, host:port (default: GUARD_LISTEN, the file's listen, else "+config.DefaultListen+")")
	logFormat := fs.String("log-format", firstNonEmpty(e.env.Get(config.EnvLogFormat), "text"), "log format: text or json (env GUARD_LOG_FORMAT)")
	logLevel := fs.String("log-level", firstNonEmpty(e.env.Get(config.EnvLogLevel), "info"), "log level: debug, info, warn or error (env GUARD_LOG_LEVEL)")
	migrate := fs.Bool("migrate", false, "apply the audit database migrations before serving")
	shutdownTimeout := fs.Duration("shutdown-timeout", defaultShutdownTimeout, "how long a graceful stop may take before connections are cut (at least "+minShutdownTimeout.String()+")")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("serve: unexpected argument %q", fs.Arg(0))
	}
	if err := durationFlagAtLeast("serve", "shutdown-timeout", *shutdownTimeout, minShutdownTimeout); err != nil {
		return err
	}
	logger, err := config.NewLogger(e.stderr, *logFormat, *logLevel)
	if err != nil {
		// A bad value that no flag gave came from the environment: name
		// the variable, as config check does.
		given := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
		flagOf := map[string]string{config.EnvLogFormat: "log-format", config.EnvLogLevel: "log-level"}
		for _, p := range config.LogProblems(e.env) {
			var ce *config.Error
			if errors.As(p, &ce) && !given[flagOf[ce.File]] {
				return fmt.Errorf("serve: %w", p)
			}
		}
		return fmt.Errorf("serve: %w", err)
	}
	limits.UseLogger(logger)
	cfg, err := config.Load(*configPath, e.env)
	if err != nil {
		return err
	}
	if *listen != "" {
		if err := cfg.SetListen(*listen); err != nil {
			return fmt.Errorf("serve: %w", err)
		}
	}
	generated, err := cfg.EnsureKeySecret()
	if err != nil {
		return err
	}
	if generated {
		logger.Warn("NO KEY SECRET CONFIGURED: using a random one made up at start. Limits and " +
			"lockouts do not survive a restart and audit cursors break. Set GUARD_KEY_SECRET " +
			"or key_secret (e.g. openssl rand -hex 32).")
	}
	for _, w := range cfg.Warnings {
		logger.Warn(w.Msg, "where", w.Where)
	}
	if cfg.File == "" {
		logger.Info("no config file; running the built-in default policy", "actions", actionNames(cfg))
	} else {
		logger.Info("config loaded", "file", cfg.File, "actions", actionNames(cfg), "policy_from_file", cfg.PolicyFromFile)
	}
	a, err := newApp(ctx, logger, cfg, appOptions{migrate: *migrate, listen: *listen})
	if err != nil {
		return err
	}
	defer a.reloader.Notify(ctx, syscall.SIGHUP)()
	return a.serve(ctx, *shutdownTimeout)
}

func actionNames(cfg *config.Config) string {
	return strings.Join(slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions)), ",")
}

// serve listens on the configured address and serves until ctx ends, then
// shuts down: stop accepting, finish in-flight requests (at most timeout),
// flush the audit writer, close the stores.
func (a *app) serve(ctx context.Context, timeout time.Duration) error {
	ln, err := net.Listen("tcp", a.cfg.Listen)
	if err != nil {
		_ = a.close(context.Background())
		return fmt.Errorf("listen on %s: %w", a.cfg.Listen, err)
	}
	// net/http's own answers to requests it cannot read become Guard's
	// JSON errors with a request id.
	ln = api.Listener(ln)
	srv := &http.Server{
		Handler:           a.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// Audit exports stream the whole filtered trail for as long as
		// their client keeps reading: they move their own write deadline
		// forward with every write (api.ExportConfig.WriteTimeout), so
		// this bounds every other answer.
		WriteTimeout:   time.Minute,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(a.log.Handler(), slog.LevelWarn),
	}
	api.WireServer(srv)
	// Exports in flight end when the stop begins, so a client
	// downloading the trail cannot hold the stop to its limit and leave
	// the audit flush no time.
	srv.RegisterOnShutdown(func() { close(a.stopping) })
	a.log.Info("guard listening", "addr", ln.Addr().String(), "instance", a.cfg.Instance())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	var serveErr error
	select {
	case serveErr = <-served:
		// The listener failed on its own; still shut down in order.
	case <-ctx.Done():
		a.log.Info("shutting down: no new connections, finishing requests in flight")
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		_ = srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve: %w", serveErr))
	}
	if err := a.close(sctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		a.log.Info("guard stopped")
	}
	return errors.Join(errs...)
}
