package alert

import "time"

// ConfigRejected is the alert sent when a reload (SIGHUP) finds the config
// file invalid: Guard keeps running on the config it has, so the operator
// must learn that the change did not take. It is a one-off event, not a
// condition: every rejected reload sends it, and no recovery follows (the
// next good reload logs "config reloaded" and is audited).
const ConfigRejected = "config_rejected"

// oneOffEvents are the events of Event, for Events.
var oneOffEvents = []string{ConfigRejected}

// Event logs at ERROR and sends a one-off alert such as ConfigRejected,
// with a short detail (no secrets). It never blocks on the network.
func (n *Notifier) Event(event string, at time.Time, detail string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.logger.Error("alert", "event", event, "instance", n.cfg.Instance, "at", at, "detail", detail)
	n.enqueue(Payload{
		Event:    event,
		Instance: n.cfg.Instance,
		Since:    stamp(at),
		At:       stamp(at),
		Detail:   detail,
		Counts:   Counts{Transitions: 1},
	})
}
