package abuse

import (
	"context"

	"github.com/guardhq/guard/internal/audit"
)

// What Guard needs of the audit trail, and what it puts into it about a
// request's identifiers.

// Recorder takes audit events without blocking the decision path
// Recorder takes audit events without blocking the decision path
// (audit.Writer implements it).
type Recorder interface {
	Record(e audit.Event)
}

// EventLookup queries the audit trail; Guard uses it to name the
// identifiers of lockouts struck by other instances. audit stores
// implement it.
type EventLookup interface {
	Query(ctx context.Context, f audit.Filter) (audit.Page, error)
}

// auditIdentifiers fills an event's identifiers: normalised (IP canonical,
// not aggregated), or their keyed hashes with Pseudonymize.
func (g *Guard) auditIdentifiers(e *audit.Event, id *identity) {
	if id.hasUser {
		e.User = id.user
		if g.cfg.Pseudonymize {
			e.User = g.keys.hash(id, dimUser)
		}
	}
	if id.hasIP {
		e.IP = id.ip.String()
		if g.cfg.Pseudonymize {
			e.IP = g.keys.sum(id, dimAddr)
		}
	}
	if id.hasDevice {
		e.Device = id.device
		if g.cfg.Pseudonymize {
			e.Device = g.keys.hash(id, dimDevice)
		}
	}
	switch {
	case id.hasPhone && id.phone.e164 != "":
		e.Phone = id.phone.e164
		if g.cfg.Pseudonymize {
			e.Phone = g.keys.hash(id, dimPhone)
		}
	case id.hasPhone:
		// An admin named a phone_country or phone_prefix key by its value
		// ("GB", "+447400"): that value is what the event is about.
		d := dimPhoneCountry
		if id.phone.prefix != "" {
			d = dimPhonePrefix
		}
		e.Phone = id.phoneValue(d)
		if g.cfg.Pseudonymize {
			e.Phone = g.keys.hash(id, d)
		}
	}
}

// AuditUser returns the value audit events store for a user identifier
// (normalised, or its keyed hash with Pseudonymize), for audit filters.
// Errors as NormalizeUser.
func (g *Guard) AuditUser(raw string) (string, error) {
	u, err := NormalizeUser(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return u, err
	}
	id := identity{user: u, hasUser: true}
	return g.keys.hash(&id, dimUser), nil
}

// AuditIP returns, when Pseudonymize is on, the keyed hash that audit
// events store for the IP address raw, with hashed true; with hashed false
// events keep real addresses, to be filtered by address or CIDR. Errors as
// ParseIP.
func (g *Guard) AuditIP(raw string) (value string, hashed bool, err error) {
	a, err := ParseIP(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return "", false, err
	}
	id := identity{ip: a, hasIP: true}
	return g.keys.sum(&id, dimAddr), true, nil
}

// AuditDevice returns the value audit events store for a device identifier
// (as given, or its keyed hash with Pseudonymize). Errors as NormalizeDevice.
func (g *Guard) AuditDevice(raw string) (string, error) {
	d, err := NormalizeDevice(raw)
	if err != nil || !g.cfg.Pseudonymize {
		return d, err
	}
	id := identity{device: d, hasDevice: true}
	return g.keys.hash(&id, dimDevice), nil
}

// AuditPhone returns the value audit events store for a phone number
// (E.164, read with the phone settings as requests are, or its keyed hash
// with Pseudonymize). Errors as ParsePhone.
func (g *Guard) AuditPhone(raw string) (string, error) {
	p, err := parsePhone(raw, g.cfg.Phone.DefaultRegion, g.cfg.Phone.PrefixDigits)
	if err != nil || !g.cfg.Pseudonymize {
		return p.e164, err
	}
	id := identity{phone: p, hasPhone: true}
	return g.keys.hash(&id, dimPhone), nil
}

// Pseudonymized reports whether audit events hold keyed hashes of the
// identifiers (audit.pseudonymize) rather than the identifiers.
func (g *Guard) Pseudonymized() bool { return g.cfg.Pseudonymize }
