package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"time"

	"github.com/guardhq/guard/internal/notify"
)

// notificationsSection is the `notifications` section (API.md v1.1
// "Lockout notifications"); spool_dir is Guard's own addition.
type notificationsSection struct {
	WebhookURL string        `yaml:"webhook_url"`
	Secret     string        `yaml:"secret"`
	Events     []string      `yaml:"events"`
	Timeout    time.Duration `yaml:"timeout" min:"1ms"`
	SpoolDir   string        `yaml:"spool_dir"`
}

// notifications moves the section into cfg.Notify, each problem at its
// line. The secret is checked by notificationSecret, after the
// environment, which may supply it.
func (d *decoder) notifications(cfg *Config, s *notificationsSection) {
	cfg.Notify = notify.Config{
		Settings: notify.Settings{WebhookURL: s.WebhookURL, Secret: s.Secret, Events: s.Events, Timeout: s.Timeout},
		SpoolDir: s.SpoolDir,
	}
	if s.WebhookURL != "" {
		if err := checkURL(s.WebhookURL, "http", "https"); err != nil {
			d.errorAt("notifications.webhook_url", "notifications.webhook_url: %v", err)
		}
	}
	for i, e := range s.Events {
		if !slices.Contains(notify.Events, e) {
			d.errorAt(fmt.Sprintf("notifications.events[%d]", i), "notifications.events[%d]: unknown event %s: want lockout or unlock", i, quote(e))
		}
	}
	if d.has("notifications.events") && len(s.Events) == 0 {
		d.errorAt("notifications.events", "notifications.events: name at least one of lockout, unlock (or leave the key out for both)")
	}
	if d.has("notifications.spool_dir") && s.SpoolDir == "" {
		d.errorAt("notifications.spool_dir", "notifications.spool_dir: must not be empty (leave it out for <audit.spool_dir>/%s)", notify.DefaultSpoolSubdir)
	}
}

// notificationSecret applies GUARD_NOTIFICATIONS_SECRET and requires a
// secret with a webhook URL: receivers cannot verify unsigned deliveries.
func (d *decoder) notificationSecret(cfg *Config, env Env) {
	if v := env.Get(EnvNotificationsSecret); v != "" {
		cfg.Notify.Secret = v
	}
	if cfg.Notify.WebhookURL != "" && cfg.Notify.Secret == "" && !d.bad["notifications.secret"] {
		d.errorAt("notifications.webhook_url", "notifications.secret is required with a webhook_url (set it or %s): receivers verify every delivery's signature with it", EnvNotificationsSecret)
	}
	if n := len(cfg.Notify.Secret); n > 0 && n < WeakSecretBytes {
		where := fmt.Sprintf("%s:%d", d.file, d.lines["notifications.secret"])
		if env.Get(EnvNotificationsSecret) != "" {
			where = EnvNotificationsSecret
		}
		cfg.Warnings = append(cfg.Warnings, Warning{
			Where: where,
			Msg: fmt.Sprintf("SHORT NOTIFICATION SECRET: notifications.secret is %d bytes, shorter than %d: "+
				"whoever guesses it can forge lockout notifications; use e.g. openssl rand -hex 32", n, WeakSecretBytes),
		})
	}
}

// notificationSpool defaults the notification spool to a directory beside
// the audit spool.
func notificationSpool(cfg *Config) {
	if cfg.Notify.SpoolDir == "" {
		cfg.Notify.SpoolDir = filepath.Join(cfg.Writer.SpoolDir, notify.DefaultSpoolSubdir)
	}
}
