package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/bench"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/limits"
)

const benchHelp = `
Measures decisions per second and their latency against a real Redis, in one
run, so the numbers compare like with like on the same machine:

  check  Guard.Check in process, as serve wires it (policy, hashing, the
         failover store, one FCALL per decision, audit to memory),
         with two rules (ip and user, as login)
  http   POST /v1/check through the whole service (auth, JSON, the same
         Guard.Check) on an in-process server on 127.0.0.1, driven through
         the Go SDK

Each mode runs for --duration with --concurrency workers; identities are
spread over --keys distinct users and IPs. Keys go under a random prefix
and expire a minute after the run (the bench policy's windows); nothing
else in Redis is touched. The ratio column is decisions/s relative to
check. "degraded" counts decisions that the local fallback answered
because Redis missed the 50ms budget (a loaded machine); they are left out
of the rate and latencies. Raw Redis baselines (PING, hand-written
MULTI/EXEC) are scripts/bench.sh's, outside the production binary.`

type benchFlags struct {
	redisURL    string
	duration    time.Duration
	concurrency int
	keys        int
	modes       string
}

// defaultBenchRedisURL is the Redis bench measures without --redis-url
// or GUARD_REDIS_URL.
const defaultBenchRedisURL = "redis://127.0.0.1:6379/0"

// benchModes are the modes of guard bench, in the order they run.
var benchModes = []string{"check", "http"}

func runBench(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "bench", "[flags]", benchHelp)
	var f benchFlags
	// The default is resolved after parsing, so the help shows it once
	// and never prints GUARD_REDIS_URL, whose password it may hold.
	fs.StringVar(&f.redisURL, "redis-url", "", "Redis to measure against (default: GUARD_REDIS_URL, else "+defaultBenchRedisURL+")")
	fs.DurationVar(&f.duration, "duration", 5*time.Second, "how long each mode runs (at least "+minTimeout.String()+")")
	fs.IntVar(&f.concurrency, "concurrency", 16, "concurrent workers per mode")
	fs.IntVar(&f.keys, "keys", 10000, "distinct users and IPs the workers cycle through")
	fs.StringVar(&f.modes, "modes", strings.Join(benchModes, ","), "comma-separated modes to run")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bench: unexpected argument %q", fs.Arg(0))
	}
	source := "--redis-url"
	if f.redisURL == "" && e.env.Get(config.EnvRedisURL) != "" {
		source = config.EnvRedisURL
	}
	f.redisURL = firstNonEmpty(f.redisURL, e.env.Get(config.EnvRedisURL), defaultBenchRedisURL)
	if err := (limits.RedisConfig{URL: f.redisURL}).CheckURL(); err != nil {
		return fmt.Errorf("bench: %s: %s", source, strings.TrimPrefix(err.Error(), "redis url: "))
	}
	if err := durationFlagAtLeast("bench", "duration", f.duration, minTimeout); err != nil {
		return err
	}
	if f.concurrency < 1 {
		return fmt.Errorf("bench: --concurrency %d: must be at least 1", f.concurrency)
	}
	if f.keys < 1 {
		return fmt.Errorf("bench: --keys %d: must be at least 1", f.keys)
	}
	modes := strings.Split(f.modes, ",")
	for i, m := range modes {
		if !slices.Contains(benchModes, m) {
			return fmt.Errorf("bench: unknown mode %q (known: %s)", m, strings.Join(benchModes, ", "))
		}
		// A mode run twice would be measured twice, and the ratios
		// taken against its last run.
		if slices.Contains(modes[:i], m) {
			return fmt.Errorf("bench: --modes gives mode %q twice", m)
		}
	}
	log := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	limits.UseLogger(log)
	a, err := newBenchApp(ctx, log, f)
	if err != nil {
		return err
	}
	defer func() { _ = a.close(context.Background()) }()
	fmt.Fprintf(e.stdout, "guard bench: %s per mode, %d workers, %d keys, Redis %s\n\n",
		f.duration, f.concurrency, f.keys, redactURL(f.redisURL))
	var results []bench.Result
	for _, m := range modes {
		op, closeOp, err := benchOp(ctx, a, f, m)
		if err != nil {
			return fmt.Errorf("bench %s: %w", m, err)
		}
		r, err := bench.Run(ctx, m, f.duration, f.concurrency, op)
		closeOp()
		if err != nil {
			return fmt.Errorf("bench %s: %w", m, err)
		}
		results = append(results, r)
	}
	return bench.WriteTable(e.stdout, results, benchModes[0])
}

// benchKey is the API key of the bench's in-process server.
const benchKey = "k-bench-0000000001"

// newBenchApp wires Guard as serve does, on Redis, with a policy whose
// limits the bench does not reach and whose windows are a minute, so its
// keys expire soon after the run.
func newBenchApp(ctx context.Context, log *slog.Logger, f benchFlags) (*app, error) {
	cfg, err := config.Parse("(bench)", []byte(`
api_keys: [{name: bench, scopes: [check], key: "`+benchKey+`"}]
actions:
  login:
    limits:
      - {dimension: ip, limit: 1000000, window: 1m}
      - {dimension: user, limit: 1000000, window: 1m}
`), config.Env{})
	if err != nil {
		return nil, err
	}
	cfg.Redis.URL = f.redisURL
	cfg.Guard.KeyPrefix = "guardbench:" + randomSuffix() + ":"
	cfg.Guard.KeySecret = []byte("bench-secret-" + randomSuffix())
	cfg.Guard.Instance, cfg.Alerts.Instance = "bench", "bench"
	a, err := newApp(ctx, log, cfg, appOptions{})
	if err != nil {
		return nil, err
	}
	if a.failover != nil && a.failover.Degraded() {
		_ = a.close(context.Background())
		return nil, fmt.Errorf("bench: Redis at %s does not answer", redactURL(f.redisURL))
	}
	return a, nil
}

// benchOp returns the operation one worker repeats for a mode and a
// function releasing what the mode built, warmed up (bench.WarmUp).
func benchOp(ctx context.Context, a *app, f benchFlags, mode string) (bench.Op, func(), error) {
	op, closeFn := bench.CheckOp(a.guard, f.keys), func() {}
	if mode == "http" {
		var err error
		if op, closeFn, err = bench.HTTPOp(a.handler, benchKey, f.concurrency, f.keys); err != nil {
			return nil, nil, err
		}
	}
	if err := bench.WarmUp(ctx, op, 5*time.Second); err != nil {
		closeFn()
		return nil, nil, err
	}
	return op, closeFn, nil
}

// randomSuffix is 12 random hex digits, for key prefixes and secrets.
func randomSuffix() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
