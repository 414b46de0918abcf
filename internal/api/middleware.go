package api

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/gin-gonic/gin"
)

// Context keys of values the middleware hands to handlers.
const (
	ctxLogger = "guard.logger"
	ctxKey    = "guard.key"
)

// maxRequestIDLen bounds a caller-supplied X-Request-ID.
const maxRequestIDLen = 128

// requestID takes the caller's X-Request-ID when it is a sane token (so a
// proxy's id follows the request through Guard's logs), else makes one; it
// echoes it on the answer and puts a logger carrying it on the context.
func requestID(base *slog.Logger) gin.HandlerFunc {
	return func(c *gin.Context) {
		id := c.GetHeader("X-Request-ID")
		if !validRequestID(id) {
			id = newRequestID()
		}
		c.Header("X-Request-ID", id)
		c.Set(ctxLogger, base.With("request_id", id))
		c.Next()
	}
}

func validRequestID(id string) bool {
	if id == "" || len(id) > maxRequestIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		ok := b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' ||
			b == '-' || b == '_' || b == '.' || b == ':' || b == '/' || b == '+' || b == '='
		if !ok {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}

// loggerFrom returns the request's logger (with its request id).
func loggerFrom(c *gin.Context) *slog.Logger {
	if v, ok := c.Get(ctxLogger); ok {
		if l, ok := v.(*slog.Logger); ok {
			return l
		}
	}
	return slog.New(slog.DiscardHandler)
}

// accessLog writes one line per request. It logs the path but not the
// query (which may hold identifiers) and never the Authorization header;
// the key's name is logged once authenticated.
func accessLog(now func() time.Time) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := now()
		c.Next()
		attrs := []any{
			"method", c.Request.Method,
			"path", c.Request.URL.Path,
			"status", c.Writer.Status(),
			"duration_ms", float64(now().Sub(start).Microseconds()) / 1000,
			"bytes", c.Writer.Size(),
		}
		if k, ok := keyFrom(c); ok {
			attrs = append(attrs, "api_key", k.name)
		}
		level := slog.LevelInfo
		if c.Writer.Status() >= 500 {
			level = slog.LevelError
		}
		loggerFrom(c).Log(c.Request.Context(), level, "request", attrs...)
	}
}

// recovery turns a panic into 500 internal with the error body (when
// nothing was written yet) and logs the stack; http.ErrAbortHandler is
// passed on so net/http aborts the connection as intended.
func recovery() gin.HandlerFunc {
	return func(c *gin.Context) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			if r == http.ErrAbortHandler {
				panic(r)
			}
			loggerFrom(c).Error("panic serving request", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			if c.Writer.Written() {
				c.Abort()
				return
			}
			writeError(c, fmt.Errorf("%w: %v", errPanic, r))
		}()
		c.Next()
	}
}
