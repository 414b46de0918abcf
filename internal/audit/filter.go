package audit

import (
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// Page sizes for Query.
const (
	DefaultLimit = 100  // used when Filter.Limit is 0
	MaxLimit     = 1000 // larger limits are an error
)

// ErrBadFilter is returned (wrapped) by Query and Stream for a filter they
// cannot run, such as a limit outside 0..MaxLimit.
var ErrBadFilter = errors.New("invalid audit filter")

// checkFilter validates f and returns it with the limit defaulted and the
// IP prefix masked, as both stores run it.
func checkFilter(f Filter) (Filter, error) {
	switch {
	case f.Limit == 0:
		f.Limit = DefaultLimit
	case f.Limit < 0 || f.Limit > MaxLimit:
		return f, fmt.Errorf("%w: limit %d outside 1..%d", ErrBadFilter, f.Limit, MaxLimit)
	}
	// Stored times are whole milliseconds (normalize), and Postgres drops a
	// bound's nanoseconds: raised to the next millisecond, "at >= since"
	// and "at < until" select exactly the same events, in both stores.
	f.Since, f.Until = ceilMillis(f.Since), ceilMillis(f.Until)
	if f.IP.IsValid() {
		f.IP = f.IP.Masked()
	} else if f.IP != (netip.Prefix{}) {
		return f, fmt.Errorf("%w: invalid ip prefix", ErrBadFilter)
	}
	return f, nil
}

// ceilMillis rounds t up to a whole millisecond; the zero time stays zero.
func ceilMillis(t time.Time) time.Time {
	if c := t.Truncate(time.Millisecond); !c.Equal(t) {
		return c.Add(time.Millisecond)
	}
	return t
}

// matches reports whether e passes every filter of f (not the cursor).
// MemoryStore uses it directly; PGStore's SQL (buildQuery) states the same
// conditions, and the shared store test suite holds the two to it.
func matches(f Filter, e Event) bool {
	switch {
	case f.ID != "" && e.ID != f.ID,
		f.User != "" && e.User != f.User,
		f.Device != "" && e.Device != f.Device,
		f.Phone != "" && e.Phone != f.Phone,
		f.IPText != "" && e.IP != f.IPText,
		f.Action != "" && e.Action != f.Action,
		f.Decision != "" && e.Decision != f.Decision,
		f.Reason != "" && e.Reason != f.Reason,
		f.Kind != "" && e.Kind != f.Kind,
		!f.Since.IsZero() && e.At.Before(f.Since),
		!f.Until.IsZero() && !e.At.Before(f.Until):
		return false
	}
	if !f.LockedAfter.IsZero() && (e.LockoutUntil == nil || !e.LockoutUntil.After(f.LockedAfter)) {
		return false
	}
	if f.IP.IsValid() {
		addr, ok := eventAddr(e.IP)
		if !ok || !f.IP.Contains(addr) {
			return false
		}
	}
	return true
}

// eventAddr parses the stored IP text; pseudonymised (hashed) IPs are not
// addresses and never match an IP filter. IPv4-mapped IPv6 is unmapped the
// way events store it, so both stores agree with Postgres' inet.
func eventAddr(s string) (netip.Addr, bool) {
	if s == "" {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

// before reports whether e sorts after the cursor position in the
// newest-first order, i.e. (e.At, e.ID) < (c.At, c.ID).
func before(e Event, c *Cursor) bool {
	if !e.At.Equal(c.At) {
		return e.At.Before(c.At)
	}
	return e.ID < c.ID
}
