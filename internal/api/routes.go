package api

import (
	"html"
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes is the whole HTTP surface of Guard.
const forwardAuthPath = "/v1/forward-auth"

func (s *server) routes() *gin.Engine {
	e := newEngine()
	e.Use(requestID(s.log), accessLog(s.now), recovery(), closeAfterChunked())
	e.NoRoute(func(c *gin.Context) { writeError(c, errNotFound) })
	check := requireScope(s.keys, ScopeCheck)
	// Forward-auth accepts any method (API.md): a proxy's subrequest may
	// carry the original request's, a WebDAV PROPFIND or a PURGE as well
	// as a GET. gin's Any registers the nine standard methods; any other
	// reaches NoMethod, which serves forward-auth's path the same way.
	e.NoMethod(func(c *gin.Context) {
		if c.Request.URL.Path != forwardAuthPath {
			writeError(c, errMethodNotAllowed)
			return
		}
		// gin has set Allow for a 405 already: not one.
		c.Writer.Header().Del("Allow")
		if check(c); !c.IsAborted() {
			s.handleForwardAuth(c)
		}
	})

	auditRead := requireScope(s.keys, ScopeAuditRead)
	admin := requireScope(s.keys, ScopeAdmin)
	// Every GET route also answers HEAD (RFC 9110 §9.3.2): same status
	// and headers; net/http drops the body.
	get := func(path string, h ...gin.HandlerFunc) {
		e.GET(path, h...)
		e.HEAD(path, h...)
	}

	// Decisions (scope check).
	e.POST("/v1/check", check, s.handleCheck)
	e.POST("/v1/report", check, s.handleReport)
	e.Any(forwardAuthPath, check, s.handleForwardAuth)

	// Administration (scope admin).
	get("/v1/lockouts", admin, s.handleLockouts)
	e.POST("/v1/lockouts", admin, s.handleLock)
	e.DELETE("/v1/lockouts", admin, s.handleUnlock)
	get("/v1/policy", admin, s.handlePolicy)

	// Audit trail (scope audit:read): JSON pages, NDJSON/CSV export by Accept.
	get("/v1/audit", auditRead, s.handleAudit)

	// Review pages (scope audit:read to see, admin to act): server-rendered
	// HTML without script. A browser signs in with a key (session cookie);
	// scripts may send the key as Bearer or as the HTTP Basic password.
	review := s.requireUI(ScopeAuditRead)
	act := s.requireUI(ScopeAdmin)
	get("/ui/static/guard.css", handleUICSS)
	get("/ui/login", s.handleUILoginForm)
	form := s.limitForm
	e.POST("/ui/login", form, s.handleUILogin)
	e.POST("/ui/logout", form, s.handleUILogout)
	get("/ui", redirect("/ui/"))
	get("/ui/", review, s.handleUIOverview)
	get("/ui/events", review, s.handleUIEvents)
	get("/ui/events/:id", review, s.handleUIEvent)
	get("/ui/export", review, s.handleUIExport)
	get("/ui/lockouts", review, s.handleUILockouts)
	e.POST("/ui/lockouts/unlock", form, act, s.handleUIUnlock)
	e.POST("/ui/lockouts/unlock-many", form, act, s.handleUIUnlockMany)
	e.POST("/ui/lockouts/lock", form, act, s.handleUILock)

	// Operations (no key).
	get("/healthz", s.handleHealthz)
	get("/readyz", s.handleReadyz)
	get("/metrics", s.handleMetrics)
	return e
}

func redirect(to string) gin.HandlerFunc {
	return func(c *gin.Context) { redirectGET(c, http.StatusFound, to) }
}

// redirectGET answers a GET or HEAD with a redirect to the absolute path
// to as http.Redirect answers a GET, body included: net/http drops a
// HEAD's body but still sets its Content-Length, so HEAD gets GET's
// headers (http.Redirect writes no body for HEAD, hence no length).
func redirectGET(c *gin.Context, code int, to string) {
	c.Header("Location", to)
	c.Data(code, "text/html; charset=utf-8", []byte("<a href=\""+html.EscapeString(to)+"\">"+http.StatusText(code)+"</a>.\n\n"))
}
