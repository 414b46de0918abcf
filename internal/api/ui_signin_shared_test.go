package api

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// redisStore is a Redis limit store on url with its own connection pool,
// closed when the test ends.
func redisStore(t *testing.T, url string) *limits.RedisStore {
	t.Helper()
	client := testenv.RedisClient(t, url)
	store := limits.NewRedis(client, limits.RedisStoreConfig{})
	t.Cleanup(func() { _ = store.Close() })
	return store
}

// signInInstance is one Guard instance's handler over store: its own
// abuse.Guard with the fleet's key secret and prefix.
func signInInstance(t *testing.T, store limits.Store, prefix string, logs *bytes.Buffer) http.Handler {
	t.Helper()
	events := audit.NewMemoryStore(0)
	rec, err := audit.NewWriter(slog.New(slog.DiscardHandler), audit.WriterConfig{}, events, audit.WriterHooks{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close(context.Background()) })
	g, err := abuse.New(slog.New(slog.DiscardHandler), abuse.Config{Policy: abuse.DefaultPolicy(),
		KeySecret: []byte("one fleet's key secret, 32 bytes"), KeyPrefix: prefix, Now: time.Now}, store, rec, events)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	if logs != nil {
		log = slog.New(slog.NewTextHandler(logs, nil))
	}
	h, err := New(log, testConfig(), Deps{Guard: g, Audit: &fakeAudit{}, Cursors: testCursors})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestUISignInLimitShared: the instances on one Redis share one count of
// refused sign-ins per client address, so spreading guesses over them
// gains nothing; a store that cannot answer leaves each instance its own
// count, logged.
func TestUISignInLimitShared(t *testing.T) {
	url, prefix := testenv.Redis(t)
	a := signInInstance(t, redisStore(t, url), prefix, nil)
	b := signInInstance(t, redisStore(t, url), prefix, nil)
	const attacker, other = "198.51.100.7:4000", "198.51.100.8:4000"
	for i := range signInFailures {
		h := a
		if i%2 == 1 {
			h = b
		}
		if w := signInFrom(h, attacker, "", "guess"); w.Code != 401 {
			t.Fatalf("refusal %d: %d; want 401", i+1, w.Code)
		}
	}
	for name, h := range map[string]http.Handler{"a": a, "b": b} {
		w := signInFrom(h, attacker, "", keyAudit)
		if w.Code != 429 || len(w.Result().Cookies()) != 0 {
			t.Errorf("%s: the right key after %d refusals spread over two instances: %d, cookies %v; want 429, none",
				name, signInFailures, w.Code, w.Result().Cookies())
		}
		if ra, err := strconv.Atoi(w.Header().Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
			t.Errorf("%s: Retry-After %q; want 1..60", name, w.Header().Get("Retry-After"))
		}
		if w := signInFrom(h, other, "", keyAudit); w.Code != 303 {
			t.Errorf("%s: another address: %d; want 303", name, w.Code)
		}
	}
	// A new instance on the same Redis knows the count at once.
	if w := signInFrom(signInInstance(t, redisStore(t, url), prefix, nil), attacker, "", keyAudit); w.Code != 429 {
		t.Errorf("a third instance: %d; want 429", w.Code)
	}
	// Another fleet (prefix) has counts of its own.
	if w := signInFrom(signInInstance(t, redisStore(t, url), prefix+"other:", nil), attacker, "", keyAudit); w.Code != 303 {
		t.Errorf("another prefix: %d; want 303", w.Code)
	}

	// A store that cannot answer (closed): this instance's own count
	// still limits, and the log says why.
	closed := redisStore(t, url)
	_ = closed.Close()
	var logs bytes.Buffer
	c := signInInstance(t, closed, prefix, &logs)
	for i := range signInFailures {
		if w := signInFrom(c, attacker, "", "guess"); w.Code != 401 {
			t.Fatalf("store closed, refusal %d: %d; want 401", i+1, w.Code)
		}
	}
	if w := signInFrom(c, attacker, "", keyAudit); w.Code != 429 {
		t.Errorf("store closed, the right key after %d refusals: %d; want 429 (the instance's own count)", signInFailures, w.Code)
	}
	if !strings.Contains(logs.String(), "shared count is unavailable") || !strings.Contains(logs.String(), "this instance only") {
		t.Errorf("store closed: the log does not say the count is local:\n%s", logs.String())
	}
}
