package abuse

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// commandLog records the commands every Redis round trip carries.
type commandLog struct {
	mu    sync.Mutex
	trips [][]string
}

func (l *commandLog) DialHook(next redis.DialHook) redis.DialHook { return next }

func (l *commandLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		l.add([]string{cmd.Name()})
		return next(ctx, cmd)
	}
}

func (l *commandLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		names := make([]string, len(cmds))
		for i, c := range cmds {
			names[i] = c.Name()
		}
		l.add(names)
		return next(ctx, cmds)
	}
}

func (l *commandLog) add(names []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.trips = append(l.trips, names)
}

// take returns the round trips since the last call and forgets them.
func (l *commandLog) take() [][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	t := l.trips
	l.trips = nil
	return t
}

// TestOneRoundTripPerDecision drives Guard over the real Redis store and
// counts what reaches Redis: every /v1/check and /v1/report, whatever it
// meets (lockouts, trusted devices, count_denials strikes), is exactly one
// round trip carrying one FCALL.
func TestOneRoundTripPerDecision(t *testing.T) {
	url, prefix := testenv.Redis(t)
	client := testenv.RedisClient(t, url)
	log := &commandLog{}
	client.AddHook(log)
	store := limits.NewRedis(client, limits.RedisStoreConfig{})

	pol := Policy{Actions: map[string]Action{
		"login": {
			Limits:   []Rule{{Dimension: DimUser, Limit: 2, Window: time.Minute}, {Dimension: DimIP, Limit: 100, Window: time.Minute}},
			Failures: []Rule{{Dimension: DimUserIP, Limit: 2, Window: time.Minute}, {Dimension: DimUser, Limit: 50, Window: time.Hour}},
			Lockout:  Lockout{Ladder: []time.Duration{time.Minute}, Decay: time.Hour, Ledger: "auth", CountDenials: true},
		},
	}}
	g, err := New(slog.New(slog.DiscardHandler), Config{Policy: pol, KeySecret: testSecret, KeyPrefix: prefix}, store, &fakeRecorder{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	// check and report return what the call answered, so each step also
	// proves it reached the situation it names.
	check := func(user, ip, device string) func() (string, error) {
		return func() (string, error) {
			d, err := g.Check(context.Background(), CheckInput{Action: "login", Subject: subj(user, ip, device)})
			return d.Reason, err
		}
	}
	report := func(user, ip, device, outcome string) func() (string, error) {
		return func() (string, error) {
			o, err := g.Report(context.Background(), ReportInput{Action: "login", Subject: subj(user, ip, device), Outcome: outcome})
			if o.Lockout != nil {
				return "locked", err
			}
			return "no lockout", err
		}
	}
	// Load the function library once: the first call on a Redis without it
	// needs FCALL, FUNCTION LOAD and FCALL again.
	if _, err := check("warm@example.com", "192.0.2.1", "")(); err != nil {
		t.Fatalf("warm-up check: %v", err)
	}
	log.take()

	steps := []struct {
		name string
		call func() (string, error)
		want string
	}{
		{"check allowed", check("alice@example.com", "192.0.2.7", "d-1"), ReasonOK},
		{"check allowed with device", check("alice@example.com", "192.0.2.7", "d-1"), ReasonOK},
		{"check denied, count_denials records a failure", check("alice@example.com", "192.0.2.7", "d-1"), ReasonRateLimited},
		{"check denied, count_denials strikes", check("alice@example.com", "192.0.2.7", "d-1"), ReasonRateLimited},
		{"check locked out", check("alice@example.com", "192.0.2.7", "d-1"), ReasonLockedOut},
		{"report failure", report("bob@example.com", "192.0.2.8", "", "failure"), "no lockout"},
		{"report failure that strikes", report("bob@example.com", "192.0.2.8", "", "failure"), "locked"},
		{"report failure while locked", report("bob@example.com", "192.0.2.8", "", "failure"), "locked"},
		{"report success trusts the device", report("carol@example.com", "192.0.2.9", "d-9", "success"), "no lockout"},
		{"check from the trusted device", check("carol@example.com", "192.0.2.9", "d-9"), ReasonOK},
	}
	for _, s := range steps {
		got, err := s.call()
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got != s.want {
			t.Errorf("%s: answered %q; want %q", s.name, got, s.want)
		}
		trips := log.take()
		if len(trips) != 1 || len(trips[0]) != 1 || trips[0][0] != "fcall" {
			t.Errorf("%s: round trips = %v; want exactly one carrying one fcall", s.name, trips)
		}
	}
}
