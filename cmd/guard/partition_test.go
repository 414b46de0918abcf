package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/testenv"
)

// TestServeAlertsOnDefaultPartitionRows: audit rows whose day had no
// partition land in audit_events_default; the maintenance at start finds
// them, publishes guard_audit_default_partition_rows and sends one
// audit_default_partition alert.
func TestServeAlertsOnDefaultPartitionRows(t *testing.T) {
	redisURL, prefix := testenv.Redis(t)
	dbURL := testenv.Database(t, "guard_cmd_")
	ctx := context.Background()
	if _, _, err := audit.Migrate(ctx, dbURL, audit.MigrateUp); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	// Forty days ahead: far beyond the partitions maintenance creates.
	_, err = conn.Exec(ctx, `INSERT INTO audit_events (at, id, kind) VALUES ($1, 'future-1', 'check')`,
		time.Now().UTC().Add(40*24*time.Hour))
	conn.Close(ctx)
	if err != nil {
		t.Fatalf("insert into the default partition: %v", err)
	}

	var (
		mu     sync.Mutex
		events []string
	)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ Event string }
		b, _ := io.ReadAll(r.Body)
		if json.Unmarshal(b, &p) == nil {
			mu.Lock()
			events = append(events, p.Event)
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	config := e2eConfig(t.TempDir()) + "alerts: {webhook_url: \"" + hook.URL + "\", timeout: 1s}\n"
	g := startGuard(t, config, map[string]string{
		"GUARD_REDIS_URL": redisURL, "GUARD_DATABASE_URL": dbURL, "GUARD_KEY_PREFIX": prefix,
	})

	want := []byte("guard_audit_default_partition_rows 1")
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(g.base + "/metrics")
		if err != nil {
			t.Fatalf("metrics: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		mu.Lock()
		got := append([]string(nil), events...)
		mu.Unlock()
		if bytes.Contains(body, want) && len(got) > 0 {
			if len(got) != 1 || got[0] != "audit_default_partition" {
				t.Errorf("alerts = %v; want one audit_default_partition", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 10s: metric %q present = %v, alerts = %v", want, bytes.Contains(body, want), got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := g.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
