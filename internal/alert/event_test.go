package alert

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestEventSendsEveryTime: a one-off event is no condition: two rejected
// reloads are two alerts, and nothing is held back or recovered.
func TestEventSendsEveryTime(t *testing.T) {
	r := newReceiver(t)
	n := New(nil, Config{WebhookURL: r.srv.URL, Instance: "g-1"}, nil, nil)
	at := time.Date(2026, 12, 1, 11, 0, 0, 0, time.UTC)
	n.Event(ConfigRejected, at, "guard.yaml:3: unknown key")
	n.Event(ConfigRejected, at.Add(time.Minute), "guard.yaml:4: bad duration")
	if err := n.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, want := r.events(), []string{"config_rejected", "config_rejected"}; !slices.Equal(got, want) {
		t.Fatalf("events = %q, want %q", got, want)
	}
	r.mu.Lock()
	p := r.got[1]
	r.mu.Unlock()
	if got, want := p.Detail, "guard.yaml:4: bad duration"; got != want {
		t.Errorf("detail = %q, want %q", got, want)
	}
	if got, want := p.At, "2026-12-01T11:01:00.000Z"; got != want || p.Since != want {
		t.Errorf("at, since = %q, %q, want %q", p.At, p.Since, want)
	}
	if got, want := p.Instance, "g-1"; got != want {
		t.Errorf("instance = %q, want %q", got, want)
	}
	n.Event(ConfigRejected, at, "after close")
	if got := len(r.events()); got != 2 {
		t.Errorf("%d events after Close, want the 2 sent before", got)
	}
}
