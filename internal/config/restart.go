package config

import (
	"bytes"
	"reflect"
)

// restartSetting is a setting a running Guard cannot change: its clients,
// stores and background loops were built with it at start.
type restartSetting struct {
	// name is the config key (or keys) as the file spells them.
	name string
	// differs compares the setting of two configs.
	differs func(a, b *Config) bool
	// keep copies it from old into c.
	keep func(c, old *Config)
}

// restartSettings are every setting a reload cannot apply. key_secret and
// store.key_prefix name every key in the limit store: a new secret would
// orphan all limits, lockouts and trusted devices at once (and break audit
// cursors and review sessions), so it waits for a deliberate restart.
// audit.pseudonymize decides what the trail stores, which must not switch
// under a running writer.
var restartSettings = []restartSetting{
	{"listen", func(a, b *Config) bool { return a.Listen != b.Listen }, func(c, o *Config) { c.Listen = o.Listen }},
	{"redis_url / redis", func(a, b *Config) bool { return !reflect.DeepEqual(a.Redis, b.Redis) }, func(c, o *Config) { c.Redis = o.Redis }},
	{"database_url", func(a, b *Config) bool { return a.DatabaseURL != b.DatabaseURL }, func(c, o *Config) { c.DatabaseURL = o.DatabaseURL }},
	{"key_secret", func(a, b *Config) bool {
		// A file without a key secret runs on the one serve made up.
		return len(a.Guard.KeySecret) > 0 && !bytes.Equal(a.Guard.KeySecret, b.Guard.KeySecret)
	}, func(c, o *Config) { c.Guard.KeySecret = o.Guard.KeySecret }},
	{"store.key_prefix", func(a, b *Config) bool { return a.Guard.KeyPrefix != b.Guard.KeyPrefix }, func(c, o *Config) { c.Guard.KeyPrefix = o.Guard.KeyPrefix }},
	{"instance", func(a, b *Config) bool { return a.Guard.Instance != b.Guard.Instance }, func(c, o *Config) {
		c.Guard.Instance, c.Alerts.Instance = o.Guard.Instance, o.Alerts.Instance
	}},
	{"audit.pseudonymize", func(a, b *Config) bool { return a.Guard.Pseudonymize != b.Guard.Pseudonymize }, func(c, o *Config) { c.Guard.Pseudonymize = o.Guard.Pseudonymize }},
	{"store.budget / store.fleet_size", func(a, b *Config) bool {
		return a.Store.Budget != b.Store.Budget || a.Store.FleetSize != b.Store.FleetSize
	}, func(c, o *Config) { c.Store = o.Store }},
	{"alerts", func(a, b *Config) bool {
		return a.Alerts.WebhookURL != b.Alerts.WebhookURL || a.Alerts.Timeout != b.Alerts.Timeout
	}, func(c, o *Config) { c.Alerts = o.Alerts }},
	{"audit.spool_dir / batch_size / flush_interval", func(a, b *Config) bool {
		return a.Writer.SpoolDir != b.Writer.SpoolDir || a.Writer.BatchSize != b.Writer.BatchSize || a.Writer.FlushInterval != b.Writer.FlushInterval
	}, func(c, o *Config) { c.Writer = o.Writer }},
	{"audit.retention", func(a, b *Config) bool { return a.Postgres.Retention != b.Postgres.Retention }, func(c, o *Config) { c.Postgres = o.Postgres }},
	// The notifier's spool is opened once; its other settings reload.
	{"notifications.spool_dir", func(a, b *Config) bool { return a.Notify.SpoolDir != b.Notify.SpoolDir }, func(c, o *Config) { c.Notify.SpoolDir = o.Notify.SpoolDir }},
}

// KeepRestartSettings makes c, a config re-read for a reload, keep the
// running config old's settings that only a restart can change (listen,
// Redis, database, key secret and prefix, instance, pseudonymize, the store
// budget, alerts, the audit writer and retention) and returns the names of
// those c had changed, for the log. What remains different is what a
// reload applies: the policy, lists, API keys, forward-auth, ip and
// trusted-device settings.
func (c *Config) KeepRestartSettings(old *Config) (changed []string) {
	for _, s := range restartSettings {
		if s.differs(c, old) {
			changed = append(changed, s.name)
		}
		s.keep(c, old)
	}
	return changed
}
