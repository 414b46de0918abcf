package main

import (
	"errors"
	"fmt"
	"net/netip"
	"net/textproto"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/guardhq/guard/internal/abuse"
)

// Environment variables read by cmd/guard (and nowhere else).
const (
	envConfig      = "GUARD_CONFIG"
	envListen      = "GUARD_LISTEN"
	envRedisURL    = "GUARD_REDIS_URL"
	envDatabaseURL = "GUARD_DATABASE_URL"
	envKeySecret   = "GUARD_KEY_SECRET"
	envKeyPrefix   = "GUARD_KEY_PREFIX"
	envInstance    = "GUARD_INSTANCE"
	envSpoolDir    = "GUARD_SPOOL_DIR"
)

// Defaults of the config file's keys; docs/configuration.md lists them.
const (
	defaultListen        = "127.0.0.1:8080"
	defaultKeyPrefix     = abuse.DefaultKeyPrefix
	defaultIPv6Prefix    = 64
	defaultTrustTTL      = 720 * time.Hour
	defaultBudget        = 50 * time.Millisecond
	defaultFleetSize     = 1
	defaultAlertTimeout  = 2 * time.Second
	defaultRetention     = 2160 * time.Hour
	defaultBatchSize     = 1000
	defaultFlushInterval = 200 * time.Millisecond
	defaultUserHeader    = "X-Guard-User"
	defaultDeviceHeader  = "X-Guard-Device"
)

// API key scopes.
const (
	ScopeCheck     = "check"
	ScopeAuditRead = "audit:read"
	ScopeAdmin     = "admin"
)

var scopes = []string{ScopeCheck, ScopeAuditRead, ScopeAdmin}

// Config is everything `guard serve` runs with: the YAML file after
// defaults and environment overrides.
type Config struct {
	// File is the config file's path, "" when Guard runs on defaults.
	File string

	Listen      string
	RedisURL    string
	DatabaseURL string
	// KeySecret keys the identifier hashes; "" until serve generates one.
	KeySecret string
	// KeyPrefix is the versioned prefix of every Redis key (store.key_prefix).
	KeyPrefix string
	APIKeys   []APIKey

	// Policy is the effective policy: the file's actions and lists, or
	// abuse.DefaultPolicy() with the file's lists when it has no actions.
	Policy abuse.Policy
	// PolicyFromFile reports whether the file's `actions` replaced the
	// default policy.
	PolicyFromFile bool

	Instance    string
	IPv6Prefix  int
	TrustTTL    time.Duration
	Store       StoreConfig
	Alerts      AlertsConfig
	Audit       AuditConfig
	ForwardAuth ForwardAuthConfig
	lines       policyLines
}

// APIKey is one configured key. The key itself is kept only as its SHA-256.
type APIKey struct {
	Name   string
	Scopes []string
	SHA256 [32]byte
}

// StoreConfig is the `store` section.
type StoreConfig struct {
	// Budget bounds every Redis call (default 50ms).
	Budget time.Duration
	// FleetSize is how many instances share the load while on the fallback
	// limiter (default 1).
	FleetSize int
}

// AlertsConfig is the `alerts` section.
type AlertsConfig struct {
	WebhookURL string
	Timeout    time.Duration
}

// AuditConfig is the `audit` section.
type AuditConfig struct {
	Pseudonymize  bool
	SpoolDir      string
	Retention     time.Duration
	BatchSize     int
	FlushInterval time.Duration
}

// ForwardAuthConfig is the `forward_auth` section.
type ForwardAuthConfig struct {
	UserHeader     string
	DeviceHeader   string
	TrustedProxies []netip.Prefix
}

// topLevelKeys are the keys the file may have.
var topLevelKeys = []string{
	"listen", "redis_url", "database_url", "key_secret", "api_keys", "actions", "lists",
	"instance", "ip", "trusted_devices", "store", "alerts", "audit", "forward_auth",
}

// loadConfig reads the config file named by path (or GUARD_CONFIG when path
// is ""), applies defaults and environment overrides and validates the
// result. Every problem is reported as "FILE:LINE: what is wrong"; a config
// with any problem is refused as a whole.
func loadConfig(path string, getenv func(string) string) (*Config, error) {
	if path == "" {
		path = getenv(envConfig)
	}
	var data []byte
	if path != "" {
		var err error
		data, err = os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
	}
	return parseConfig(path, data, getenv)
}

// parseConfig is loadConfig on the file's contents (nil data: no file).
func parseConfig(file string, data []byte, getenv func(string) string) (*Config, error) {
	cfg := &Config{
		File:       file,
		Listen:     defaultListen,
		KeyPrefix:  defaultKeyPrefix,
		IPv6Prefix: defaultIPv6Prefix,
		TrustTTL:   defaultTrustTTL,
		Store:      StoreConfig{Budget: defaultBudget, FleetSize: defaultFleetSize},
		Alerts:     AlertsConfig{Timeout: defaultAlertTimeout},
		Audit: AuditConfig{
			Retention:     defaultRetention,
			BatchSize:     defaultBatchSize,
			FlushInterval: defaultFlushInterval,
		},
		ForwardAuth: ForwardAuthConfig{UserHeader: defaultUserHeader, DeviceHeader: defaultDeviceHeader},
	}
	name := file
	if name == "" {
		name = "(defaults)"
	}
	d := &yamlDecoder{file: name}
	if len(strings.TrimSpace(string(data))) > 0 {
		doc, err := parseYAML(name, data)
		if err != nil {
			return nil, err
		}
		cfg.decode(d, doc)
	}
	cfg.applyEnv(d, getenv)
	if err := d.err(); err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "guard"
		}
		cfg.Instance = host
	}
	if cfg.Audit.SpoolDir == "" {
		cfg.Audit.SpoolDir = defaultSpoolDir()
	}
	if !cfg.PolicyFromFile {
		allow, deny := cfg.Policy.Allow, cfg.Policy.Deny
		cfg.Policy = abuse.DefaultPolicy()
		cfg.Policy.Allow, cfg.Policy.Deny = allow, deny
	}
	if err := cfg.validatePolicy(name); err != nil {
		return nil, err
	}
	return cfg, nil
}

// defaultSpoolDir is where the audit spool lives when audit.spool_dir is
// unset: the user's cache directory, which survives reboots (unlike /tmp).
func defaultSpoolDir() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "guard", "spool")
	}
	return filepath.Join(os.TempDir(), "guard-spool")
}

// decode fills cfg from the document node.
func (cfg *Config) decode(d *yamlDecoder, doc *yaml.Node) {
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return
	}
	top := d.mapping(doc.Content[0], "config", topLevelKeys...)
	if f, ok := top["listen"]; ok {
		d.str(f, "listen", &cfg.Listen)
		if err := checkListen(cfg.Listen); err != nil {
			d.errorf(f.val, "listen: %v", err)
		}
	}
	if f, ok := top["redis_url"]; ok {
		d.str(f, "redis_url", &cfg.RedisURL)
		if err := checkURL(cfg.RedisURL, "redis", "rediss", "unix"); err != nil {
			d.errorf(f.val, "redis_url: %v", err)
		}
	}
	if f, ok := top["database_url"]; ok {
		d.str(f, "database_url", &cfg.DatabaseURL)
		if err := checkURL(cfg.DatabaseURL, "postgres", "postgresql"); err != nil {
			d.errorf(f.val, "database_url: %v", err)
		}
	}
	if f, ok := top["key_secret"]; ok {
		d.str(f, "key_secret", &cfg.KeySecret)
		if err := checkKeySecret(cfg.KeySecret); err != nil {
			d.errorf(f.val, "key_secret: %v", err)
		}
	}
	if f, ok := top["api_keys"]; ok {
		cfg.APIKeys = d.decodeAPIKeys(f)
	}
	if f, ok := top["actions"]; ok {
		cfg.Policy.Actions = d.decodeActions(f.val, &cfg.lines)
		cfg.PolicyFromFile = true
	}
	if f, ok := top["lists"]; ok {
		cfg.lines.lists = f.key.Line
		cfg.Policy.Allow, cfg.Policy.Deny = d.decodeLists(f.val, &cfg.lines)
	}
	if f, ok := top["instance"]; ok {
		d.str(f, "instance", &cfg.Instance)
		if cfg.Instance != "" && !actionNameRE.MatchString(cfg.Instance) {
			d.errorf(f.val, "instance %q: use letters, digits, _ . - (at most 64)", cfg.Instance)
		}
	}
	if f, ok := top["ip"]; ok {
		m := d.mapping(f.val, "ip", "ipv6_prefix")
		if p, ok := m["ipv6_prefix"]; ok {
			d.integer(p, "ip.ipv6_prefix", 1, 128, &cfg.IPv6Prefix)
		}
	}
	if f, ok := top["trusted_devices"]; ok {
		m := d.mapping(f.val, "trusted_devices", "ttl")
		if t, ok := m["ttl"]; ok {
			d.duration(t.val, "trusted_devices.ttl", 0, &cfg.TrustTTL)
		}
	}
	if f, ok := top["store"]; ok {
		m := d.mapping(f.val, "store", "budget", "fleet_size", "key_prefix")
		if b, ok := m["budget"]; ok {
			d.duration(b.val, "store.budget", time.Millisecond, &cfg.Store.Budget)
		}
		if n, ok := m["fleet_size"]; ok {
			d.integer(n, "store.fleet_size", 1, 10000, &cfg.Store.FleetSize)
		}
		if p, ok := m["key_prefix"]; ok {
			d.str(p, "store.key_prefix", &cfg.KeyPrefix)
			if err := checkKeyPrefix(cfg.KeyPrefix); err != nil {
				d.errorf(p.val, "store.key_prefix: %v", err)
			}
		}
	}
	if f, ok := top["alerts"]; ok {
		m := d.mapping(f.val, "alerts", "webhook_url", "timeout")
		if u, ok := m["webhook_url"]; ok {
			d.str(u, "alerts.webhook_url", &cfg.Alerts.WebhookURL)
			if cfg.Alerts.WebhookURL != "" {
				if err := checkURL(cfg.Alerts.WebhookURL, "http", "https"); err != nil {
					d.errorf(u.val, "alerts.webhook_url: %v", err)
				}
			}
		}
		if t, ok := m["timeout"]; ok {
			d.duration(t.val, "alerts.timeout", time.Millisecond, &cfg.Alerts.Timeout)
		}
	}
	if f, ok := top["audit"]; ok {
		cfg.decodeAudit(d, f)
	}
	if f, ok := top["forward_auth"]; ok {
		cfg.decodeForwardAuth(d, f)
	}
}

func (cfg *Config) decodeAudit(d *yamlDecoder, f field) {
	m := d.mapping(f.val, "audit", "pseudonymize", "spool_dir", "retention", "batch_size", "flush_interval")
	if v, ok := m["pseudonymize"]; ok {
		d.boolean(v, "audit.pseudonymize", &cfg.Audit.Pseudonymize)
	}
	if v, ok := m["spool_dir"]; ok {
		d.str(v, "audit.spool_dir", &cfg.Audit.SpoolDir)
	}
	if v, ok := m["retention"]; ok {
		d.duration(v.val, "audit.retention", 24*time.Hour, &cfg.Audit.Retention)
	}
	if v, ok := m["batch_size"]; ok {
		d.integer(v, "audit.batch_size", 1, 100000, &cfg.Audit.BatchSize)
	}
	if v, ok := m["flush_interval"]; ok {
		d.duration(v.val, "audit.flush_interval", time.Millisecond, &cfg.Audit.FlushInterval)
	}
}

func (cfg *Config) decodeForwardAuth(d *yamlDecoder, f field) {
	m := d.mapping(f.val, "forward_auth", "user_header", "device_header", "trusted_proxies")
	for key, dst := range map[string]*string{"user_header": &cfg.ForwardAuth.UserHeader, "device_header": &cfg.ForwardAuth.DeviceHeader} {
		if v, ok := m[key]; ok {
			d.str(v, "forward_auth."+key, dst)
			if !headerNameRE.MatchString(*dst) {
				d.errorf(v.val, "forward_auth.%s: %q is not a valid HTTP header name", key, *dst)
				continue
			}
			*dst = textproto.CanonicalMIMEHeaderKey(*dst)
		}
	}
	if v, ok := m["trusted_proxies"]; ok {
		d.prefixes(v, "forward_auth.trusted_proxies", &cfg.ForwardAuth.TrustedProxies)
	}
}

// headerNameRE is RFC 9110's token.
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// validatePolicy runs abuse's own validation (which also fills defaults and
// normalises list users) and points its complaint at the file's line.
func (cfg *Config) validatePolicy(file string) error {
	err := cfg.Policy.Validate()
	if err == nil {
		return nil
	}
	var pe *abuse.PolicyError
	if !errors.As(err, &pe) || (!cfg.PolicyFromFile && cfg.lines.lists == 0) {
		return fmt.Errorf("%s: policy: %w", file, err)
	}
	line := cfg.lines.line(pe)
	if !cfg.PolicyFromFile && pe.Action != "" {
		return fmt.Errorf("%s: built-in default policy: %w", file, err)
	}
	return &ConfigError{File: file, Line: line, Msg: err.Error()}
}
