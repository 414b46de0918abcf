package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/testenv"
)

// TestUISignOutHoldsOnEveryInstance: instances of one database share the
// session secret (it derives from key_secret), so each accepts a copy of
// another's cookie; a sign-out on one must end the session on all of
// them, at once (Deps.Revocations, audit.PGStore).
func TestUISignOutHoldsOnEveryInstance(t *testing.T) {
	pg := OpenTestPG(t, "guard_api_signout_")
	cfg := testConfig()
	cfg.SessionSecret = []byte("one fleet's session secret")
	a := newTestHandler(t, cfg, Deps{Revocations: pg})
	b := newTestHandler(t, cfg, Deps{Revocations: pg})
	alone := newTestHandler(t, cfg, Deps{}) // an instance that does not share sign-outs

	v := signInCookie(t, a)
	for name, h := range map[string]http.Handler{"b": b, "alone": alone} {
		if code, _ := sessionCall(h, "GET", "/ui/events", v, nil); code != 200 {
			t.Fatalf("%s before the sign-out: %d; want 200", name, code)
		}
	}
	if code := signOut(t, a, v); code != 303 {
		t.Fatalf("sign-out on a: %d; want 303", code)
	}
	if code, _ := sessionCall(a, "GET", "/ui/events", v, nil); code != 303 {
		t.Errorf("a after its sign-out: %d; want 303 to sign in", code)
	}
	if code, _ := sessionCall(b, "GET", "/ui/events", v, nil); code != 303 {
		t.Errorf("b after a's sign-out: %d; want 303 to sign in", code)
	}
	// Without the shared store the copy still works: what the store is for.
	if code, _ := sessionCall(alone, "GET", "/ui/events", v, nil); code != 200 {
		t.Errorf("an instance without shared sign-outs: %d; want 200 (its own sign-outs only)", code)
	}
	// Another session is not touched.
	w := signInCookie(t, b)
	if code, _ := sessionCall(a, "GET", "/ui/events", w, nil); code != 200 {
		t.Errorf("another session on a: %d; want 200", code)
	}

	// A store that fails leaves each instance its own sign-outs: the
	// pages and the sign-out still answer.
	broken := OpenTestPG(t, "guard_api_signout_down_")
	broken.Close()
	c := newTestHandler(t, cfg, Deps{Revocations: broken})
	d := newTestHandler(t, cfg, Deps{Revocations: broken})
	x := signInCookie(t, c)
	if code := signOut(t, c, x); code != 303 {
		t.Fatalf("sign-out with the store down: %d; want 303", code)
	}
	if code, _ := sessionCall(c, "GET", "/ui/events", x, nil); code != 303 {
		t.Errorf("c after its sign-out with the store down: %d; want 303", code)
	}
	if code, _ := sessionCall(d, "GET", "/ui/events", x, nil); code != 200 {
		t.Errorf("d with the store down: %d; want 200 (it cannot know)", code)
	}
}

// flakyRevocations is a shared sign-out store that fails while down is set.
type flakyRevocations struct {
	SessionRevocations
	down atomic.Bool
}

func (f *flakyRevocations) RevokeSession(ctx context.Context, digest []byte, until time.Time) error {
	if f.down.Load() {
		return errors.New("postgres: connection refused")
	}
	return f.SessionRevocations.RevokeSession(ctx, digest, until)
}

// TestUISignOutSharedAfterOutage: a sign-out taken while the shared store
// fails holds on its instance at once, and reaches the other instances by
// itself once the store is back, with no page view on the first.
func TestUISignOutSharedAfterOutage(t *testing.T) {
	store := &flakyRevocations{SessionRevocations: OpenTestPG(t, "guard_api_signout_retry_")}
	cfg := testConfig()
	cfg.SessionSecret = []byte("one fleet's session secret")
	st := NewState(cfg, nil)
	st.sess.unshared.first = 20 * time.Millisecond
	var logs testenv.SyncBuffer
	a, err := New(slog.New(slog.NewTextHandler(&logs, nil)), cfg,
		Deps{Guard: &fakeGuard{}, Audit: &fakeAudit{}, Cursors: testCursors, Revocations: store, State: st})
	if err != nil {
		t.Fatal(err)
	}
	b := newTestHandler(t, cfg, Deps{Revocations: store})

	v := signInCookie(t, a)
	store.down.Store(true)
	if code := signOut(t, a, v); code != 303 {
		t.Fatalf("sign-out with the store down: %d; want 303", code)
	}
	if code, _ := sessionCall(a, "GET", "/ui/events", v, nil); code != 303 {
		t.Errorf("a after its sign-out: %d; want 303", code)
	}
	if code, _ := sessionCall(b, "GET", "/ui/events", v, nil); code != 200 {
		t.Fatalf("b while the store is down: %d; want 200 (it cannot know yet)", code)
	}
	time.Sleep(100 * time.Millisecond) // a few retries fail
	if n := st.sess.unshared.waiting(); n != 1 {
		t.Fatalf("%d sign-outs waiting while the store is down; want 1", n)
	}
	store.down.Store(false)
	deadline := time.Now().Add(10 * time.Second)
	for st.sess.unshared.waiting() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if code, _ := sessionCall(b, "GET", "/ui/events", v, nil); code != 303 {
		t.Errorf("b once the store is back: %d; want 303 (the sign-out shared by the retry)", code)
	}
	for _, want := range []string{"retried in the background", "shared with the other instances after all"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, logs.String())
		}
	}
}
