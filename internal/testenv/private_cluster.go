package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// PrivateRedisCluster starts a Redis Cluster of three masters (no
// replicas) on free loopback ports, each a private redis-server, and
// returns their addresses once every node reports cluster_state:ok.
// Missing when redis-server or redis-cli is not installed. The nodes are
// killed when the test ends.
func PrivateRedisCluster(tb testing.TB) []string {
	tb.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		Missing(tb, "no redis-cli binary to create a private cluster: %v", err)
	}
	var addrs []string
	for range 3 {
		s := PrivateRedis(tb, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000")
		addrs = append(addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(context.Background()).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				tb.Fatalf("private cluster node %s not ok within 20s: %v %q", a, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
		c.Close()
	}
	return addrs
}

// Sentinel is a private master, one replica and one sentinel watching the
// master under the name Master.
type Sentinel struct {
	Master   string
	Primary  *RedisServer
	Replica  *RedisServer
	Sentinel *RedisServer
}

// PrivateSentinel starts a master, a replica of it and a sentinel
// (down-after 1s, failover timeout 5s, quorum 1) on free loopback ports and
// waits until the sentinel knows the replica. Missing when redis-server is
// not installed. Everything is killed when the test ends.
func PrivateSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	const name = "guardtest"
	primary := PrivateRedis(tb)
	replica := PrivateRedis(tb, "--replicaof", "127.0.0.1", strconv.Itoa(primary.Port()))
	conf := filepath.Join(tb.TempDir(), "sentinel.conf")
	body := "sentinel monitor " + name + " 127.0.0.1 " + strconv.Itoa(primary.Port()) + " 1\n" +
		"sentinel down-after-milliseconds " + name + " 1000\n" +
		"sentinel failover-timeout " + name + " 5000\n"
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatalf("write sentinel config: %v", err)
	}
	sentinel := PrivateRedis(tb, conf, "--sentinel")
	c := redis.NewSentinelClient(&redis.Options{Addr: sentinel.Addr()})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		replicas, err := c.Replicas(context.Background(), name).Result()
		if err == nil && len(replicas) > 0 {
			ok := false
			for _, r := range replicas {
				ok = ok || strings.Contains(r["flags"], "slave") && !strings.Contains(r["flags"], "down")
			}
			if ok {
				break
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sentinel did not see the replica within 20s: %v %v", err, replicas)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return &Sentinel{Master: name, Primary: primary, Replica: replica, Sentinel: sentinel}
}
