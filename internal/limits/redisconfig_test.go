package limits

import (
	"github.com/redis/go-redis/v9"
	"strings"
	"testing"
	"time"
)

// TestNewRedisClientTimeoutsFollowBudget checks that go-redis's own socket
// timeouts never cut a call short of store.budget (its default ReadTimeout
// is 5s) nor an admin call short of DefaultAdminTimeout, and that a URL's
// explicit timeouts are kept.
func TestNewRedisClientTimeoutsFollowBudget(t *testing.T) {
	tests := []struct {
		name                          string
		url                           string
		budget                        time.Duration
		wantRead, wantWrite, wantPool time.Duration
		wantDial                      time.Duration
	}{
		{name: "default budget", url: "redis://127.0.0.1:6379/0", budget: 50 * time.Millisecond,
			wantRead: DefaultAdminTimeout, wantWrite: DefaultAdminTimeout, wantPool: 50 * time.Millisecond, wantDial: time.Second},
		{name: "budget above go-redis read timeout", url: "redis://127.0.0.1:6379/0", budget: 8 * time.Second,
			wantRead: 8 * time.Second, wantWrite: 8 * time.Second, wantPool: 8 * time.Second, wantDial: 8 * time.Second},
		{name: "url timeouts kept", url: "redis://127.0.0.1:6379/0?read_timeout=2s&dial_timeout=3s", budget: 50 * time.Millisecond,
			wantRead: 2 * time.Second, wantWrite: DefaultAdminTimeout, wantPool: 50 * time.Millisecond, wantDial: 3 * time.Second},
		{name: "no budget keeps go-redis defaults", url: "redis://127.0.0.1:6379/0", budget: 0,
			wantRead: 5 * time.Second, wantWrite: 5 * time.Second, wantPool: 6 * time.Second, wantDial: 5 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uc, err := NewRedisClient(RedisConfig{URL: tc.url}, tc.budget)
			if err != nil {
				t.Fatalf("NewRedisClient: %v", err)
			}
			defer uc.Close()
			o := uc.(*redis.Client).Options()
			if !o.ContextTimeoutEnabled {
				t.Errorf("ContextTimeoutEnabled = false, want true")
			}
			// go-redis turns the -1 we set (no retries) into 0 retries;
			// a 0 we set would have become its default, 3.
			if o.MaxRetries != 0 {
				t.Errorf("MaxRetries = %d, want 0 (no retries)", o.MaxRetries)
			}
			for _, c := range []struct {
				what      string
				got, want time.Duration
			}{
				{"ReadTimeout", o.ReadTimeout, tc.wantRead},
				{"WriteTimeout", o.WriteTimeout, tc.wantWrite},
				{"PoolTimeout", o.PoolTimeout, tc.wantPool},
				{"DialTimeout", o.DialTimeout, tc.wantDial},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
				}
			}
		})
	}
}

func TestNewRedisClientDeployments(t *testing.T) {
	cluster, err := NewRedisClient(RedisConfig{Cluster: []string{"127.0.0.1:7000"}}, 50*time.Millisecond)
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	defer cluster.Close()
	// No retries and no redirects (go-redis retries through its redirect
	// loop; a rollback run twice would loosen a limit).
	if o := cluster.(*redis.ClusterClient).Options(); !o.ContextTimeoutEnabled || o.ReadTimeout != DefaultAdminTimeout ||
		o.MaxRedirects != 0 || o.MaxRetries != -1 {
		t.Errorf("cluster options: context timeouts %v, read timeout %v, redirects %d, retries %d",
			o.ContextTimeoutEnabled, o.ReadTimeout, o.MaxRedirects, o.MaxRetries)
	}
	sentinel, err := NewRedisClient(RedisConfig{Sentinel: &SentinelConfig{Master: "guard", Addrs: []string{"127.0.0.1:26379"}}}, 0)
	if err != nil {
		t.Fatalf("sentinel: %v", err)
	}
	sentinel.Close()
	for _, bad := range []RedisConfig{
		{},
		{URL: "redis://x", Cluster: []string{"a:1"}},
		{URL: "redis://x", Sentinel: &SentinelConfig{Master: "m", Addrs: []string{"a:1"}}},
		{Sentinel: &SentinelConfig{Master: "m"}},
		{URL: "http://user:secret@x"},
	} {
		if c, err := NewRedisClient(bad, 0); err == nil {
			c.Close()
			t.Errorf("NewRedisClient(%+v): no error", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("NewRedisClient(%+v): error %q shows the password", bad, err)
		}
	}
}

// TestNewRedisClientURLCredentials: redis.username, password and tls apply
// to a URL's Redis too; credentials the URL already carries must agree.
func TestNewRedisClientURLCredentials(t *testing.T) {
	opts := func(cfg RedisConfig) *redis.Options {
		t.Helper()
		c, err := NewRedisClient(cfg, 0)
		if err != nil {
			t.Fatalf("NewRedisClient(%+v): %v", cfg, err)
		}
		defer c.Close()
		return c.(*redis.Client).Options()
	}
	if o := opts(RedisConfig{URL: "redis://redis.internal:6379/2", Username: "guard", Password: "pw", TLS: true}); o.Username != "guard" ||
		o.Password != "pw" || o.TLSConfig == nil || o.TLSConfig.ServerName != "redis.internal" || o.DB != 2 {
		t.Errorf("URL with redis.username, password, tls: options %+v, want guard/pw over TLS to redis.internal, db 2", o)
	}
	if o := opts(RedisConfig{URL: "redis://guard:pw@a:6379/0", Password: "pw"}); o.Username != "guard" || o.Password != "pw" || o.TLSConfig != nil {
		t.Errorf("URL and redis.password the same: options %+v, want guard/pw without TLS", o)
	}
	if o := opts(RedisConfig{URL: "rediss://a:6380/0"}); o.TLSConfig == nil {
		t.Errorf("rediss:// without redis.tls: no TLS")
	}
	for _, bad := range []RedisConfig{
		{URL: "redis://guard:secret@a:6379/0", Password: "other-secret"},
		{URL: "redis://guard:secret@a:6379/0", Username: "admin"},
		{URL: "unix:///run/redis.sock", TLS: true},
	} {
		if c, err := NewRedisClient(bad, 0); err == nil {
			c.Close()
			t.Errorf("NewRedisClient(%+v): no error", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("NewRedisClient(%+v): error %q shows a password", bad, err)
		}
	}
}

// Guard's clients speak RESP2 unless the URL asks for another protocol.
func TestNewRedisClientProtocol(t *testing.T) {
	for url, want := range map[string]int{"redis://127.0.0.1:6379/0": 2, "redis://127.0.0.1:6379/0?protocol=3": 3} {
		c, err := NewRedisClient(RedisConfig{URL: url}, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.(*redis.Client).Options().Protocol; got != want {
			t.Errorf("%s: protocol %d; want %d", url, got, want)
		}
		c.Close()
	}
	for _, cfg := range []RedisConfig{{Cluster: []string{"127.0.0.1:7000"}}, {Sentinel: &SentinelConfig{Master: "m", Addrs: []string{"127.0.0.1:26379"}}}} {
		c, err := NewRedisClient(cfg, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got int
		switch c := c.(type) {
		case *redis.ClusterClient:
			got = c.Options().Protocol
		case *redis.Client:
			got = c.Options().Protocol
		}
		if got != 2 {
			t.Errorf("%+v: protocol %d; want 2", cfg, got)
		}
		c.Close()
	}
}
