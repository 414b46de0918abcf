package limits

import "time"

// DefaultKeyPrefix starts every Redis key Guard writes unless
// store.key_prefix says otherwise; the "v1" versions the key layout.
const DefaultKeyPrefix = "guard:v1:"

// DefaultBudget bounds every call to Redis when FailoverConfig.Budget is
// unset.
const DefaultBudget = 50 * time.Millisecond

// RedisConfig says which Redis deployment Guard uses: one server (URL), a
// Redis Cluster (Cluster, the seed nodes) or Redis Sentinel (Sentinel). At
// most one of URL, Cluster and Sentinel is set (internal/config refuses
// the rest); none means no Redis (the in-memory store).
type RedisConfig struct {
	// URL is a redis://, rediss:// or unix:// URL of one server.
	URL string
	// Cluster holds the host:port of some nodes of a Redis Cluster.
	Cluster []string
	// Sentinel names the master and the sentinels that know it.
	Sentinel *SentinelConfig
	// Username and Password authenticate to the Cluster or Sentinel nodes
	// (a URL carries its own).
	Username, Password string
	// TLS connects to the Cluster or Sentinel nodes over TLS (a URL says
	// so with rediss://).
	TLS bool
}

// SentinelConfig is a Redis Sentinel deployment.
type SentinelConfig struct {
	// Master is the name the sentinels know the master by.
	Master string
	// Addrs are the sentinels' host:port.
	Addrs []string
}

// Enabled reports whether any Redis is configured.
func (c RedisConfig) Enabled() bool {
	return c.URL != "" || len(c.Cluster) > 0 || c.Sentinel != nil
}
