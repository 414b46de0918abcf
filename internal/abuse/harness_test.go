package abuse

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// fakeClock is a settable clock shared by the memory store and Guard.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeRecorder keeps every audit event.
type fakeRecorder struct {
	mu     sync.Mutex
	events []audit.Event
}

func (r *fakeRecorder) Record(e audit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *fakeRecorder) all() []audit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]audit.Event(nil), r.events...)
}

func (r *fakeRecorder) last(t *testing.T) audit.Event {
	t.Helper()
	ev := r.all()
	if len(ev) == 0 {
		t.Fatalf("no audit event recorded")
	}
	return ev[len(ev)-1]
}

// backend is one limits.Store the Guard-level tests run against.
type backend struct {
	name string
	// clock is set for the memory store: times are then exact and tests
	// may travel in time. Nil for Redis (its clock is Redis TIME).
	clock  *fakeClock
	store  limits.Store
	prefix string
}

// advance moves the fake clock forward. On Redis (whose clock is real) it
// does nothing: tests assert exact times only with the fake clock and
// otherwise only what holds however little time passed.
func (b *backend) advance(d time.Duration) {
	if b.clock != nil {
		b.clock.Advance(d)
	}
}

func (b *backend) now() func() time.Time {
	if b.clock != nil {
		return b.clock.Now
	}
	return time.Now
}

func memoryBackend(t *testing.T) *backend {
	t.Helper()
	clock := newFakeClock()
	st := limits.NewMemory(limits.MemoryConfig{Now: clock.Now})
	t.Cleanup(func() { st.Close() })
	return &backend{name: "memory", clock: clock, store: st, prefix: DefaultKeyPrefix}
}

// redisBackend is the shared test Redis (testenv) under a fresh key prefix
// whose keys are deleted when the test ends.
func redisBackend(t *testing.T) *backend {
	t.Helper()
	url, prefix := testenv.Redis(t)
	st := limits.NewRedis(testenv.RedisClient(t, url), limits.RedisStoreConfig{})
	t.Cleanup(func() { st.Close() })
	return &backend{name: "redis", store: st, prefix: prefix}
}

// eachBackend runs fn as a subtest per backend: the memory store on a fake
// clock, and the real Redis (testenv.RedisURL) under a fresh random key
// prefix (skipped when unreachable, fatal when CI is set).
func eachBackend(t *testing.T, fn func(t *testing.T, b *backend)) {
	t.Helper()
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			var b *backend
			if name == "memory" {
				b = memoryBackend(t)
			} else {
				b = redisBackend(t)
			}
			fn(t, b)
		})
	}
}

var testSecret = []byte("test-secret-0123456789abcdef")

// newGuard builds a Guard over the backend with a fake recorder.
func newGuard(t *testing.T, b *backend, pol Policy, mod ...func(*Config)) (*Guard, *fakeRecorder) {
	t.Helper()
	cfg := Config{Policy: pol, KeySecret: testSecret, KeyPrefix: b.prefix, Instance: "test-1", Now: b.now()}
	for _, m := range mod {
		m(&cfg)
	}
	rec := &fakeRecorder{}
	g, err := New(slog.New(slog.DiscardHandler), cfg, b.store, rec, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g, rec
}

func sp(s string) *string { return &s }

func subj(user, ip, device string) Subject {
	var s Subject
	if user != "" {
		s.User = &user
	}
	if ip != "" {
		s.IP = &ip
	}
	if device != "" {
		s.Device = &device
	}
	return s
}

func mustCheck(t *testing.T, g *Guard, in CheckInput) Decision {
	t.Helper()
	d, err := g.Check(context.Background(), in)
	if err != nil {
		t.Fatalf("Check(%+v): %v", in, err)
	}
	return d
}

func mustReport(t *testing.T, g *Guard, in ReportInput) ReportOutcome {
	t.Helper()
	out, err := g.Report(context.Background(), in)
	if err != nil {
		t.Fatalf("Report(%+v): %v", in, err)
	}
	return out
}

func wantDecision(t *testing.T, d Decision, allowed bool, reason string) {
	t.Helper()
	if d.Allowed != allowed || d.Reason != reason {
		t.Fatalf("decision = allowed %v reason %s (retry %v, limits %+v); want allowed %v reason %s",
			d.Allowed, d.Reason, d.RetryAfter, d.Limits, allowed, reason)
	}
}
