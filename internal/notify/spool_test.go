package notify

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guardhq/guard/sdk"
)

// A notification that failed before a stop is delivered by the next
// notifier on the same spool, with the same id, and MaxAge still counts
// from its first enqueue.
func TestSpoolSurvivesRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		down := newReceiver(t, testSecret, 500)
		rs := &results{}
		n1 := startNotifier(t, testConfig(dir), down.inMemory(), rs)
		n1.Notify(sampleEvent("01JDA0000000000000000000DD"))
		synctest.Wait()
		if g := len(down.deliveries()); g != 1 {
			t.Fatalf("attempts before the stop = %d, want 1", g)
		}
		closeNotifier(t, n1)
		if g, w := spoolFiles(t, dir), []string{"01JDA0000000000000000000DD.ntf"}; !slices.Equal(g, w) {
			t.Fatalf("spool after stop = %v, want %v", g, w)
		}

		up := newReceiver(t, testSecret)
		n2 := startNotifier(t, testConfig(dir), up.inMemory(), rs)
		if g := n2.Pending(); g != 1 {
			t.Errorf("Pending after restart = %d, want 1", g)
		}
		synctest.Wait()
		got := up.deliveries()
		if len(got) != 1 || got[0].body.ID != "01JDA0000000000000000000DD" || got[0].sig != nil {
			t.Fatalf("after restart got %+v, want the pending notification, signed", got)
		}
		if g, w := deref(got[0].body), deref(sampleEvent("x").wire()); g["user"] != w["user"] || g["until"] != w["until"] || g["at"] != w["at"] {
			t.Errorf("restored body = %v, want the fields of %v", g, w)
		}
		if g, w := rs.String(), "lockout/retried lockout/delivered"; g != w {
			t.Errorf("results = %q, want %q", g, w)
		}
		closeNotifier(t, n2)
		if g := spoolFiles(t, dir); len(g) != 0 {
			t.Errorf("spool = %v, want empty", g)
		}
	})
}

// Close writes what was enqueued to disk even when nothing was attempted
// yet (the URL's receiver hangs).
func TestCloseSpoolsEnqueued(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rcv := newReceiver(t, testSecret, 0, 0, 0)
		n := startNotifier(t, testConfig(dir), rcv.inMemory(), &results{})
		for _, id := range []string{"01JDA0000000000000000000E1", "01JDA0000000000000000000E2", "01JDA0000000000000000000E3"} {
			n.Notify(sampleEvent(id))
		}
		closeNotifier(t, n)
		if g := spoolFiles(t, dir); len(g) != 3 {
			t.Errorf("spool after Close = %v, want 3 files", g)
		}
		rs := &results{}
		n.Notify(sampleEvent("01JDA0000000000000000000E4"))
		n2 := startNotifier(t, testConfig(dir), newReceiver(t, testSecret).inMemory(), rs)
		synctest.Wait()
		if g, w := rs.String(), "lockout/delivered lockout/delivered lockout/delivered"; g != w {
			t.Errorf("after restart results = %q, want %q", g, w)
		}
		closeNotifier(t, n2)
	})
}

// A full spool drops new notifications (counted) and takes them again once
// there is room.
func TestSpoolFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		rcv := newReceiver(t, testSecret, 500, 500)
		rs := &results{}
		cfg := testConfig(dir)
		cfg.MaxPending = 2
		cfg.Backoff = time.Hour
		n := startNotifier(t, cfg, rcv.inMemory(), rs)
		for _, id := range []string{"01JDA0000000000000000000F1", "01JDA0000000000000000000F2", "01JDA0000000000000000000F3"} {
			n.Notify(sampleEvent(id))
			synctest.Wait()
		}
		if g, w := rs.String(), "lockout/retried lockout/retried lockout/dropped"; g != w {
			t.Errorf("results = %q, want %q", g, w)
		}
		if g := spoolFiles(t, dir); len(g) != 2 {
			t.Errorf("spool = %v, want 2 files", g)
		}
		time.Sleep(2 * time.Hour) // both retried and delivered
		n.Notify(sampleEvent("01JDA0000000000000000000F4"))
		synctest.Wait()
		if g := rs.String(); strings.Count(g, "delivered") != 3 {
			t.Errorf("results = %q, want 3 delivered once there was room", g)
		}
		closeNotifier(t, n)
	})
}

func TestEventsFilter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := newReceiver(t, testSecret)
		cfg := testConfig(t.TempDir())
		cfg.Events = []string{sdk.NotificationLockout}
		n := startNotifier(t, cfg, rcv.inMemory(), &results{})
		unlock := sampleEvent("01JDA0000000000000000000H1")
		unlock.Event = sdk.NotificationUnlock
		n.Notify(unlock)
		n.Notify(sampleEvent("01JDA0000000000000000000H2"))
		synctest.Wait()
		got := rcv.deliveries()
		if len(got) != 1 || got[0].body.Event != "lockout" {
			t.Errorf("with events [lockout] got %+v, want the lockout only", got)
		}
		closeNotifier(t, n)
	})
}

func TestSettingsValidate(t *testing.T) {
	tests := []struct {
		name string
		s    Settings
		want string // substring of the error, "" for none
	}{
		{"off", Settings{}, ""},
		{"https", Settings{WebhookURL: "https://app.example.com/hooks", Secret: "s"}, ""},
		{"events", Settings{WebhookURL: "http://a/b", Secret: "s", Events: []string{"unlock", "lockout"}}, ""},
		{"no secret", Settings{WebhookURL: "https://app.example.com/hooks"}, "secret is required"},
		{"scheme", Settings{WebhookURL: "ftp://app.example.com/", Secret: "s"}, "http:// or https://"},
		{"no host", Settings{WebhookURL: "https:///x", Secret: "s"}, "with a host"},
		{"relative", Settings{WebhookURL: "/hooks", Secret: "s"}, "http:// or https://"},
		{"event", Settings{Events: []string{"strike"}}, `unknown event "strike"`},
		{"timeout", Settings{Timeout: -time.Second}, "timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.s.Validate()
			if got := errString(err); tt.want == "" && err != nil || tt.want != "" && !strings.Contains(got, tt.want) {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func TestRecordRoundTrip(t *testing.T) {
	ip := "203.0.113.7"
	unlock := Event{ID: "01JDA0000000000000000000J1", Event: "unlock", At: time.UnixMilli(1764586800123).UTC(),
		Dimension: "ip", IP: &ip, Reason: "support ticket 42"}
	for _, e := range []Event{sampleEvent("01JDA0000000000000000000J0"), unlock} {
		p := &pending{ev: e, enqueued: time.UnixMilli(1764586800999).UTC()}
		b, err := encodeRecord(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decodeRecord(b)
		if err != nil {
			t.Fatalf("decode %q: %v", b, err)
		}
		e.At = e.At.Truncate(time.Millisecond)
		if g, w := deref(got.ev.wire()), deref(e.wire()); !mapsEqual(g, w) || !got.enqueued.Equal(p.enqueued) {
			t.Errorf("round trip = %v %v, want %v %v", g, got.enqueued, w, p.enqueued)
		}
	}
	if _, err := decodeRecord([]byte{0x09, '{', '}'}); !errors.Is(err, errRecordVersion) {
		t.Errorf("decode version 9: %v, want errRecordVersion", err)
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// Files that cannot be read are set aside, not retried; a crash's
// temporary files are removed.
func TestSpoolSetsAsideBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{
		"01JDA0000000000000000000K1.ntf": "\x01{not json",
		"01JDA0000000000000000000K2.ntf": "\x07{}",
		".tmp-123":                       "\x01{}",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sp, err := openSpool(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, bad := sp.load()
	if len(got) != 0 || len(bad) != 2 {
		t.Errorf("load = %d pending, %v bad; want 0 and 2", len(got), bad)
	}
	want := []string{"01JDA0000000000000000000K1.ntf.bad", "01JDA0000000000000000000K2.ntf.bad"}
	if g := spoolFiles(t, dir); !slices.Equal(g, want) {
		t.Errorf("spool = %v, want %v", g, want)
	}
}

// Without a URL the notifier touches no disk (Guard starts on a read-only
// file system with notifications off); a URL set later opens the spool and
// sends what an earlier run left there.
func TestSpoolOpensWithTheFirstURL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "notifications")
		rcv := newReceiver(t, testSecret, 500)
		first := startNotifier(t, testConfig(dir), rcv.inMemory(), &results{})
		first.Notify(sampleEvent("01JDA0000000000000000000L1"))
		synctest.Wait()
		closeNotifier(t, first)

		rs := &results{}
		off := testConfig(dir)
		off.WebhookURL = ""
		n := startNotifier(t, off, rcv.inMemory(), rs)
		n.Notify(sampleEvent("01JDA0000000000000000000L2"))
		synctest.Wait()
		if g := n.Pending(); g != 0 {
			t.Errorf("Pending without a URL = %d, want 0 (the spool is not read)", g)
		}
		if err := n.Update(Settings{WebhookURL: memURL, Secret: testSecret}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if g, w := rs.String(), "lockout/delivered"; g != w {
			t.Errorf("after the URL was set: results %q, want %q (the earlier run's notification)", g, w)
		}
		closeNotifier(t, n)

		// A spool path under a regular file cannot be created, root or not.
		blocker := filepath.Join(parent, "file")
		if err := os.WriteFile(blocker, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		ro := testConfig(filepath.Join(blocker, "notifications"))
		ro.WebhookURL = ""
		n, err := New(nil, ro, nil, Hooks{})
		if err != nil {
			t.Fatalf("New without a URL on an uncreatable spool: %v", err)
		}
		if err := n.Update(Settings{WebhookURL: memURL, Secret: testSecret}); err == nil {
			t.Errorf("Update with a URL and an uncreatable spool: nil error, want one")
		}
		if g := n.Settings().WebhookURL; g != "" {
			t.Errorf("after a failed Update the URL = %q, want none", g)
		}
		if _, err := New(nil, testConfig(filepath.Join(blocker, "notifications")), nil, Hooks{}); err == nil {
			t.Errorf("New with a URL and an uncreatable spool: nil error, want one")
		}
		closeNotifier(t, n)
	})
}
