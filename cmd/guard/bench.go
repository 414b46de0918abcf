package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

const benchHelp = `
Measures decisions per second and their latency against a real Redis, in one
run, so the numbers compare like with like on the same machine:

  raw-ping   PING: the floor of one Redis round trip
  raw-multi  MULTI/EXEC doing a sliding-window check by hand on two keys
             (ZREMRANGEBYSCORE, ZCARD, ZADD, PEXPIRE each): what one decision
             costs in plain Redis commands, without Lua or atomic all-or-nothing
  store      limits.RedisStore.Check with two rules (ip and user, as login):
             one EVALSHA per decision
  http       POST /v1/check through the whole service (auth, policy, hashing,
             Redis, audit to memory) on an in-process server on 127.0.0.1,
             driven through the Go SDK

Each mode runs for --duration with --concurrency workers; identities are
spread over --keys distinct users and IPs. Keys go under a random prefix and
are deleted at the end; nothing else in Redis is touched. The ratio column
is decisions/s relative to raw-multi. "degraded" counts HTTP decisions that
the local fallback answered because Redis missed the 50ms budget (a loaded
machine); they are left out of the rate and latencies.`

type benchFlags struct {
	redisURL    string
	duration    time.Duration
	concurrency int
	keys        int
	modes       string
}

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "[flags]", benchHelp)
	var f benchFlags
	fs.StringVar(&f.redisURL, "redis-url", firstNonEmpty(e.getenv(envRedisURL), "redis://127.0.0.1:6379/0"), "Redis to measure against (default: GUARD_REDIS_URL or the local one)")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "how long each mode runs")
	fs.IntVar(&f.concurrency, "concurrency", 16, "concurrent workers per mode")
	fs.IntVar(&f.keys, "keys", 10000, "distinct users and IPs the workers cycle through")
	fs.StringVar(&f.modes, "modes", "raw-ping,raw-multi,store,http", "comma-separated modes to run")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if f.duration <= 0 || f.concurrency < 1 || f.keys < 1 {
		return errors.New("bench: --duration, --concurrency and --keys must be positive")
	}
	modes := strings.Split(f.modes, ",")
	for _, m := range modes {
		if !slices.Contains([]string{"raw-ping", "raw-multi", "store", "http"}, m) {
			return fmt.Errorf("bench: unknown mode %q", m)
		}
	}
	b, err := newBench(ctx, f)
	if err != nil {
		return err
	}
	b.log = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	limits.UseLogger(b.log)
	defer b.cleanup()
	fmt.Fprintf(e.stdout, "guard bench: %s per mode, %d workers, %d keys, Redis %s\n\n",
		f.duration, f.concurrency, f.keys, redactURL(f.redisURL))
	var results []benchResult
	for _, m := range modes {
		op, closeOp, err := b.op(ctx, m)
		if err != nil {
			return fmt.Errorf("bench %s: %w", m, err)
		}
		r, err := measure(ctx, m, f.duration, f.concurrency, op)
		closeOp()
		if err != nil {
			return fmt.Errorf("bench %s: %w", m, err)
		}
		results = append(results, r)
	}
	return writeBench(e.stdout, results)
}

// bench holds what the modes share: a Redis client and a key prefix.
type bench struct {
	log    *slog.Logger // the in-process server's, errors only
	f      benchFlags
	client *redis.Client
	prefix string
}

func newBench(ctx context.Context, f benchFlags) (*bench, error) {
	uc, err := limits.NewRedisClient(limits.RedisConfig{URL: f.redisURL}, 0)
	if err != nil {
		return nil, err
	}
	client := uc.(*redis.Client)
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := client.Ping(pctx).Err(); err != nil {
		_ = client.Close()
		return nil, fmt.Errorf("bench: Redis at %s does not answer: %w", redactURL(f.redisURL), err)
	}
	return &bench{f: f, client: client, prefix: "guardbench:" + randomSuffix() + ":"}, nil
}

// cleanup deletes every key the run made and closes the client.
func (b *bench) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := b.client.Scan(ctx, 0, b.prefix+"*", 1000).Iterator()
	var batch []string
	for iter.Next(ctx) {
		batch = append(batch, iter.Val())
		if len(batch) == 500 {
			b.client.Del(ctx, batch...)
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		b.client.Del(ctx, batch...)
	}
	_ = b.client.Close()
}

// op returns the operation one worker repeats for a mode (i is the
// worker's iteration counter, w its index) and a function releasing what
// the mode built.
func (b *bench) op(ctx context.Context, mode string) (func(ctx context.Context, w, i int) error, func(), error) {
	noop := func() {}
	key := func(kind string, w, i int) string {
		return b.prefix + kind + ":" + strconv.Itoa((w*7919+i)%b.f.keys)
	}
	switch mode {
	case "raw-ping":
		return func(ctx context.Context, _, _ int) error { return b.client.Ping(ctx).Err() }, noop, nil
	case "raw-multi":
		const window = 60_000
		return func(ctx context.Context, w, i int) error {
			now := time.Now().UnixMilli()
			member := strconv.FormatInt(now, 10) + ":" + strconv.Itoa(w) + ":" + strconv.Itoa(i)
			_, err := b.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range []string{key("rawip", w, i), key("rawuser", w, i)} {
					p.ZRemRangeByScore(ctx, k, "-inf", strconv.FormatInt(now-window, 10))
					p.ZCard(ctx, k)
					p.ZAdd(ctx, k, redis.Z{Score: float64(now), Member: member})
					p.PExpire(ctx, k, window*time.Millisecond)
				}
				return nil
			})
			return err
		}, noop, nil
	case "store":
		client, err := limits.NewRedisClient(limits.RedisConfig{URL: b.f.redisURL}, 0)
		if err != nil {
			return nil, nil, err
		}
		store := limits.NewRedis(client, limits.RedisStoreConfig{})
		return func(ctx context.Context, w, i int) error {
			// Limits high enough that the bench measures allowed
			// decisions (which write) rather than cheap denials.
			_, err := store.Check(ctx, &limits.CheckRequest{
				Rules: []limits.Rule{
					{Key: key("log:login/ip", w, i), Limit: 1_000_000, Window: time.Minute},
					{Key: key("log:login/user", w, i), Limit: 1_000_000, Window: 15 * time.Minute},
				},
				Cost:  1,
				Nonce: strconv.Itoa(w) + "-" + strconv.Itoa(i),
			})
			return err
		}, func() { _ = store.Close() }, nil
	case "http":
		return b.httpOp(ctx)
	}
	return nil, nil, fmt.Errorf("unknown mode %q", mode)
}

// httpOp starts the whole service in process, as serve wires it, on a
// loopback port, with a policy whose limits the bench does not reach.
func (b *bench) httpOp(ctx context.Context) (func(ctx context.Context, w, i int) error, func(), error) {
	const key = "k-bench-0000000001"
	cfg, err := parseConfig("(bench)", []byte(`
api_keys: [{name: bench, scopes: [check], key: "`+key+`"}]
actions:
  login:
    limits:
      - {dimension: ip, limit: 1000000, window: 1m}
      - {dimension: user, limit: 1000000, window: 15m}
`), func(string) string { return "" })
	if err != nil {
		return nil, nil, err
	}
	cfg.RedisURL = b.f.redisURL
	cfg.KeyPrefix = b.prefix
	cfg.KeySecret = "bench-secret-" + randomSuffix()
	cfg.Instance = "bench"
	a, err := newApp(ctx, b.log, cfg, appOptions{})
	if err != nil {
		return nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = a.close(context.Background())
		return nil, nil, err
	}
	srv := &http.Server{Handler: a.handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	transport := &http.Transport{MaxIdleConns: b.f.concurrency * 2, MaxIdleConnsPerHost: b.f.concurrency * 2}
	client := sdk.New("http://"+ln.Addr().String(), key, sdk.WithHTTPClient(&http.Client{Transport: transport, Timeout: 10 * time.Second}))
	closeFn := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		transport.CloseIdleConnections()
		_ = a.close(sctx)
	}
	op := func(ctx context.Context, w, i int) error {
		n := (w*7919 + i) % b.f.keys
		user := "user" + strconv.Itoa(n) + "@example.com"
		ip := "10." + strconv.Itoa(n>>16&255) + "." + strconv.Itoa(n>>8&255) + "." + strconv.Itoa(n&255)
		res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", User: &user, IP: &ip})
		if err == nil && res.Degraded {
			return errDegraded
		}
		return err
	}
	// Warm up: the first calls load the Lua script and open connections,
	// which on a loaded machine can miss the budget and open the breaker;
	// measure only once Redis answers within it.
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		err := op(ctx, 0, i)
		if err == nil {
			break
		}
		if !errors.Is(err, errDegraded) || time.Now().After(deadline) {
			closeFn()
			return nil, nil, fmt.Errorf("warm-up: %w", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return op, closeFn, nil
}

// errDegraded marks an HTTP decision that came from the local fallback
// because Redis did not answer within the budget: counted apart, not as a
// Redis-backed decision.
var errDegraded = errors.New("degraded decision")

// benchResult is one mode's measurement.
type benchResult struct {
	mode     string
	ops      int
	errors   int
	degraded int
	elapsed  time.Duration
	p50, p99 time.Duration
}

func (r benchResult) rate() float64 { return float64(r.ops) / r.elapsed.Seconds() }

// measure runs op from concurrency workers for d and collects latencies.
func measure(ctx context.Context, mode string, d time.Duration, concurrency int, op func(ctx context.Context, w, i int) error) (benchResult, error) {
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		degraded  int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	for w := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 4096)
			var nerr, ndeg int
			var ferr error
			for i := 0; runCtx.Err() == nil; i++ {
				t0 := time.Now()
				err := op(ctx, w, i)
				if errors.Is(err, errDegraded) {
					ndeg++
					continue
				}
				if err != nil {
					nerr++
					if ferr == nil {
						ferr = err
					}
					continue
				}
				local = append(local, time.Since(t0))
			}
			mu.Lock()
			latencies = append(latencies, local...)
			errs += nerr
			degraded += ndeg
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return benchResult{}, ctx.Err()
	}
	if len(latencies) == 0 && degraded == 0 {
		return benchResult{}, fmt.Errorf("no operation succeeded: %v", firstErr)
	}
	if len(latencies) == 0 {
		// Every answer came from the fallback: report that, not a rate.
		return benchResult{mode: mode, degraded: degraded, elapsed: elapsed}, nil
	}
	if errs > len(latencies)/100 {
		return benchResult{}, fmt.Errorf("%d of %d operations failed, first: %v", errs, errs+len(latencies), firstErr)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	return benchResult{mode: mode, ops: len(latencies), errors: errs, degraded: degraded, elapsed: elapsed, p50: pct(0.50), p99: pct(0.99)}, nil
}

func writeBench(w io.Writer, results []benchResult) error {
	var base float64
	for _, r := range results {
		if r.mode == "raw-multi" {
			base = r.rate()
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdecisions/s\tp50\tp99\tvs raw-multi\terrors\tdegraded\t")
	for _, r := range results {
		ratio := "-"
		if base > 0 {
			ratio = fmt.Sprintf("%.2fx", r.rate()/base)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%d\t%d\t\n", r.mode, r.rate(), fmtLatency(r.p50), fmtLatency(r.p99), ratio, r.errors, r.degraded)
	}
	return tw.Flush()
}

func fmtLatency(d time.Duration) string {
	return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond))
}

// randomSuffix is 12 random hex digits, for key prefixes and secrets.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
