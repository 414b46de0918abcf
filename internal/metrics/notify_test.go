package metrics

import (
	"fmt"
	"testing"

	"github.com/guardhq/guard/internal/notify"
)

func TestNotificationMetrics(t *testing.T) {
	m := New()
	before := scrape(t, m)
	for _, e := range notify.Events {
		for _, r := range []string{notify.ResultDelivered, notify.ResultRetried, notify.ResultFailed, notify.ResultDropped} {
			if l := fmt.Sprintf(`guard_notifications_total{event=%q,result=%q} 0`, e, r); !before[l] {
				t.Errorf("missing before any notification: %s", l)
			}
		}
	}
	m.NotificationResult("lockout", notify.ResultRetried)
	m.NotificationResult("lockout", notify.ResultDelivered)
	m.NotificationResult("unlock", notify.ResultDropped)
	m.NotificationResult("bogus", "bogus")
	m.SetNotificationsPending(3)
	got := scrape(t, m)
	for _, want := range []string{
		`guard_notifications_total{event="lockout",result="retried"} 1`,
		`guard_notifications_total{event="lockout",result="delivered"} 1`,
		`guard_notifications_total{event="unlock",result="dropped"} 1`,
		`guard_notifications_total{event="other",result="other"} 1`,
		`guard_notifications_pending 3`,
	} {
		if !got[want] {
			t.Errorf("missing %s", want)
		}
	}
}
