package main

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/guardhq/guard/internal/testenv"
)

// An audit export whose client stops reading does not hold a graceful
// stop: the stop cuts it off at once (the client sees a broken transfer)
// and finishes well within --shutdown-timeout, leaving the audit flush its
// time. Before, the stop waited the whole timeout for the export.
func TestGracefulStopCutsOffStalledExport(t *testing.T) {
	dbURL := testenv.Database(t, "guard_cmd_export_")
	g := startGuard(t, e2eConfig(t.TempDir()), map[string]string{"GUARD_DATABASE_URL": dbURL},
		"--migrate", "--shutdown-timeout", "20s")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Enough events that the export outgrows every socket buffer on the
	// way (about 60 MB as NDJSON).
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `INSERT INTO audit_events (at, id, kind, action, decision, reason, user_id, ip, instance)
		SELECT now() - i * interval '1 millisecond', 'ev' || i, 'check', 'login', 'allow', 'ok',
		       'user' || i || '@example.com', '203.0.113.7', 'e2e-1'
		  FROM generate_series(1, 200000) AS i`); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequestWithContext(ctx, "GET", g.base+"/v1/audit", nil)
	req.Header.Set("Authorization", "Bearer "+auditKey)
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("export status %d", resp.StatusCode)
	}
	if _, err := io.ReadFull(resp.Body, make([]byte, 4096)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the client reads no more; the server's writes block
	t0 := time.Now()
	if err := g.stop(t); err != nil {
		t.Errorf("stop: %v", err)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("graceful stop took %v with a stalled export, want a few seconds at most", d)
	}
	if !g.log.has("INFO", "guard stopped") {
		t.Errorf("no clean stop logged:\n%s", g.log.dump())
	}
	// The client's transfer is broken, not a short file that looks whole.
	if _, err := io.Copy(io.Discard, resp.Body); err == nil {
		t.Error("the cut-off export read to a clean end")
	}
}
