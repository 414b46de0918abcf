package limits

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultBudget bounds every call to Redis when FailoverConfig.Budget is
// unset.
const DefaultBudget = 50 * time.Millisecond

// RedisConfig says how to reach Redis: one node by URL, or a Sentinel
// group, or a Cluster. Exactly one of URL, Cluster and Sentinel is set.
type RedisConfig struct {
	// URL is redis://[user:password@]host:port/db, or rediss:// for TLS.
	URL string
	// Cluster lists seed nodes (host:port) of a Redis Cluster.
	Cluster []string
	// Sentinel names a master and the sentinels that watch it.
	Sentinel *SentinelConfig
	// Username and Password authenticate with the Redis nodes: Cluster
	// nodes, the master of a Sentinel group, or the one Redis of URL, where
	// they are the URL's own unless it carries different ones (an error).
	Username, Password string
	// TLS connects to the Redis nodes over TLS (for URL what rediss://
	// says; not with a unix socket).
	TLS bool
}

// SentinelConfig is a Sentinel-managed master.
type SentinelConfig struct {
	// Master is the master's name in the sentinels' configuration.
	Master string
	// Addrs are the sentinels (host:port).
	Addrs []string
}

// Enabled reports whether any Redis is configured.
func (c RedisConfig) Enabled() bool {
	return c.URL != "" || len(c.Cluster) > 0 || c.Sentinel != nil
}

// String describes the deployment for logs, without passwords.
func (c RedisConfig) String() string {
	switch {
	case len(c.Cluster) > 0:
		return "cluster " + strings.Join(c.Cluster, ",")
	case c.Sentinel != nil:
		return "sentinel " + c.Sentinel.Master + "@" + strings.Join(c.Sentinel.Addrs, ",")
	case c.URL != "":
		if u, err := url.Parse(c.URL); err == nil {
			return u.Redacted()
		}
		return "(unparseable URL)"
	}
	return "none"
}

// minDialTimeout bounds a background dial to Redis from below; short, so a
// blackholed Redis does not hold go-redis's dial slots (5 attempts each)
// for long after it returns.
const minDialTimeout = time.Second

// NewRedisClient builds the go-redis client for cfg (a *redis.Client, a
// Sentinel failover client or a *redis.ClusterClient) whose calls honour
// their context deadline: the failover budget for decisions, the admin
// timeout for listings, locks and unlocks. A budget > 0 also becomes the
// pool timeout the URL leaves unset, and the socket read and write
// timeouts it leaves unset are the longer of the budget and
// DefaultAdminTimeout: go-redis takes the earlier of the context deadline
// and now+ReadTimeout, so a socket timeout of the budget would cut every
// admin call short at the budget (a listing of a Redis answering in 100ms
// failed at 50ms), and with go-redis's default (5s) a budget above 5s would
// be cut short. Dials run in go-redis's background, not within
// a call, so they get at least a second: a handshake slower than the
// budget still completes and pools its connection. Budget 0 keeps
// go-redis's defaults. Commands are never retried: a retried script may
// run a decision twice (counting more, never less) and the budget is too
// short for retries to help.
func NewRedisClient(cfg RedisConfig, budget time.Duration) (redis.UniversalClient, error) {
	timeouts := func(read, write, pool, dial *time.Duration) {
		if budget <= 0 {
			return
		}
		for _, d := range []*time.Duration{read, write} {
			if *d == 0 {
				*d = max(budget, DefaultAdminTimeout)
			}
		}
		if *pool == 0 {
			*pool = budget
		}
		if *dial == 0 {
			*dial = max(budget, minDialTimeout)
		}
	}
	var tlsConfig *tls.Config
	if cfg.TLS {
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case len(cfg.Cluster) > 0 && (cfg.URL != "" || cfg.Sentinel != nil),
		cfg.URL != "" && cfg.Sentinel != nil:
		return nil, errors.New("redis: set one of url, cluster and sentinel")
	case len(cfg.Cluster) > 0:
		// No redirects followed either: go-redis retries a command on
		// network errors through its redirect loop, and a rollback run
		// twice would take back another decision's entry (looser). After a
		// MOVED the client reloads its slot map, so only the decisions
		// during a resharding step fail over to the fallback.
		o := &redis.ClusterOptions{
			Addrs: cfg.Cluster, Username: cfg.Username, Password: cfg.Password, TLSConfig: tlsConfig,
			ContextTimeoutEnabled: true, MaxRetries: -1, MaxRedirects: -1, Protocol: resp,
		}
		timeouts(&o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.DialTimeout)
		return redis.NewClusterClient(o), nil
	case cfg.Sentinel != nil:
		if cfg.Sentinel.Master == "" || len(cfg.Sentinel.Addrs) == 0 {
			return nil, errors.New("redis sentinel: master and addrs are required")
		}
		o := &redis.FailoverOptions{
			MasterName: cfg.Sentinel.Master, SentinelAddrs: cfg.Sentinel.Addrs,
			Username: cfg.Username, Password: cfg.Password, TLSConfig: tlsConfig,
			ContextTimeoutEnabled: true, MaxRetries: -1, Protocol: resp,
		}
		timeouts(&o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.DialTimeout)
		return redis.NewFailoverClient(o), nil
	case cfg.URL != "":
		o, err := urlOptions(cfg)
		if err != nil {
			return nil, err
		}
		o.ContextTimeoutEnabled = true
		o.MaxRetries = -1
		if o.Protocol == 0 { // unless the URL says ?protocol=
			o.Protocol = resp
		}
		timeouts(&o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout, &o.DialTimeout)
		return redis.NewClient(o), nil
	}
	return nil, errors.New("redis: nothing configured")
}

// resp is the protocol Guard's clients speak: RESP2. Guard uses nothing of
// RESP3 (no client-side caching, no push messages), and on RESP3 go-redis
// looks for pending push notifications before every reply it reads, 1–1.5%
// of Guard's CPU under the bench's load (docs/performance.md).
const resp = 2

// CheckURL reports what NewRedisClient would refuse in cfg's URL: one it
// cannot parse, or credentials and TLS that contradict the URL (see
// urlCredentials). nil without a URL. Config validation calls it, so that
// a config check refuses what serve would.
func (c RedisConfig) CheckURL() error {
	if c.URL == "" {
		return nil
	}
	_, err := urlOptions(c)
	return err
}

// urlOptions are the go-redis options of cfg's URL with its Username,
// Password and TLS added (urlCredentials).
func urlOptions(cfg RedisConfig) (*redis.Options, error) {
	o, err := redis.ParseURL(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("redis url: %s", redactIn(err.Error(), cfg.URL))
	}
	if err := urlCredentials(o, cfg); err != nil {
		return nil, err
	}
	return o, nil
}

// urlCredentials adds cfg's Username, Password and TLS to the options of
// its URL: a value the URL lacks is taken, one it has must be the same
// (given twice and different, which one was meant is unknown).
func urlCredentials(o *redis.Options, cfg RedisConfig) error {
	for _, f := range []struct {
		name      string
		url, conf string
		set       *string
	}{{"username", o.Username, cfg.Username, &o.Username}, {"password", o.Password, cfg.Password, &o.Password}} {
		switch {
		case f.conf == "":
		case f.url != "" && f.url != f.conf:
			return fmt.Errorf("redis: redis.%s and the %s in the Redis URL differ: give it once", f.name, f.name)
		default:
			*f.set = f.conf
		}
	}
	if cfg.TLS && o.TLSConfig == nil {
		if o.Network == "unix" {
			return errors.New("redis: redis.tls with a unix socket URL: a unix socket has no TLS")
		}
		host, _, err := net.SplitHostPort(o.Addr)
		if err != nil {
			host = o.Addr
		}
		o.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
	}
	return nil
}

// redactIn removes a URL (and its password) from a message that repeats it.
func redactIn(msg, raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return strings.ReplaceAll(msg, raw, "(redis url)")
	}
	msg = strings.ReplaceAll(msg, raw, u.Redacted())
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "xxxxx")
	}
	return msg
}

// UseLogger routes go-redis's own messages (dial retries while Redis is
// down, one per probe) into logger at DEBUG, so a JSON log stays JSON and
// an outage is not a flood: Guard logs it once, at ERROR, itself.
// go-redis's logger is process-wide (the last caller wins, which in a real
// process is the one serve).
func UseLogger(logger *slog.Logger) { redis.SetLogger(redisLog{logger}) }

type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", "detail", fmt.Sprintf(format, v...))
}
