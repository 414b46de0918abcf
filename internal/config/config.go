// Package config reads Guard's YAML config file and environment into the
// typed sections of the packages that use them (abuse.Policy, api.Config,
// limits.RedisConfig, ...). Every problem is reported at once, each as
// "FILE:LINE: message"; a config with any problem is refused as a whole.
//
// The file is decoded declaratively: each section is a struct whose yaml
// tags are the file's keys (a key no struct knows is an error), and the
// policy is validated by abuse.Policy.Validate alone, its problems pointed
// at the lines they came from.
package config

import (
	"fmt"
	"net/http"
	"net/textproto"
	"os"
	"reflect"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/alert"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/notify"
)

// DefaultListen is the address serve listens on by default.
const DefaultListen = "127.0.0.1:8080"

// WeakSecretBytes is the length below which serve warns about key_secret
// and API keys: a short key secret makes the hashes of low-entropy
// identifiers such as phone numbers guessable, a short API key can be
// guessed. Shorter ones are still accepted (API.md's own examples are
// short), loudly.
const WeakSecretBytes = 16

// Config is everything `guard serve` runs with: the YAML file after
// defaults and environment overrides. Zero fields of the package sections
// get their package's documented defaults.
type Config struct {
	// File is the config file's path, "" when Guard runs on defaults.
	File string
	// Listen is the address of the HTTP server (default DefaultListen).
	Listen string
	// Redis is redis_url and the redis section; !Redis.Enabled() means
	// the in-memory store.
	Redis limits.RedisConfig
	// DatabaseURL is the audit trail's Postgres; "" means in memory.
	DatabaseURL string
	// Guard holds the policy and the identifier settings; KeySecret is
	// empty until serve generates one.
	Guard abuse.Config
	// PolicyFromFile reports whether the file's `actions` replaced the
	// default policy.
	PolicyFromFile bool
	// API is the API keys and forward-auth.
	API api.Config
	// Store is the failover wrapper's settings (store.budget, fleet_size;
	// Budget is always set).
	Store limits.FailoverConfig
	// Alerts is the alerts section (Instance is set).
	Alerts alert.Config
	// Writer is the audit writer (batch_size, flush_interval; SpoolDir is
	// always set).
	Writer audit.WriterConfig
	// Postgres is the audit store (retention).
	Postgres audit.PGConfig
	// Notify is the notifications section (SpoolDir is always set).
	Notify notify.Config
	// Env is the environment the config was read with.
	Env Env
	// spools are the spool directories serve would open at start, for
	// Check (spool.go).
	spools []spoolSetting
	// redisWhere is where the Redis deployment was configured (the file
	// and line of its key, or the environment variable), for problems it
	// causes elsewhere (a missing key_secret, Check).
	redisWhere Error
	// Warnings are settings Guard accepts but advises against (an API
	// key shorter than WeakSecretBytes, a policy that departs from
	// published guidance: advice.go); serve logs them at start and
	// `guard config check` prints them.
	Warnings []Warning
}

// Warning is a setting Guard accepts but advises against.
type Warning struct {
	// Where is "FILE:LINE" (or the environment variable's name).
	Where string
	// Msg says what is weak and what to do instead.
	Msg string
}

// KeySecret is the key secret as a string.
func (c *Config) KeySecret() string { return string(c.Guard.KeySecret) }

// Instance names this process in events, alerts and logs.
func (c *Config) Instance() string { return c.Guard.Instance }

// file is the config file's shape. Sections whose shape is a package's
// own type are decoded into it directly.
type file struct {
	Listen      string                  `yaml:"listen"`
	RedisURL    string                  `yaml:"redis_url"`
	Redis       redisSection            `yaml:"redis"`
	DatabaseURL string                  `yaml:"database_url"`
	KeySecret   string                  `yaml:"key_secret"`
	APIKeys     []apiKey                `yaml:"api_keys"`
	Actions     map[string]abuse.Action `yaml:"actions"`
	Lists       struct {
		Allow abuse.List `yaml:"allow"`
		Deny  abuse.List `yaml:"deny"`
	} `yaml:"lists"`
	Instance string `yaml:"instance"`
	IP       struct {
		IPv6Prefix int `yaml:"ipv6_prefix" min:"1" max:"128"`
	} `yaml:"ip"`
	Phone struct {
		DefaultRegion string `yaml:"default_region"`
		PrefixDigits  int    `yaml:"prefix_digits" min:"1" max:"15"`
	} `yaml:"phone"`
	TrustedDevices struct {
		TTL time.Duration `yaml:"ttl" min:"0s"`
	} `yaml:"trusted_devices"`
	Store struct {
		Budget    time.Duration `yaml:"budget" min:"1ms"`
		FleetSize int           `yaml:"fleet_size" min:"1" max:"10000"`
		KeyPrefix string        `yaml:"key_prefix"`
	} `yaml:"store"`
	Alerts struct {
		WebhookURL string        `yaml:"webhook_url"`
		Timeout    time.Duration `yaml:"timeout" min:"1ms"`
	} `yaml:"alerts"`
	Audit struct {
		Pseudonymize  bool          `yaml:"pseudonymize"`
		SpoolDir      string        `yaml:"spool_dir"`
		Retention     time.Duration `yaml:"retention" min:"24h"`
		BatchSize     int           `yaml:"batch_size" min:"1" max:"100000"`
		FlushInterval time.Duration `yaml:"flush_interval" min:"1ms"`
	} `yaml:"audit"`
	ForwardAuth   api.ForwardAuthConfig `yaml:"forward_auth"`
	Notifications notificationsSection  `yaml:"notifications"`
}

// redisSection is the `redis` section (API.md v1.1).
type redisSection struct {
	Cluster  []string `yaml:"cluster"`
	Sentinel *struct {
		Master string   `yaml:"master"`
		Addrs  []string `yaml:"addrs"`
	} `yaml:"sentinel"`
	Username string `yaml:"username"`
	Password string `yaml:"password"`
	TLS      bool   `yaml:"tls"`
}

// apiKey is an api_keys entry: the key in plaintext or as its SHA-256.
type apiKey struct {
	Name      string   `yaml:"name"`
	Scopes    []string `yaml:"scopes"`
	Key       *string  `yaml:"key"`
	KeySHA256 *string  `yaml:"key_sha256"`
}

// Load reads the config file named by path (or GUARD_CONFIG when path is
// "") and applies defaults and the environment; see Parse.
func Load(path string, env Env) (*Config, error) {
	if path == "" {
		path = env.Get(EnvConfig)
	}
	var data []byte
	if path != "" {
		var err error
		data, err = os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("read config: %w", err)
		}
	}
	return Parse(path, data, env)
}

// Parse is Load on the file's contents (nil data: no file). The
// environment wins over the file.
func Parse(path string, data []byte, env Env) (*Config, error) {
	name := path
	if name == "" {
		name = "(defaults)"
	}
	var f file
	d := newDecoder(name)
	if len(strings.TrimSpace(string(data))) > 0 {
		doc, err := parseYAML(name, data)
		if err != nil {
			return nil, err
		}
		if doc.Kind == yaml.DocumentNode && len(doc.Content) > 0 {
			d.decode(doc.Content[0], "config", reflect.ValueOf(&f).Elem(), bounds{})
		}
	}
	cfg := &Config{File: path, Env: env}
	d.fill(cfg, &f)
	d.applyEnv(cfg, env)
	d.notificationSecret(cfg, env)
	if !cfg.PolicyFromFile {
		cfg.Guard.Policy.Actions = abuse.DefaultPolicy().Actions
	}
	// The policy is validated even when the file had other problems, so
	// that all of them come at once; what the decoder already reported
	// on a line is not reported again in the policy's terms.
	d.validatePolicy(cfg)
	if err := d.err(); err != nil {
		return nil, err
	}
	d.advise(cfg)
	d.warnSecrets(cfg)
	if cfg.Guard.Instance == "" {
		host, err := os.Hostname()
		if err != nil || host == "" || !instanceRE.MatchString(host) {
			host = "guard"
		}
		cfg.Guard.Instance = host
	}
	cfg.Alerts.Instance = cfg.Guard.Instance
	if cfg.Writer.SpoolDir == "" {
		cfg.Writer.SpoolDir = env.DefaultSpoolDir(os.TempDir())
	}
	notificationSpool(cfg)
	d.spoolSettings(cfg, env)
	return cfg, nil
}

// fill moves the decoded file into cfg, checking what the types alone do
// not (URLs, names, headers), each at its line.
func (d *decoder) fill(cfg *Config, f *file) {
	cfg.Listen = DefaultListen
	if d.has("listen") {
		cfg.Listen = f.Listen
		if err := checkListen(f.Listen); err != nil {
			d.errorAt("listen", "listen: %v", err)
		}
	}
	cfg.Redis = limits.RedisConfig{
		URL: f.RedisURL, Cluster: f.Redis.Cluster,
		Username: f.Redis.Username, Password: f.Redis.Password, TLS: f.Redis.TLS,
	}
	// An empty URL is no URL (redis_url: "" in a template, the deployment
	// given by GUARD_REDIS_URL or nothing).
	hasRedisURL := d.has("redis_url") && f.RedisURL != ""
	if hasRedisURL {
		if err := checkURL(f.RedisURL, "redis", "rediss", "unix"); err != nil {
			d.errorAt("redis_url", "redis_url: %v", err)
		}
	}
	for i, a := range f.Redis.Cluster {
		if err := checkAddr(a); err != nil {
			d.errorAt(fmt.Sprintf("redis.cluster[%d]", i), "redis.cluster[%d]: %v", i, err)
		}
	}
	if d.has("redis.cluster") && len(f.Redis.Cluster) == 0 {
		d.errorAt("redis.cluster", "redis.cluster needs at least one node (host:port)")
	}
	if s := f.Redis.Sentinel; s != nil {
		cfg.Redis.Sentinel = &limits.SentinelConfig{Master: s.Master, Addrs: s.Addrs}
		if s.Master == "" && !d.bad["redis.sentinel.master"] {
			d.errorAt("redis.sentinel", "redis.sentinel: master is required (the name the sentinels know it by)")
		}
		if len(s.Addrs) == 0 && !d.bad["redis.sentinel.addrs"] {
			d.errorAt("redis.sentinel", "redis.sentinel: addrs is required (the sentinels' host:port)")
		}
		for i, a := range s.Addrs {
			if err := checkAddr(a); err != nil {
				d.errorAt(fmt.Sprintf("redis.sentinel.addrs[%d]", i), "redis.sentinel.addrs[%d]: %v", i, err)
			}
		}
		if d.has("redis.cluster") {
			// Both keys are there, whatever their values.
			d.report(d.lines["redis.sentinel"], "redis: give cluster or sentinel, not both")
		}
	}
	if hasRedisURL && (d.has("redis.cluster") || d.has("redis.sentinel")) {
		d.errorAt("redis_url", "redis_url and redis.cluster or redis.sentinel: give one Redis deployment, not both")
	}
	// redis.username, password and tls apply to a redis_url too
	// (limits.NewRedisClient); what contradicts the URL is refused once the
	// environment's URL is known (applyEnv).
	cfg.DatabaseURL = f.DatabaseURL
	if d.has("database_url") && f.DatabaseURL != "" {
		if err := checkURL(f.DatabaseURL, "postgres", "postgresql"); err != nil {
			d.errorAt("database_url", "database_url: %v", err)
		}
	}
	if d.has("key_secret") {
		cfg.Guard.KeySecret = []byte(f.KeySecret)
		if f.KeySecret == "" {
			d.errorAt("key_secret", "key_secret: must not be empty (e.g. openssl rand -hex 32)")
		}
	}
	cfg.API.Keys = d.apiKeys(f.APIKeys)
	for i, k := range f.APIKeys {
		// Only a plaintext key has a length; a key_sha256 is the
		// operator's to judge.
		if k.Key != nil && *k.Key != "" && len(*k.Key) < WeakSecretBytes {
			cfg.Warnings = append(cfg.Warnings, Warning{
				Where: fmt.Sprintf("%s:%d", d.file, d.lines[fmt.Sprintf("api_keys[%d].key", i)]),
				Msg: fmt.Sprintf("SHORT API KEY: api key %s is %d bytes, shorter than %d: it could be guessed; use e.g. openssl rand -hex 32",
					quote(k.Name), len(*k.Key), WeakSecretBytes),
			})
		}
	}
	cfg.Guard.Policy = abuse.Policy{Actions: f.Actions, Allow: f.Lists.Allow, Deny: f.Lists.Deny}
	cfg.PolicyFromFile = d.has("actions")
	cfg.Guard.Instance = f.Instance
	if d.has("instance") && f.Instance != "" && !instanceRE.MatchString(f.Instance) {
		d.errorAt("instance", "instance %s: use letters, digits, _ . - (at most 64)", quote(f.Instance))
	}
	cfg.Guard.IPv6Prefix = abuse.DefaultIPv6Prefix
	if d.has("ip.ipv6_prefix") {
		cfg.Guard.IPv6Prefix = f.IP.IPv6Prefix
	}
	cfg.Guard.Phone = abuse.PhoneConfig{DefaultRegion: f.Phone.DefaultRegion, PrefixDigits: abuse.DefaultPrefixDigits}
	if d.has("phone.prefix_digits") {
		cfg.Guard.Phone.PrefixDigits = f.Phone.PrefixDigits
	}
	if d.has("phone.default_region") && f.Phone.DefaultRegion != "" {
		r, ok := abuse.NormalizeRegion(f.Phone.DefaultRegion)
		if !ok || r == abuse.NonGeoRegion {
			d.errorAt("phone.default_region", "phone.default_region %s is not an ISO 3166 region with a numbering plan (e.g. GB, US, DE), or \"\" for international numbers only", quote(f.Phone.DefaultRegion))
		}
		cfg.Guard.Phone.DefaultRegion = r
	}
	// The file's 0 disables trust; abuse's 0 is its default.
	cfg.Guard.TrustTTL = f.TrustedDevices.TTL
	if !d.has("trusted_devices.ttl") {
		cfg.Guard.TrustTTL = abuse.DefaultTrustTTL
	} else if cfg.Guard.TrustTTL == 0 {
		cfg.Guard.TrustTTL = -1
	} else if cfg.Guard.TrustTTL > abuse.MaxDuration {
		d.errorAt("trusted_devices.ttl", "trusted_devices.ttl must be at most %s, not %s",
			abuse.MaxDurationText, Duration(cfg.Guard.TrustTTL))
	}
	cfg.Guard.KeyPrefix = abuse.DefaultKeyPrefix
	if d.has("store.key_prefix") {
		cfg.Guard.KeyPrefix = f.Store.KeyPrefix
		if err := checkKeyPrefix(f.Store.KeyPrefix); err != nil {
			d.errorAt("store.key_prefix", "store.key_prefix: %v", err)
		}
	}
	cfg.Guard.Pseudonymize = f.Audit.Pseudonymize
	cfg.Store = limits.FailoverConfig{Budget: f.Store.Budget, FleetSize: f.Store.FleetSize}
	if cfg.Store.Budget == 0 {
		cfg.Store.Budget = limits.DefaultBudget
	}
	cfg.Alerts = alert.Config{WebhookURL: f.Alerts.WebhookURL, Timeout: f.Alerts.Timeout}
	if f.Alerts.WebhookURL != "" {
		if err := checkURL(f.Alerts.WebhookURL, "http", "https"); err != nil {
			d.errorAt("alerts.webhook_url", "alerts.webhook_url: %v", err)
		}
	}
	cfg.Writer = audit.WriterConfig{BatchSize: f.Audit.BatchSize, FlushInterval: f.Audit.FlushInterval, SpoolDir: f.Audit.SpoolDir}
	cfg.Postgres = audit.PGConfig{Retention: f.Audit.Retention}
	d.notifications(cfg, &f.Notifications)
	cfg.API.ForwardAuth = f.ForwardAuth
	fa := &cfg.API.ForwardAuth
	for key, h := range map[string]*string{"user_header": &fa.UserHeader, "device_header": &fa.DeviceHeader, "phone_header": &fa.PhoneHeader} {
		if !d.has("forward_auth." + key) {
			continue
		}
		if !headerNameRE.MatchString(*h) {
			d.errorAt("forward_auth."+key, "forward_auth.%s: %s is not a valid HTTP header name", key, quote(*h))
			continue
		}
		*h = textproto.CanonicalMIMEHeaderKey(*h)
		if *h == "Authorization" {
			// Its value would become an identifier: the API key itself in
			// the audit trail, which keys must never reach (API.md).
			d.errorAt("forward_auth."+key, "forward_auth.%s: Authorization carries Guard's API key, which must not become an identifier", key)
		}
		if *h == "Host" || *h == "Transfer-Encoding" {
			// Go's HTTP server moves Host into Request.Host and removes
			// Transfer-Encoding from the headers: the identifier would
			// never be read, every forward-auth request anonymous.
			d.errorAt("forward_auth."+key, "forward_auth.%s: %s never reaches Guard as a header (the HTTP server consumes it); name the header the proxy sets", key, *h)
		}
	}
	switch {
	case fa.AllowStatus == 0 && !d.has("forward_auth.allow_status"):
		fa.AllowStatus = http.StatusNoContent
	case fa.AllowStatus == http.StatusNoContent, fa.AllowStatus == http.StatusOK:
	default:
		d.errorAt("forward_auth.allow_status", "forward_auth.allow_status must be 204 or 200, not %d", fa.AllowStatus)
	}
}

// applyEnv applies the GUARD_* overrides; they win over the file.
func (d *decoder) applyEnv(cfg *Config, env Env) {
	envErr := func(name string, err error) {
		d.errs = append(d.errs, &Error{File: name, Msg: err.Error()})
	}
	if v := env.Get(EnvListen); v != "" {
		cfg.Listen = v
		if err := checkListen(v); err != nil {
			envErr(EnvListen, err)
		}
	}
	if v := env.Get(EnvRedisURL); v != "" {
		cfg.Redis.URL = v
		if err := checkURL(v, "redis", "rediss", "unix"); err != nil {
			envErr(EnvRedisURL, err)
		}
		// As with redis_url: the key is there, whatever its value; the
		// file's half of the clash is reported at its line.
		for _, k := range []string{"redis.cluster", "redis.sentinel"} {
			if d.has(k) {
				d.report(d.lines[k], "%s and %s: give one Redis deployment, not both (%s overrides redis_url only)", k, EnvRedisURL, EnvRedisURL)
				break
			}
		}
	}
	cfg.redisWhere = Error{File: d.file}
	if env.Get(EnvRedisURL) != "" {
		cfg.redisWhere = Error{File: EnvRedisURL}
	} else {
		for _, k := range []string{"redis_url", "redis.cluster", "redis.sentinel"} {
			if d.lines[k] > 0 && (k != "redis_url" || cfg.Redis.URL != "") {
				cfg.redisWhere.Line = d.lines[k]
				break
			}
		}
	}
	// redis.username, password and tls apply to the URL's Redis too: what
	// contradicts it (other credentials, TLS over a unix socket) is refused
	// here as serve would refuse it.
	if checkURL(cfg.Redis.URL, "redis", "rediss", "unix") != nil {
		// reported already (file or environment); nothing more to say
	} else if err := cfg.Redis.CheckURL(); err != nil {
		if env.Get(EnvRedisURL) != "" {
			envErr(EnvRedisURL, err)
		} else {
			d.errorAt("redis_url", "redis_url: %v", err)
		}
	}
	// redis.username, password and tls apply to whichever Redis is
	// configured, a GUARD_REDIS_URL included; set without any they would
	// be silently unused. Their zero values (the contract's defaults) are
	// fine anywhere.
	if !cfg.Redis.Enabled() {
		for _, k := range []struct {
			name string
			set  bool
		}{{"username", cfg.Redis.Username != ""}, {"password", cfg.Redis.Password != ""}, {"tls", cfg.Redis.TLS}} {
			if k.set {
				d.errorAt("redis."+k.name, "redis.%s: no Redis is configured to apply it to (redis_url, GUARD_REDIS_URL, redis.cluster or redis.sentinel)", k.name)
			}
		}
	}
	if v := env.Get(EnvDatabaseURL); v != "" {
		cfg.DatabaseURL = v
		if err := checkURL(v, "postgres", "postgresql"); err != nil {
			envErr(EnvDatabaseURL, err)
		}
	}
	if v := env.Get(EnvKeySecret); v != "" {
		cfg.Guard.KeySecret = []byte(v)
	}
	if v := env.Get(EnvKeyPrefix); v != "" {
		cfg.Guard.KeyPrefix = v
		if err := checkKeyPrefix(v); err != nil {
			envErr(EnvKeyPrefix, err)
		}
	}
	if v := env.Get(EnvSpoolDir); v != "" {
		cfg.Writer.SpoolDir = v
	}
	if v := env.Get(EnvInstance); v != "" {
		cfg.Guard.Instance = v
		if !instanceRE.MatchString(v) {
			envErr(EnvInstance, fmt.Errorf("%s: use letters, digits, _ . - (at most 64)", quote(v)))
		}
	}
}

// SetListen overrides the listen address (serve's --listen), which wins
// over GUARD_LISTEN and the file.
func (c *Config) SetListen(addr string) error {
	if err := checkListen(addr); err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	c.Listen = addr
	return nil
}
