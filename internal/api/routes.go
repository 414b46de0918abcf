package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// routes is the whole HTTP surface of Guard.
func (s *server) routes() *gin.Engine {
	e := newEngine()
	e.Use(requestID(s.log), accessLog(s.now), recovery())
	e.NoRoute(func(c *gin.Context) { writeError(c, errNotFound) })
	e.NoMethod(func(c *gin.Context) { writeError(c, errMethodNotAllowed) })

	check := requireScope(s.keys, ScopeCheck)
	auditRead := requireScope(s.keys, ScopeAuditRead)
	admin := requireScope(s.keys, ScopeAdmin)
	review := requireBrowserScope(s.keys, ScopeAuditRead)

	// Decisions (scope check).
	e.POST("/v1/check", check, s.handleCheck)
	e.POST("/v1/report", check, s.handleReport)
	e.Any("/v1/forward-auth", check, s.handleForwardAuth)

	// Administration (scope admin).
	e.GET("/v1/lockouts", admin, s.handleLockouts)
	e.POST("/v1/lockouts", admin, s.handleLock)
	e.DELETE("/v1/lockouts", admin, s.handleUnlock)
	e.GET("/v1/policy", admin, s.handlePolicy)

	// Audit trail (scope audit:read): JSON pages, NDJSON/CSV export by Accept.
	e.GET("/v1/audit", auditRead, s.handleAudit)

	// Review pages (scope audit:read), server-rendered HTML; a browser may
	// also log in with HTTP Basic, the key as the password.
	e.GET("/ui", review, redirect("/ui/events"))
	e.GET("/ui/", review, redirect("/ui/events"))
	e.GET("/ui/events", review, s.handleUIEvents)
	e.GET("/ui/events/:id", review, s.handleUIEvent)
	e.GET("/ui/lockouts", review, s.handleUILockouts)

	// Operations (no key).
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/metrics", s.handleMetrics)
	return e
}

func redirect(to string) gin.HandlerFunc {
	return func(c *gin.Context) { c.Redirect(http.StatusFound, to) }
}
