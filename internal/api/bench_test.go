package api_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/sdk"
)

// BenchmarkCheck measures what the HTTP layer adds to a decision, in one
// run: guard_direct calls abuse.Guard.Check, handler serves POST /v1/check
// in process (auth, decoding, headers, JSON), and loopback_sdk goes through
// sdk.Client over a loopback TCP connection. All use the in-memory limiter
// and the real audit writer into the in-memory audit store; each
// iteration uses a fresh IP so every attempt is allowed.
func BenchmarkCheck(b *testing.B) {
	lim := limits.NewMemory(limits.MemoryConfig{})
	defer lim.Close()
	events := audit.NewMemoryStore(0)
	w, err := audit.NewWriter(slog.New(slog.DiscardHandler), audit.WriterConfig{}, events, audit.WriterHooks{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(context.Background())
	g, err := abuse.New(slog.New(slog.DiscardHandler), abuse.Config{KeySecret: []byte("bench-secret-0123456789")}, lim, w, events)
	if err != nil {
		b.Fatal(err)
	}
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{Keys: []api.Key{
		{Name: "bench", Scopes: []string{api.ScopeCheck}, Key: "k-bench"},
	}}, api.Deps{Guard: g, Audit: events, Cursors: audit.NewCursorCodec([]byte("c"))})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	nextIP := func() string {
		n++
		return fmt.Sprintf("10.%d.%d.%d", n>>16&255, n>>8&255, n&255)
	}
	ctx := context.Background()

	b.Run("guard_direct", func(b *testing.B) {
		user := "alice@example.com"
		for b.Loop() {
			ip := nextIP()
			if _, err := g.Check(ctx, abuse.CheckInput{Action: "signup", Subject: abuse.Subject{User: &user, IP: &ip}, Cost: 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("handler", func(b *testing.B) {
		for b.Loop() {
			body := []byte(`{"action":"signup","user":"alice@example.com","ip":"` + nextIP() + `"}`)
			req := httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Authorization", "Bearer k-bench")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != 200 {
				b.Fatalf("status %d: %s", rec.Code, rec.Body)
			}
		}
	})
	b.Run("loopback_sdk", func(b *testing.B) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		c := sdk.New(srv.URL, "k-bench")
		user := "alice@example.com"
		for b.Loop() {
			ip := nextIP()
			if _, err := c.Check(ctx, sdk.CheckRequest{Action: "signup", User: &user, IP: &ip}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
