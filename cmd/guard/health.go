package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/config"
)

const healthHelp = `
Asks a running Guard whether it is alive (GET /healthz) or, with --ready,
whether it can decide (GET /readyz, which also answers while degraded).
Exits 0 on 200 and 1 otherwise, printing the answer: made for container
health checks, where the image has no curl. The address comes from --url,
else GUARD_URL, else http:// and GUARD_LISTEN (default 127.0.0.1:8080): a
base URL, to which /healthz or /readyz is appended (http://h:8080/guard
asks http://h:8080/guard/healthz).`

func runHealth(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "health", "[flags]", healthHelp)
	url := fs.String("url", "", "Guard's base URL, /healthz or /readyz appended (default: GUARD_URL, else http://GUARD_LISTEN)")
	ready := fs.Bool("ready", false, "ask /readyz instead of /healthz")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer (at least "+minTimeout.String()+")")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("health: unexpected argument %q", fs.Arg(0))
	}
	if err := durationFlagAtLeast("health", "timeout", *timeout, minTimeout); err != nil {
		return err
	}
	listen := firstNonEmpty(e.env.Get(config.EnvListen), config.DefaultListen)
	// A server listening on every interface answers on loopback.
	listen = strings.Replace(listen, "0.0.0.0:", "127.0.0.1:", 1)
	base, err := guardURL("health", *url, e, "http://"+listen)
	if err != nil {
		return err
	}
	path := "/healthz"
	if *ready {
		path = "/readyz"
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	target := strings.TrimSuffix(base, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(e.stdout, "%d %s\n", resp.StatusCode, strings.TrimSpace(string(body)))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health: %s answered %d", redactURL(target), resp.StatusCode)
	}
	return nil
}
