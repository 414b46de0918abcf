// Package reload swaps a running Guard's configuration on SIGHUP without a
// restart. Everything a request uses that a config file can change — the
// policy and lists (an *abuse.Guard), the API keys and forward-auth (the
// HTTP handler built on it) — is one immutable Runtime behind an
// atomic.Pointer: each request loads it once, at its start, so requests in
// flight finish on the runtime they began with and none ever sees half of a
// new config. The limit store, the audit writer and the connections stay;
// settings they were built with need a restart and are kept
// (config.KeepRestartSettings).
package reload

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/config"
)

// Runtime is what one config makes of a running Guard, immutable once
// built.
type Runtime struct {
	// Config is the config it was built from (restart settings kept).
	Config *config.Config
	// Guard decides; its policy and lists are Config's.
	Guard *abuse.Guard
	// Handler is the HTTP API over Guard, with Config's API keys.
	Handler http.Handler
}

// Config configures a Reloader; Load and Build are required.
type Config struct {
	// Load re-reads the config file as serve read it at start
	// (config.Load and serve's flag overrides).
	Load func() (*config.Config, error)
	// Build makes the runtime of cfg; prev is the running one, whose
	// store and recorder the new Guard shares (abuse.Guard.Reconfigure).
	Build func(cfg *config.Config, prev *Runtime) (*Runtime, error)
	// Alert sends a one-off operator alert (alert.Notifier.Event);
	// optional.
	Alert func(event string, at time.Time, detail string)
	// Now is the clock of alerts; default time.Now.
	Now func() time.Time
}

// Reloader serves HTTP with the current Runtime and replaces it on Reload.
// It is safe for concurrent use; reloads run one at a time.
type Reloader struct {
	log *slog.Logger
	cfg Config
	cur atomic.Pointer[Runtime]
	mu  sync.Mutex // serialises reloads
}

// New returns a Reloader serving first.
func New(logger *slog.Logger, cfg Config, first *Runtime) (*Reloader, error) {
	if cfg.Load == nil || cfg.Build == nil || first == nil {
		return nil, errors.New("reload: Load, Build and a first runtime are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reloader{log: logger, cfg: cfg}
	r.cur.Store(first)
	return r, nil
}

// ServeHTTP hands the request to the runtime current at its start.
func (r *Reloader) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.cur.Load().Handler.ServeHTTP(w, req)
}

// Current is the runtime new requests get.
func (r *Reloader) Current() *Runtime { return r.cur.Load() }

// Notify reloads on each of the signals (SIGHUP) until ctx ends or the
// returned stop is called.
func (r *Reloader) Notify(ctx context.Context, sig ...os.Signal) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig...)
	ctx, cancel := context.WithCancel(ctx)
	go r.Watch(ctx, ch)
	return func() {
		signal.Stop(ch)
		cancel()
	}
}

// Watch reloads on every value from sig (SIGHUP) until ctx ends. Signals
// that arrive during a reload are coalesced by the channel's buffer.
func (r *Reloader) Watch(ctx context.Context, sig <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sig:
			_ = r.Reload()
		}
	}
}

// Reload re-reads the config. A valid one becomes the runtime of every
// request that starts after it: logged "config reloaded" (with the
// settings that need a restart, which are kept) and audited as an admin
// event "reload". An invalid one changes nothing: each problem is logged,
// the alert config_rejected is sent, and the error returned.
func (r *Reloader) Reload() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	cfg, err := r.cfg.Load()
	if err != nil {
		return r.reject(err)
	}
	if n := len(old.Config.API.Keys); n > 0 && len(cfg.API.Keys) == 0 {
		// Most likely a file caught half written (an editor truncates it
		// first) or emptied by mistake: valid, but every call would be
		// 401 at once. A restart can still start without keys.
		return r.reject(fmt.Errorf("%s: no api_keys, where the running config has %d: every /v1 call would be refused; not reloaded (restart to run without keys)", cfg.File, n))
	}
	kept := cfg.KeepRestartSettings(old.Config)
	rt, err := r.cfg.Build(cfg, old)
	if err != nil {
		return r.reject(err)
	}
	r.cur.Store(rt)
	for _, k := range kept {
		r.log.Warn("config reload: this setting needs a restart; the running value is kept", "setting", k)
	}
	for _, w := range cfg.Warnings {
		r.log.Warn(w.Msg, "where", w.Where)
	}
	actions := strings.Join(slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions)), ",")
	r.log.Info("config reloaded", "file", cfg.File, "actions", actions, "restart_needed", kept)
	note := fmt.Sprintf("config reloaded from %s (actions %s)", cfg.File, actions)
	if len(kept) > 0 {
		note += "; kept until a restart: " + strings.Join(kept, ", ")
	}
	rt.Guard.RecordReload(note)
	return nil
}

// reject logs every problem of a refused config and alerts.
func (r *Reloader) reject(err error) error {
	problems := unjoin(err)
	for _, p := range problems {
		r.log.Error("config reload rejected; the running config is kept", "problem", p.Error())
	}
	if r.cfg.Alert != nil {
		detail := err.Error()
		if len(detail) > 1000 {
			detail = detail[:1000] + "..."
		}
		r.cfg.Alert(alert.ConfigRejected, r.cfg.Now(), detail)
	}
	return fmt.Errorf("config reload rejected: %w", err)
}

func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
