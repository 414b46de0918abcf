package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"
)

// Review page sessions. Signing in with an API key sets a cookie that
// names the key and an expiry, signed with the session secret and bound to
// the key's digest (so a rotated or removed key ends its sessions), and
// the sign-in time, after which it renews for SessionLifetime at most. The
// cookie is HttpOnly, SameSite=Strict, Secure unless the request is plain
// HTTP to a loopback host (secureCookie), and lives SessionTTL from the
// last page view. Signing out clears it and revokes it on this instance
// and, with Deps.Revocations, on every instance of the database.
const (
	sessionCookie = "guard_session"
	// SessionTTL is how long a review session lasts without a page view.
	SessionTTL = 30 * time.Minute
	// SessionLifetime is how long a review session lasts at most from
	// sign-in, page views or not: then it is no longer renewed, and the
	// user signs in again.
	SessionLifetime = 12 * time.Hour
	// sessionSkew is the clock difference between instances a cookie's
	// times tolerate, and how long a revocation outlives the longest a
	// copy of the revoked cookie could still be valid.
	sessionSkew = time.Minute
	// revocationWait bounds a read or write of the shared sign-outs
	// (Deps.Revocations): past it the instance goes by its own.
	revocationWait = 2 * time.Second
)

// uiAuth is how a review request was authenticated.
type uiAuth struct {
	key *apiKey
	// sid identifies the session for CSRF tokens: the cookie's nonce, or
	// "basic:<key name>" for HTTP Basic.
	sid string
	// csrfFree is set for Bearer requests: a browser never attaches a
	// Bearer header on its own, so they cannot be forged cross-site.
	csrfFree bool
	// cookie is set when the request came with a session cookie.
	cookie bool
}

const ctxUIAuth = "guard.uiauth"

func uiAuthFrom(c *gin.Context) *uiAuth {
	v, _ := c.Get(ctxUIAuth)
	a, _ := v.(*uiAuth)
	return a
}

// sessions signs and checks session cookies and CSRF tokens.
type sessions struct {
	secret []byte
	now    func() time.Time

	mu      sync.Mutex
	revoked map[string]time.Time // nonce -> when no copy of its cookie can be valid any more
	// sharedWarned is when a failure of the shared sign-outs was last
	// logged (unix ns): at most one warning a minute.
	sharedWarned atomic.Int64
	// unshared are the sign-outs the shared store could not record yet.
	unshared unsharedSignOuts
}

// session is what a valid cookie says.
type session struct {
	key      *apiKey
	nonce    string
	signedIn time.Time // when the session began (the sign-in)
	exp      time.Time // when this cookie expires
}

func newSessions(secret []byte, now func() time.Time) *sessions {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	return &sessions{secret: append([]byte(nil), secret...), now: now, revoked: map[string]time.Time{},
		unshared: unsharedSignOuts{now: now, first: signOutRetry}}
}

func (s *sessions) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.secret)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// cookieValue is "v2.<name b64>.<sign-in unix>.<expiry unix>.<nonce>.<mac b64>".
// (v1 cookies, without the sign-in time, are no session any more.)
func (s *sessions) cookieValue(k *apiKey, nonce string, signedIn, exp time.Time) string {
	name := base64.RawURLEncoding.EncodeToString([]byte(k.name))
	in := strconv.FormatInt(signedIn.Unix(), 10)
	e := strconv.FormatInt(exp.Unix(), 10)
	sum := s.mac("session/v2", name, in, e, nonce, hex.EncodeToString(k.digest[:]))
	return "v2." + name + "." + in + "." + e + "." + nonce + "." + base64.RawURLEncoding.EncodeToString(sum)
}

// parse checks a cookie value against the configured keys.
func (s *sessions) parse(keys []apiKey, v string) (session, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 6 || parts[0] != "v2" || len(v) > 512 {
		return session{}, false
	}
	nameB, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return session{}, false
	}
	inUnix, err := strconv.ParseInt(parts[2], 10, 64)
	if err != nil {
		return session{}, false
	}
	expUnix, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return session{}, false
	}
	sum, err := base64.RawURLEncoding.DecodeString(parts[5])
	if err != nil {
		return session{}, false
	}
	now := s.now()
	signedIn, exp := time.Unix(inUnix, 0), time.Unix(expUnix, 0)
	if !now.Before(exp) || exp.Sub(now) > SessionTTL+sessionSkew ||
		signedIn.After(now.Add(sessionSkew)) || exp.After(signedIn.Add(SessionLifetime)) {
		return session{}, false
	}
	name := string(nameB)
	for i := range keys {
		if keys[i].name != name {
			continue
		}
		want := s.mac("session/v2", parts[1], parts[2], parts[3], parts[4], hex.EncodeToString(keys[i].digest[:]))
		if !hmac.Equal(sum, want) {
			return session{}, false
		}
		if s.isRevoked(parts[4]) {
			return session{}, false
		}
		return session{key: &keys[i], nonce: parts[4], signedIn: signedIn, exp: exp}, true
	}
	return session{}, false
}

func (s *sessions) isRevoked(nonce string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.revoked[nonce]
	return ok
}

// revoke ends the session of nonce on this instance. A session keeps its
// nonce when renewed, so copies of its cookie may expire later than the
// one signed out with; but none expires past now+SessionTTL (a copy
// renewed just now) and none can be renewed once revoked: the nonce is
// kept that long, and a little more for clock skew.
func (s *sessions) revoke(nonce string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for n, e := range s.revoked {
		if !now.Before(e) {
			delete(s.revoked, n)
		}
	}
	s.revoked[nonce] = s.revokedUntil()
}

// revokedUntil is how long a sign-out must be remembered: past it no copy
// of the session's cookie can be valid.
func (s *sessions) revokedUntil() time.Time { return s.now().Add(SessionTTL + sessionSkew) }

// nonceDigest names a session in the shared sign-outs.
func nonceDigest(nonce string) []byte {
	d := sha256.Sum256([]byte("guard review session\x00" + nonce))
	return d[:]
}

// warnShared logs a failure of the shared sign-outs, once a minute at
// most: while Postgres is down every page view would log it.
func (s *sessions) warnShared(c *gin.Context, msg string, err error) {
	now := time.Now().UnixNano()
	last := s.sharedWarned.Load()
	if now-last < int64(time.Minute) || !s.sharedWarned.CompareAndSwap(last, now) {
		return
	}
	loggerFrom(c).Warn(msg, "err", err)
}

// sharedRevoked reports whether the session of nonce was signed out on
// another instance (Deps.Revocations), and then remembers it here too. A
// store that fails or does not answer within revocationWait leaves it to
// this instance's own sign-outs: the pages need Postgres anyway, and
// Bearer and Basic requests never depend on it.
func (s *server) sharedRevoked(c *gin.Context, nonce string) bool {
	if s.deps.Revocations == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(c.Request.Context(), revocationWait)
	defer cancel()
	revoked, err := s.deps.Revocations.SessionRevoked(ctx, nonceDigest(nonce))
	if err != nil {
		s.sess.warnShared(c, "review sign-outs of other instances not read: only this instance's hold", err)
		return false
	}
	if revoked {
		s.sess.revoke(nonce)
	}
	return revoked
}

// csrfToken is the form token of a session.
func (s *sessions) csrfToken(sid string) string {
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", sid)[:18])
}

func (s *sessions) validCSRF(sid, token string) bool {
	want := s.csrfToken(sid)
	return len(token) == len(want) && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

func newNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// setSessionCookie writes the session cookie for k, of a session begun at
// signedIn: valid SessionTTL from now, but not past SessionLifetime from
// signedIn.
func (s *server) setSessionCookie(c *gin.Context, k *apiKey, nonce string, signedIn time.Time) {
	now := s.now()
	exp := now.Add(SessionTTL)
	if end := signedIn.Add(SessionLifetime); exp.After(end) {
		exp = end
	}
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: s.sess.cookieValue(k, nonce, signedIn, exp), Path: "/ui",
		Expires: exp, MaxAge: int(exp.Sub(now) / time.Second),
		HttpOnly: true, Secure: secureCookie(c.Request), SameSite: http.SameSiteStrictMode,
	})
}

func clearSessionCookie(c *gin.Context) {
	http.SetCookie(c.Writer, &http.Cookie{
		Name: sessionCookie, Value: "", Path: "/ui", MaxAge: -1,
		HttpOnly: true, Secure: secureCookie(c.Request), SameSite: http.SameSiteStrictMode,
	})
}

// secureCookie reports whether the session cookie is marked Secure: always,
// except for plain HTTP straight to a loopback host (localhost,
// *.localhost, 127.0.0.0/8, [::1]; local development and tests, whose
// clients do not send a Secure cookie over http). Guard does not serve
// TLS itself, so r.TLS says nothing about what the browser used: a
// request a reverse proxy forwarded (it names the public side in
// X-Forwarded-Proto, X-Forwarded-Host or Forwarded) is Secure even when
// the proxy sent Host: 127.0.0.1, as nginx does by default.
func secureCookie(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	for _, h := range []string{"X-Forwarded-Proto", "X-Forwarded-Host", "Forwarded"} {
		if r.Header.Get(h) != "" {
			return true
		}
	}
	return !loopbackHost(r.Host)
}

// loopbackHost reports whether a Host header (with or without port) names
// the local machine.
func loopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" && a.Unmap().IsLoopback()
}

// requireUI authenticates a review request by Bearer header, HTTP Basic
// (the key as the password) or session cookie, and authorises it for
// scope. A browser without credentials is sent to the sign-in form; other
// clients get 401 with a Basic challenge. A session is renewed once half
// of it has passed, until SessionLifetime after sign-in.
func (s *server) requireUI(scope string) gin.HandlerFunc {
	return func(c *gin.Context) {
		a := s.uiAuthenticate(c)
		if a == nil {
			if wantsHTML(c) && (c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead) {
				redirectGET(c, http.StatusSeeOther, "/ui/login?next="+url.QueryEscape(c.Request.URL.RequestURI()))
				c.Abort()
				return
			}
			c.Header("WWW-Authenticate", `Basic realm="Guard review pages", charset="UTF-8"`)
			writeError(c, errUnauthenticated)
			return
		}
		if st := stateFrom(c); st != nil {
			st.key = a.key
		} else {
			c.Set(ctxState, &reqState{base: slog.New(slog.DiscardHandler), key: a.key})
		}
		c.Set(ctxUIAuth, a)
		if !a.key.has(scope) {
			s.renderError(c, http.StatusForbidden, "Not allowed", "The key "+a.key.name+" lacks the "+scope+" scope for this page or action.")
			return
		}
		c.Next()
	}
}

func (s *server) uiAuthenticate(c *gin.Context) *uiAuth {
	if token, ok := bearer(c.GetHeader("Authorization")); ok {
		if k, ok := lookup(s.keys, token); ok {
			return &uiAuth{key: k, sid: "bearer:" + k.name, csrfFree: true}
		}
		return nil
	}
	if _, pw, ok := c.Request.BasicAuth(); ok && pw != "" {
		if k, ok := lookup(s.keys, pw); ok {
			return &uiAuth{key: k, sid: "basic:" + k.name}
		}
		return nil
	}
	ck, err := c.Request.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	sess, ok := s.sess.parse(s.keys, ck.Value)
	if !ok || s.sharedRevoked(c, sess.nonce) {
		return nil
	}
	if sess.exp.Sub(s.now()) < SessionTTL/2 && sess.exp.Before(sess.signedIn.Add(SessionLifetime)) {
		s.setSessionCookie(c, sess.key, sess.nonce, sess.signedIn)
	}
	return &uiAuth{key: sess.key, sid: sess.nonce, cookie: true}
}

// checkCSRF guards a state-changing review request: the form's csrf token
// must be the session's (Bearer requests excepted), and a request that
// names its Origin must come from this site.
func (s *server) checkCSRF(c *gin.Context) bool {
	a := uiAuthFrom(c)
	if !sameOrigin(c) {
		s.renderError(c, http.StatusForbidden, "Request refused", "The request came from another site.")
		return false
	}
	if a != nil && a.csrfFree {
		return true
	}
	if a == nil || !s.sess.validCSRF(a.sid, c.PostForm("csrf")) {
		s.renderError(c, http.StatusForbidden, "Request refused",
			"The form's security token is missing or stale. Reload the page and try again.")
		return false
	}
	return true
}

// sameOrigin reports whether a post's Origin header, when it has one, names
// this site: the request's Host, or the X-Forwarded-Host a reverse proxy
// set (a cross-site form cannot set that header). "null" (an opaque
// origin: a sandboxed frame, a data: page) is refused.
func sameOrigin(c *gin.Context) bool {
	o := c.GetHeader("Origin")
	if o == "" {
		return true
	}
	u, err := url.Parse(o)
	if err != nil || o == "null" || u.Host == "" {
		return false
	}
	if u.Host == c.Request.Host {
		return true
	}
	for _, h := range strings.Split(c.GetHeader("X-Forwarded-Host"), ",") {
		if strings.TrimSpace(h) == u.Host {
			return true
		}
	}
	return false
}

// wantsHTML reports whether the client asked for a page (a browser).
func wantsHTML(c *gin.Context) bool {
	return strings.Contains(c.GetHeader("Accept"), "text/html")
}

// safeNext keeps a post-sign-in redirect on the review pages: a path
// that is /ui or below it once cleaned (the redirect cleans it too, so
// /ui/../v1 would leave them), with no control characters (a NUL made a
// redirect without Location), never the sign-in or sign-out page.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "/ui/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.Opaque != "" {
		return "/ui/"
	}
	clean := path.Clean(u.Path)
	if clean != "/ui" && !strings.HasPrefix(clean, "/ui/") {
		return "/ui/"
	}
	// Cleaned and decoded too: /ui/./login and /ui/%6cogin are the form.
	if strings.HasPrefix(clean, "/ui/login") || strings.HasPrefix(clean, "/ui/logout") {
		return "/ui/"
	}
	return next
}

// handleUILoginForm renders the sign-in form.
func (s *server) handleUILoginForm(c *gin.Context) {
	s.renderPage(c, http.StatusOK, s.ui.login, "Sign in", loginData{Next: safeNext(c.Query("next"))})
}

type loginData struct {
	Next, Error string
}

// handleUILogin checks the key of the sign-in form and starts a session.
// A wrong key, or one without audit:read, re-renders the form (401/403)
// without saying which keys exist. A client address with signInFailures
// refused sign-ins in the last signInWindow gets 429 with Retry-After,
// without its key being checked.
func (s *server) handleUILogin(c *gin.Context) {
	next := safeNext(c.PostForm("next"))
	if !sameOrigin(c) {
		s.renderError(c, http.StatusForbidden, "Request refused", "The request came from another site.")
		return
	}
	peer, client := s.signInAddrs(c)
	who := signInClient(client)
	if wait, blocked := s.signInBlocked(c, who); blocked {
		secs := int((wait + time.Second - 1) / time.Second)
		loggerFrom(c).Warn("review sign-in refused", "reason", "too many refused sign-ins", "peer", peer, "client", client)
		c.Header("Retry-After", strconv.Itoa(secs))
		s.renderPage(c, http.StatusTooManyRequests, s.ui.login, "Sign in", loginData{Next: next,
			Error: "Too many refused sign-ins from your address: try again in " + strconv.Itoa(secs) + " s."})
		return
	}
	key := strings.TrimSpace(c.PostForm("key"))
	k, ok := lookup(s.keys, key)
	if key == "" || !ok {
		s.signInRefused(c, who)
		loggerFrom(c).Info("review sign-in refused", "reason", "unknown key", "peer", peer, "client", client)
		s.renderPage(c, http.StatusUnauthorized, s.ui.login, "Sign in", loginData{Next: next, Error: "That key is not valid."})
		return
	}
	if !k.has(ScopeAuditRead) {
		s.renderPage(c, http.StatusForbidden, s.ui.login, "Sign in", loginData{Next: next,
			Error: "That key may not read the audit trail (it needs the audit:read or admin scope)."})
		return
	}
	// Whole seconds, as the cookie carries it: the lifetime is not cut
	// short by the fraction a renewal would drop.
	s.setSessionCookie(c, k, newNonce(), s.now().Truncate(time.Second))
	loggerFrom(c).Info("review sign-in", "key", k.name)
	c.Redirect(http.StatusSeeOther, next)
}

// signInAddrs are a sign-in's peer address and its client's: the
// X-Forwarded-For client when the peer is a trusted proxy
// (forward_auth.trusted_proxies, as forward-auth reads it), else the peer.
func (s *server) signInAddrs(c *gin.Context) (peer, client string) {
	peer = c.Request.RemoteAddr
	if ap, err := netip.ParseAddrPort(peer); err == nil {
		peer = ap.Addr().Unmap().WithZone("").String()
	}
	client, err := s.fwd.clientIP(c.Request)
	if err != nil {
		// A trusted proxy sent a bad header: count the proxy itself.
		client = peer
	}
	return peer, client
}

// shareRevocation records a sign-out for the other instances
// (Deps.Revocations). When the store fails, the sign-out holds here at
// once and is recorded again in the background (unsharedSignOuts), and
// the log says so.
func (s *server) shareRevocation(c *gin.Context, nonce string) {
	if s.deps.Revocations == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), revocationWait)
	defer cancel()
	digest, until := nonceDigest(nonce), s.sess.revokedUntil()
	if err := s.deps.Revocations.RevokeSession(ctx, digest, until); err != nil {
		loggerFrom(c).Warn("review sign-out not shared with the other instances yet: it holds on this one, and is retried in the background", "err", err)
		s.sess.unshared.add(s.deps.Revocations, s.log, digest, until)
	}
}

// handleUILogout ends the session (CSRF-checked: signing someone out is a
// state change too).
// Without a valid session there is nothing to end: the cookie is cleared
// all the same.
func (s *server) handleUILogout(c *gin.Context) {
	if a := s.uiAuthenticate(c); a != nil {
		c.Set(ctxUIAuth, a)
		if !s.checkCSRF(c) {
			return
		}
	}
	if ck, err := c.Request.Cookie(sessionCookie); err == nil {
		if sess, ok := s.sess.parse(s.keys, ck.Value); ok {
			s.sess.revoke(sess.nonce)
			s.shareRevocation(c, sess.nonce)
		}
	}
	clearSessionCookie(c)
	c.Redirect(http.StatusSeeOther, "/ui/login")
}
