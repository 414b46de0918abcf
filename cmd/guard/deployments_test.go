package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
	"github.com/guardhq/guard/sdk"
)

// TestServeOnRedisDeployments runs `guard serve` on a private Redis
// Cluster (three masters) and on a Sentinel-managed master, configured with
// API.md v1.1's `redis:` section, and drives one login story through the
// SDK on each: limits, a strike, the lockout listed by user and lifted.
func TestServeOnRedisDeployments(t *testing.T) {
	for _, tc := range []struct {
		name  string
		redis func(t *testing.T) string
	}{
		{"cluster", func(t *testing.T) string {
			return "redis: {cluster: [" + strings.Join(testenv.PrivateRedisCluster(t), ", ") + "]}\n"
		}},
		{"sentinel", func(t *testing.T) string {
			s := testenv.PrivateSentinel(t)
			return "redis: {sentinel: {master: " + s.Master + ", addrs: [" + s.Sentinel.Addr() + "]}}\n"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := startGuard(t, e2eConfig(t.TempDir())+tc.redis(t), nil)
			ctx := context.Background()
			client := sdk.New(g.base, checkKey, sdk.WithTimeout(10*time.Second))
			admin := sdk.New(g.base, adminKey, sdk.WithTimeout(10*time.Second))
			ip := "203.0.113.77"
			for i := range 4 {
				res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", User: strp("dana@example.com"), IP: &ip})
				if err != nil {
					t.Fatalf("check %d: %v", i+1, err)
				}
				if res.Degraded {
					t.Fatalf("check %d: degraded; want answers from Redis", i+1)
				}
				if want := i < 3; (res.Decision == "allow") != want {
					t.Fatalf("check %d: %s/%s, want allowed %v (limit 3 per ip)", i+1, res.Decision, res.Reason, want)
				}
			}
			var struck *sdk.Lockout
			for range 2 {
				rep, err := client.Report(ctx, sdk.ReportRequest{Action: "login", User: strp("dana@example.com"), IP: &ip, Outcome: "failure"})
				if err != nil {
					t.Fatalf("report: %v", err)
				}
				struck = rep.Lockout
			}
			if struck == nil || struck.Level != 1 {
				t.Fatalf("after two failures: lockout %+v, want level 1", struck)
			}
			ls, err := admin.Lockouts(ctx, sdk.LockoutFilter{User: "Dana@Example.com"})
			if err != nil || len(ls.Lockouts) != 1 || ls.Lockouts[0].Dimension != "user" {
				t.Fatalf("lockouts by user = %+v, %v; want dana's user lockout", ls, err)
			}
			if err := admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: strp("dana@example.com"), Reason: "test"}); err != nil {
				t.Fatalf("unlock: %v", err)
			}
			var apiErr *sdk.Error
			if err := admin.Unlock(ctx, sdk.UnlockRequest{Dimension: "user", User: strp("dana@example.com"), Reason: "again"}); !errors.As(err, &apiErr) || apiErr.Status != 404 {
				t.Errorf("second unlock: %v, want 404", err)
			}
		})
	}
}
