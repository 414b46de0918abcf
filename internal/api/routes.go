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

	// Review pages (scope audit:read to see, admin to act): server-rendered
	// HTML without script. A browser signs in with a key (session cookie);
	// scripts may send the key as Bearer or as the HTTP Basic password.
	review := s.requireUI(ScopeAuditRead)
	act := s.requireUI(ScopeAdmin)
	e.GET("/ui/static/guard.css", handleUICSS)
	e.GET("/ui/login", s.handleUILoginForm)
	e.POST("/ui/login", s.handleUILogin)
	e.POST("/ui/logout", s.handleUILogout)
	e.GET("/ui", redirect("/ui/"))
	e.GET("/ui/", review, s.handleUIOverview)
	e.GET("/ui/events", review, s.handleUIEvents)
	e.GET("/ui/events/:id", review, s.handleUIEvent)
	e.GET("/ui/export", review, s.handleUIExport)
	e.GET("/ui/lockouts", review, s.handleUILockouts)
	e.POST("/ui/lockouts/unlock", act, s.handleUIUnlock)
	e.POST("/ui/lockouts/unlock-many", act, s.handleUIUnlockMany)
	e.POST("/ui/lockouts/lock", act, s.handleUILock)

	// Operations (no key).
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/metrics", s.handleMetrics)
	return e
}

func redirect(to string) gin.HandlerFunc {
	return func(c *gin.Context) { c.Redirect(http.StatusFound, to) }
}
