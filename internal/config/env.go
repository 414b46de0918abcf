package config

import (
	"path/filepath"
	"runtime"
)

// Var is one environment variable Guard reads.
type Var struct {
	Name string
	// Doc says what it sets, for help texts and docs/configuration.md.
	Doc string
}

// The environment variables Guard reads; Vars lists them all, and ReadEnv
// is the only place that reads them.
const (
	EnvConfig      = "GUARD_CONFIG"
	EnvListen      = "GUARD_LISTEN"
	EnvRedisURL    = "GUARD_REDIS_URL"
	EnvDatabaseURL = "GUARD_DATABASE_URL"
	EnvKeySecret   = "GUARD_KEY_SECRET"
	EnvKeyPrefix   = "GUARD_KEY_PREFIX"
	EnvInstance    = "GUARD_INSTANCE"
	EnvSpoolDir    = "GUARD_SPOOL_DIR"
	EnvLogFormat   = "GUARD_LOG_FORMAT"
	EnvLogLevel    = "GUARD_LOG_LEVEL"
	EnvURL         = "GUARD_URL"
	EnvAPIKey      = "GUARD_API_KEY"
	// envXDGCacheHome and envHome are what os.UserCacheDir reads; the
	// default spool directory is derived from them.
	envXDGCacheHome = "XDG_CACHE_HOME"
	envHome         = "HOME"
	envLocalAppData = "LocalAppData"
)

// EnvNotificationsSecret sets notifications.secret, so that the webhook
// secret need not be in the file.
const EnvNotificationsSecret = "GUARD_NOTIFICATIONS_SECRET"

// Vars is every environment variable Guard reads.
var Vars = []Var{
	{EnvConfig, "the config file (serve; --config wins)"},
	{EnvListen, "listen address, default " + DefaultListen + " (serve; --listen wins)"},
	{EnvRedisURL, "redis_url"},
	{EnvDatabaseURL, "database_url"},
	{EnvKeySecret, "key_secret"},
	{EnvNotificationsSecret, "notifications.secret"},
	{EnvKeyPrefix, "store.key_prefix"},
	{EnvInstance, "instance"},
	{EnvSpoolDir, "audit.spool_dir"},
	{EnvLogFormat, "log format: text or json (serve; --log-format wins)"},
	{EnvLogLevel, "log level: debug, info, warn or error (serve; --log-level wins)"},
	{EnvURL, "base URL of a running Guard (audit, health)"},
	{EnvAPIKey, "API key of guard audit"},
	{envXDGCacheHome, "where the default spool directory lives (Linux)"},
	{envHome, "where the default spool directory lives when XDG_CACHE_HOME is unset"},
	{envLocalAppData, "where the default spool directory lives (Windows)"},
}

// Env is the environment as Guard sees it: every variable of Vars, read
// once.
type Env map[string]string

// ReadEnv reads every variable of Vars through getenv (os.Getenv in main).
func ReadEnv(getenv func(string) string) Env {
	e := make(Env, len(Vars))
	for _, v := range Vars {
		if s := getenv(v.Name); s != "" {
			e[v.Name] = s
		}
	}
	return e
}

// Get returns the variable's value ("" when unset or not one of Vars).
func (e Env) Get(name string) string { return e[name] }

// DefaultSpoolDir is where the audit spool lives when audit.spool_dir and
// GUARD_SPOOL_DIR are unset: the user's cache directory (as
// os.UserCacheDir finds it, from this Env), which survives reboots (unlike
// /tmp); tmpDir when there is none.
func (e Env) DefaultSpoolDir(tmpDir string) string {
	var cache string
	switch runtime.GOOS {
	case "windows":
		cache = e[envLocalAppData]
	case "darwin", "ios":
		if h := e[envHome]; h != "" {
			cache = filepath.Join(h, "Library", "Caches")
		}
	default:
		cache = e[envXDGCacheHome]
		if !filepath.IsAbs(cache) {
			cache = ""
			if h := e[envHome]; h != "" {
				cache = filepath.Join(h, ".cache")
			}
		}
	}
	if cache == "" {
		return filepath.Join(tmpDir, "guard-spool")
	}
	return filepath.Join(cache, "guard", "spool")
}
