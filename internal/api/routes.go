package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes is the whole HTTP surface of Guard.
func (s *server) routes() *gin.Engine {
	e := newEngine()
	e.Use(requestID(s.log), accessLog(s.now), recovery(), closeAfterChunked())
	e.NoRoute(func(c *gin.Context) { writeError(c, errNotFound) })
	e.NoMethod(func(c *gin.Context) { writeError(c, errMethodNotAllowed) })

	check := requireScope(s.keys, ScopeCheck)
	auditRead := requireScope(s.keys, ScopeAuditRead)
	admin := requireScope(s.keys, ScopeAdmin)
	review := requireBrowserScope(s.keys, ScopeAuditRead)
	// Every GET route also answers HEAD (RFC 9110 §9.3.2): same status
	// and headers; net/http drops the body.
	get := func(path string, h ...gin.HandlerFunc) {
		e.GET(path, h...)
		e.HEAD(path, h...)
	}

	// Decisions (scope check).
	e.POST("/v1/check", check, s.handleCheck)
	e.POST("/v1/report", check, s.handleReport)
	e.Any("/v1/forward-auth", check, s.handleForwardAuth)

	// Administration (scope admin).
	get("/v1/lockouts", admin, s.handleLockouts)
	e.DELETE("/v1/lockouts", admin, s.handleUnlock)
	get("/v1/policy", admin, s.handlePolicy)

	// Audit trail (scope audit:read): JSON pages, NDJSON/CSV export by Accept.
	get("/v1/audit", auditRead, s.handleAudit)

	// Review pages (scope audit:read), server-rendered HTML; a browser may
	// also log in with HTTP Basic, the key as the password.
	get("/ui", review, redirect("/ui/events"))
	get("/ui/", review, redirect("/ui/events"))
	get("/ui/events", review, s.handleUIEvents)
	get("/ui/events/:id", review, s.handleUIEvent)
	get("/ui/lockouts", review, s.handleUILockouts)

	// Operations (no key).
	get("/healthz", s.handleHealthz)
	get("/readyz", s.handleReadyz)
	get("/metrics", s.handleMetrics)
	return e
}

func redirect(to string) gin.HandlerFunc {
	return func(c *gin.Context) { c.Redirect(http.StatusFound, to) }
}
