package sdk

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
)

// IPExtractor finds the client address of a request that may have come
// through reverse proxies. It believes X-Forwarded-For and X-Real-IP only
// when the peer is one of its trusted proxies: anybody can send those
// headers, and a limiter that reads them from anybody limits whatever
// address the attacker writes there. A nil *IPExtractor trusts nobody and
// answers the peer address.
//
// Behind trusted proxies the client is the rightmost X-Forwarded-For
// entry that is not a trusted proxy (everything left of it was written by
// the client); entries with a port (203.0.113.5:1234, [2001:db8::5]:443)
// count as their address; "unknown", empty and malformed entries are
// skipped. Without a usable X-Forwarded-For entry, X-Real-IP (its last
// value when repeated); without that, the peer. This is the rule Guard's
// forward-auth follows.
type IPExtractor struct {
	trusted []netip.Prefix
}

// TrustProxies returns an extractor that trusts the given proxies: IP
// addresses or CIDR prefixes ("10.0.0.0/8", "::1"). No proxy is trusted
// unless listed, loopback included.
func TrustProxies(proxies ...string) (*IPExtractor, error) {
	x := &IPExtractor{}
	for _, s := range proxies {
		s = strings.TrimSpace(s)
		var p netip.Prefix
		var err error
		if strings.Contains(s, "/") {
			p, err = netip.ParsePrefix(s)
			p = p.Masked()
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(s)
			a = a.Unmap()
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if err != nil {
			return nil, fmt.Errorf("guard: trusted proxy %q is not an IP address or CIDR prefix", s)
		}
		if p.Addr().Is4In6() {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		x.trusted = append(x.trusted, p)
	}
	return x, nil
}

func (x *IPExtractor) isTrusted(a netip.Addr) bool {
	if x == nil {
		return false
	}
	for _, p := range x.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// ClientIP returns the client address of r in canonical text, or "" when
// even the peer address cannot be read (a request that did not come over
// TCP, such as one built in a test without RemoteAddr).
func (x *IPExtractor) ClientIP(r *http.Request) string {
	peer, ok := parseHop(r.RemoteAddr)
	if !ok {
		return ""
	}
	if !x.isTrusted(peer) {
		return peer.String()
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		var last netip.Addr
		hops := strings.Split(strings.Join(xff, ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			a, ok := parseHop(hops[i])
			if !ok {
				continue
			}
			if !x.isTrusted(a) {
				return a.String()
			}
			last = a
		}
		if last.IsValid() {
			// Every entry is a trusted proxy: the leftmost is the client.
			return last.String()
		}
	}
	if real := r.Header.Values("X-Real-IP"); len(real) > 0 {
		// Repeated, the last value is the one the nearest proxy added.
		if a, ok := parseHop(real[len(real)-1]); ok {
			return a.String()
		}
	}
	return peer.String()
}

// parseHop reads an address as proxies write it: bare, with a port, in
// brackets; IPv4-mapped IPv6 as IPv4; zones dropped.
func parseHop(s string) (netip.Addr, bool) {
	s = strings.TrimSpace(s)
	if s == "" || strings.EqualFold(s, "unknown") {
		return netip.Addr{}, false
	}
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if host, port, err := net.SplitHostPort(s); err == nil {
		// SplitHostPort takes any text after the last colon for a port;
		// Guard's forward-auth wants a decimal one.
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return netip.Addr{}, false
		}
		if a, err := netip.ParseAddr(host); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}
