package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/internal/limits"
)

const redisHelp = `
prune deletes the Lua function libraries of other Guard versions from Redis
(on Cluster, from every master): each version loads its own library,
guard_<16 hex digits>, and one that no instance calls any more stays until
deleted. It lists every Guard library it finds and what it did; other
libraries are never touched. Run it after a rolling upgrade; an instance of
another version still running loads its library again on its next call, so
running it early costs that instance one reload, not a decision.

The Redis deployment is the one serve would use: the config file (--config
or GUARD_CONFIG) and GUARD_REDIS_URL.`

func runRedis(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "redis", "prune [flags]", redisHelp)
	configPath := fs.String("config", "", "config file (default: GUARD_CONFIG)")
	dryRun := fs.Bool("dry-run", false, "list what would be deleted, delete nothing")
	timeout := fs.Duration("timeout", 10*time.Second, "how long to wait for Redis (at least "+minTimeout.String()+")")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return errors.New("redis: give a subcommand: prune")
	}
	if rest[0] != "prune" {
		return fmt.Errorf("redis: unknown subcommand %q (want prune)", rest[0])
	}
	if err := fs.Parse(rest[1:]); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("redis prune: unexpected argument %q", fs.Arg(0))
	}
	if err := durationFlagAtLeast("redis prune", "timeout", *timeout, minTimeout); err != nil {
		return err
	}
	cfg, err := config.Load(*configPath, e.env)
	if err != nil {
		return err
	}
	if !cfg.Redis.Enabled() {
		return errors.New("redis prune: no Redis configured: set GUARD_REDIS_URL, or redis_url, redis.cluster or redis.sentinel in the config file")
	}
	// go-redis's own messages (dial retries) at DEBUG, not on stderr: the
	// command's error says what failed.
	limits.UseLogger(slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	client, err := limits.NewRedisClient(cfg.Redis, *timeout)
	if err != nil {
		return fmt.Errorf("redis prune: %w", err)
	}
	defer client.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	found, err := limits.PruneFunctionLibraries(ctx, client, *dryRun)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	if len(found) > 0 {
		fmt.Fprintln(tw, "NODE\tLIBRARY\tSTATE")
	}
	for _, l := range found {
		node := l.Node
		if node == "" {
			node = cfg.Redis.String()
		}
		state := "kept: this version"
		switch {
		case l.Deleted:
			state = "deleted"
		case !l.Current:
			state = "would be deleted (--dry-run)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", node, l.Library, state)
	}
	tw.Flush()
	if err != nil {
		return fmt.Errorf("redis prune: %w", err)
	}
	if len(found) == 0 {
		fmt.Fprintln(e.stdout, "no Guard function library in Redis (Guard loads its own at start)")
	}
	return nil
}
