package api

import (
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// forwardAuth is the compiled ForwardAuthConfig.
type forwardAuth struct {
	userHeader   string
	deviceHeader string
	trusted      []netip.Prefix
}

func newForwardAuth(cfg ForwardAuthConfig) (forwardAuth, error) {
	f := forwardAuth{userHeader: cfg.UserHeader, deviceHeader: cfg.DeviceHeader}
	if f.userHeader == "" {
		f.userHeader = "X-Guard-User"
	}
	if f.deviceHeader == "" {
		f.deviceHeader = "X-Guard-Device"
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
// without X-Forwarded-For, X-Real-IP. Otherwise it is the peer.
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
		hops := strings.Split(strings.Join(xff, ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop := strings.TrimSpace(hops[i])
			if hop == "" {
				continue
			}
			a, err := abuse.ParseIP(hop)
			if err != nil {
				return "", badRequest("ip", "X-Forwarded-For holds an invalid address")
			}
			if !f.isTrusted(a) || i == 0 {
				return a.String(), nil
			}
		}
	}
	if real := strings.TrimSpace(r.Header.Get("X-Real-IP")); real != "" {
		a, err := abuse.ParseIP(real)
		if err != nil {
			return "", badRequest("ip", "X-Real-IP holds an invalid address")
		}
		return a.String(), nil
	}
	return addr.String(), nil
}

// handleForwardAuth answers a reverse proxy's auth subrequest (any
// method): 204 when the attempt may go ahead, 429 with Retry-After and
// the RateLimit headers when not; the body of a 429 is the check answer.
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
	in := abuse.CheckInput{Action: action, Subject: subject, Cost: 1, APIKey: keyName(c)}
	d, err := s.decide(c, in)
	if err != nil {
		writeError(c, err)
		return
	}
	setDecisionHeaders(c.Writer.Header(), d, in.Cost)
	c.Header("X-Guard-Decision", checkResponse(d).Decision)
	c.Header("X-Guard-Reason", d.Reason)
	if d.ID != "" {
		c.Header("X-Guard-Decision-Id", d.ID)
	}
	if d.Allowed {
		c.Status(http.StatusNoContent)
		return
	}
	c.JSON(http.StatusTooManyRequests, checkResponse(d))
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
