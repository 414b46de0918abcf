package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
)

// handleHealthz answers 200 while the process runs.
func (s *server) handleHealthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// handleReadyz answers 200 with the readiness report whenever Guard can
// decide (degraded included), 503 with the same body when it cannot.
func (s *server) handleReadyz(c *gin.Context) {
	r := s.deps.Readiness(c.Request.Context())
	status := http.StatusOK
	if !r.CanDecide {
		status = http.StatusServiceUnavailable
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(status, sdk.Readiness{Mode: r.Mode, Redis: r.Redis, Postgres: r.Postgres, AuditBacklog: r.AuditBacklog})
}

// handleMetrics serves the injected Prometheus handler; without one the
// endpoint does not exist.
func (s *server) handleMetrics(c *gin.Context) {
	if s.deps.Metrics == nil {
		writeError(c, errNotFound)
		return
	}
	s.deps.Metrics.ServeHTTP(c.Writer, c.Request)
}
