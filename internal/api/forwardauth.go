package api

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// forwardAuth is the compiled ForwardAuthConfig.
type forwardAuth struct {
	userHeader   string
	deviceHeader string
	phoneHeader  string
	trusted      []netip.Prefix
	allowStatus  int
}

func newForwardAuth(cfg ForwardAuthConfig) (forwardAuth, error) {
	f := forwardAuth{userHeader: cfg.UserHeader, deviceHeader: cfg.DeviceHeader, phoneHeader: cfg.PhoneHeader,
		allowStatus: cfg.AllowStatus}
	switch f.allowStatus {
	case 0:
		f.allowStatus = http.StatusNoContent
	case http.StatusNoContent, http.StatusOK:
	default:
		return forwardAuth{}, fmt.Errorf("allow_status: %d is neither 204 nor 200", cfg.AllowStatus)
	}
	if f.userHeader == "" {
		f.userHeader = "X-Guard-User"
	}
	if f.deviceHeader == "" {
		f.deviceHeader = "X-Guard-Device"
	}
	if f.phoneHeader == "" {
		f.phoneHeader = "X-Guard-Phone"
	}
	for _, p := range cfg.TrustedProxies {
		if !p.IsValid() {
			return forwardAuth{}, fmt.Errorf("trusted_proxies: invalid prefix %v", p)
		}
		f.trusted = append(f.trusted, unmapPrefix(p.Masked()))
	}
	return f, nil
}

func (f forwardAuth) isTrusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range f.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// clientIP finds the address of the client behind the proxies. Headers
// are believed only when the peer itself is a trusted proxy: then the
// rightmost X-Forwarded-For address that is not a trusted proxy (the last
// hop a trusted proxy saw; everything left of it is client-supplied), or,
// without a usable X-Forwarded-For entry, X-Real-IP (its last value when
// it is repeated: a proxy that adds its own rather than replacing the
// client's puts it after the forged one). Otherwise it is the
// peer. Entries with a port (203.0.113.5:1234, [2001:db8::5]:443) count as
// their address; "unknown" and empty entries are skipped; anything else
// that is no address is bad input. The SDK's IPExtractor follows the same
// rule.
func (f forwardAuth) clientIP(r *http.Request) (string, error) {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return "", &Error{Status: http.StatusBadRequest, Code: sdk.CodeInvalidRequest,
			Message: "cannot tell the client address", Field: "ip"}
	}
	addr := peer.Addr().Unmap().WithZone("")
	if !f.isTrusted(addr) {
		return addr.String(), nil
	}
	if xff := r.Header.Values("X-Forwarded-For"); len(xff) > 0 {
		var leftmost netip.Addr
		hops := strings.Split(strings.Join(xff, ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop := strings.TrimSpace(hops[i])
			if hop == "" || strings.EqualFold(hop, "unknown") {
				continue
			}
			a, err := parseHop(hop)
			if err != nil {
				return "", badRequest("ip", "X-Forwarded-For holds an invalid address")
			}
			if !f.isTrusted(a) {
				return a.String(), nil
			}
			leftmost = a
		}
		if leftmost.IsValid() {
			// Every entry is a trusted proxy: the leftmost is the client.
			return leftmost.String(), nil
		}
	}
	if real := lastValue(r.Header, "X-Real-IP"); real != "" && !strings.EqualFold(real, "unknown") {
		a, err := parseHop(real)
		if err != nil {
			return "", badRequest("ip", "X-Real-IP holds an invalid address")
		}
		return a.String(), nil
	}
	return addr.String(), nil
}

// lastValue is the last value of the header name in h, trimmed ("" when
// there is none).
func lastValue(h http.Header, name string) string {
	v := h.Values(name)
	if len(v) == 0 {
		return ""
	}
	return strings.TrimSpace(v[len(v)-1])
}

// parseHop reads one address as proxies write it: as Guard reads
// identifiers (abuse.ParseIP), optionally with a port (decimal, at most
// 65535), IPv6 then in brackets.
func parseHop(hop string) (netip.Addr, error) {
	a, err := abuse.ParseIP(hop)
	if err == nil {
		return a, nil
	}
	if host, port, splitErr := net.SplitHostPort(hop); splitErr == nil {
		// SplitHostPort takes any text after the last colon for a port.
		if _, err := strconv.ParseUint(port, 10, 16); err != nil {
			return netip.Addr{}, fmt.Errorf("port %q is not a port", port)
		}
		return abuse.ParseIP(host)
	}
	if len(hop) > 2 && hop[0] == '[' && hop[len(hop)-1] == ']' {
		return abuse.ParseIP(hop[1 : len(hop)-1])
	}
	return netip.Addr{}, err
}

// handleForwardAuth answers a reverse proxy's auth subrequest (any
// method): 204 (or the configured 200) when the attempt may go ahead, 429
// with Retry-After and the RateLimit headers when not. Proxies such as
// Caddy and Traefik hand a denial's body to the end client, so it is the
// generic denialBody: no rule, limit, identifier or decision id.
func (s *server) handleForwardAuth(c *gin.Context) {
	action := c.Query("action")
	if action == "" {
		writeError(c, badRequest("action", "the action query parameter is required"))
		return
	}
	ip, err := s.fwd.clientIP(c.Request)
	if err != nil {
		writeError(c, err)
		return
	}
	subject := abuse.Subject{IP: &ip}
	if subject.User, err = headerValue(c, s.fwd.userHeader, "user"); err != nil {
		writeError(c, err)
		return
	}
	if subject.Device, err = headerValue(c, s.fwd.deviceHeader, "device"); err != nil {
		writeError(c, err)
		return
	}
	if subject.Phone, err = headerValue(c, s.fwd.phoneHeader, "phone"); err != nil {
		writeError(c, err)
		return
	}
	in := abuse.CheckInput{Action: action, Subject: subject, Cost: 1, APIKey: keyName(c)}
	d, err := s.decide(c, in)
	if err != nil {
		writeError(c, err)
		return
	}
	setDecisionHeaders(c.Writer.Header(), d, in.Cost)
	c.Header("X-Guard-Decision", d.Verdict())
	c.Header("X-Guard-Reason", d.Reason)
	if d.Allowed {
		if d.ID != "" {
			c.Header("X-Guard-Decision-Id", d.ID)
		}
		c.Status(s.fwd.allowStatus)
		return
	}
	// A denial names no decision id (contract v1.1): proxies such as
	// Traefik hand its headers to the client along with its body.
	writeErrorBody(c, http.StatusTooManyRequests, denialBody(d.Reason).Error)
}

// denialBody is the generic answer to a denied forward-auth attempt:
// {"error": {"code": <reason>, "message": "too many attempts"}}, the code
// one of rate_limited, locked_out, denylisted, challenge_required.
func denialBody(reason string) errorBody {
	code := abuse.ReasonRateLimited
	switch reason {
	case abuse.ReasonLockedOut, abuse.ReasonDenylisted, sdk.ReasonChallenge:
		code = reason
	}
	return errorBody{Error: errorDetail{Code: code, Message: "too many attempts"}}
}

// headerValue returns the identifier a proxy put in header, or nil when
// the header is absent or empty: proxies commonly send an empty value for
// anonymous requests, which must not turn into a 400. A header given more
// than once is ambiguous and rejected.
func headerValue(c *gin.Context, header, field string) (*string, error) {
	v := c.Request.Header.Values(header)
	switch {
	case len(v) > 1:
		return nil, badRequest(field, header+" is given more than once")
	case len(v) == 0 || strings.TrimSpace(v[0]) == "":
		return nil, nil
	}
	return &v[0], nil
}
