package notify

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Update swaps the settings for later notifications and for retries of
// earlier ones; invalid settings change nothing.
func TestUpdateSettings(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		old := newReceiver(t, testSecret, 500)
		next := newReceiver(t, "whsec-rotated")
		byHost := map[string]*receiver{"old.invalid": old, "new.invalid": next}
		client := &httpClientByHost{byHost}
		rs := &results{}
		cfg := testConfig(t.TempDir())
		cfg.WebhookURL = "http://old.invalid/hook"
		n := startNotifier(t, cfg, client.client(), rs)
		n.Notify(sampleEvent("01JDA0000000000000000000G1"))
		synctest.Wait()

		if err := n.Update(Settings{WebhookURL: "ftp://x", Secret: "s"}); err == nil {
			t.Errorf("Update with an ftp URL: nil error, want one")
		}
		if g := n.Settings().WebhookURL; g != "http://old.invalid/hook" {
			t.Errorf("after a refused Update the URL = %q, want the old one", g)
		}
		if err := n.Update(Settings{WebhookURL: "http://new.invalid/hook", Secret: "whsec-rotated", Events: []string{"unlock"}}); err != nil {
			t.Fatalf("Update: %v", err)
		}
		if g := n.Settings().Timeout; g != DefaultTimeout {
			t.Errorf("timeout after Update without one = %v, want %v", g, DefaultTimeout)
		}
		n.Notify(sampleEvent("01JDA0000000000000000000G2")) // a lockout: no longer sent
		unlock := sampleEvent("01JDA0000000000000000000G3")
		unlock.Event, unlock.Until, unlock.Level = sdk.NotificationUnlock, time.Time{}, 0
		n.Notify(unlock)
		time.Sleep(time.Minute)
		var ids []string
		for _, d := range next.deliveries() {
			if d.sig != nil {
				t.Errorf("%s: signature with the rotated secret: %v", d.body.ID, d.sig)
			}
			ids = append(ids, d.body.ID)
		}
		slices.Sort(ids)
		if w := []string{"01JDA0000000000000000000G1", "01JDA0000000000000000000G3"}; !slices.Equal(ids, w) {
			t.Errorf("new receiver got %v, want %v (the retry and the unlock)", ids, w)
		}
		if g := len(old.deliveries()); g != 1 {
			t.Errorf("old receiver got %d requests, want 1", g)
		}
		// Without a URL nothing is spooled.
		if err := n.Update(Settings{}); err != nil {
			t.Fatal(err)
		}
		n.Notify(unlock)
		synctest.Wait()
		if g := n.Pending(); g != 0 {
			t.Errorf("Pending with notifications off = %d, want 0", g)
		}
		closeNotifier(t, n)
	})
}

// httpClientByHost routes in-memory requests to a receiver per host.
type httpClientByHost struct{ byHost map[string]*receiver }

func (c *httpClientByHost) client() *http.Client {
	return &http.Client{Transport: roundTripFunc(func(req *http.Request) (*http.Response, error) {
		return c.byHost[req.URL.Host].inMemory().Transport.RoundTrip(req)
	})}
}

// Update is safe while decisions notify (run with -race): after swaps of
// URL, secret and events under load, the settings in force are whole and
// what follows is delivered with them.
func TestUpdateWhileNotifying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rcv := newReceiver(t, "whsec-final")
		rs := &results{}
		n := startNotifier(t, testConfig(t.TempDir()), rcv.inMemory(), rs)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Go(func() {
				for i := range 50 {
					n.Notify(sampleEvent(fmt.Sprintf("01JDA000000000000000000%d%02d", w, i)))
				}
			})
		}
		wg.Go(func() {
			for i := range 50 {
				s := Settings{WebhookURL: memURL, Secret: fmt.Sprintf("whsec-%d", i)}
				if i%2 == 1 {
					s.Events = []string{sdk.NotificationUnlock}
				}
				if err := n.Update(s); err != nil {
					t.Errorf("Update: %v", err)
				}
			}
		})
		wg.Wait()
		if err := n.Update(Settings{WebhookURL: memURL, Secret: "whsec-final"}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Hour) // every earlier notification settled
		before := len(rcv.deliveries())
		for i := range 10 {
			n.Notify(sampleEvent(fmt.Sprintf("01JDA0000000000000000009%02d", i)))
		}
		synctest.Wait()
		got := rcv.deliveries()
		if len(got)-before != 10 {
			t.Errorf("after the last Update %d delivered, want 10", len(got)-before)
		}
		for _, d := range got[before:] {
			if d.sig != nil {
				t.Errorf("%s, signed after the last Update: %v", d.body.ID, d.sig)
			}
		}
		if n.Pending() != 0 {
			t.Errorf("Pending = %d, want 0", n.Pending())
		}
		closeNotifier(t, n)
	})
}
