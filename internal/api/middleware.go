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

// ctxState is the context key of the request's *reqState.
const ctxState = "guard.request"

// reqState is what the middleware hands to handlers, in one allocation
// per request: the request id, the authenticated key, and the logger
// carrying the id, built only when something is logged (slog's With
// formats the attribute up front, which is wasted work on the many
// requests that log nothing).
type reqState struct {
	id     string
	base   *slog.Logger
	logger *slog.Logger
	key    *apiKey
}

// stateFrom returns the request's state, nil outside the middleware.
func stateFrom(c *gin.Context) *reqState {
	if v, ok := c.Get(ctxState); ok {
		if st, ok := v.(*reqState); ok {
			return st
		}
	}
	return nil
}

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
		// The canonical key, set directly: the same header on the wire
		// without canonicalising the name on every request.
		c.Writer.Header()["X-Request-Id"] = []string{id}
		c.Set(ctxState, &reqState{id: id, base: base})
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
	st := stateFrom(c)
	if st == nil {
		return slog.New(slog.DiscardHandler)
	}
	if st.logger == nil {
		st.logger = st.base.With("request_id", st.id)
	}
	return st.logger
}

// accessLog writes one line per request. It logs the path but not the
// query (which may hold identifiers) and never the Authorization header;
// the key's name is logged once authenticated.
func accessLog(now func() time.Time) gin.HandlerFunc {
	return func(c *gin.Context) {
		start := now()
		c.Next()
		level := slog.LevelInfo
		if c.Writer.Status() >= 500 {
			level = slog.LevelError
		}
		ctx := c.Request.Context()
		// Enabled does not depend on the request id attribute, so the
		// base logger answers it without building the request's logger;
		// when the level is off nothing below is worth computing.
		if st := stateFrom(c); st == nil || !st.base.Enabled(ctx, level) {
			return
		}
		// The body's bytes as sent: none for HEAD (net/http discards
		// what the handler writes), 0 rather than gin's -1 when nothing
		// was written.
		size := max(c.Writer.Size(), 0)
		if c.Request.Method == http.MethodHead {
			size = 0
		}
		attrs := []any{
			"method", c.Request.Method,
			"path", c.Request.URL.Path,
			"status", c.Writer.Status(),
			"duration_ms", float64(now().Sub(start).Microseconds()) / 1000,
			"bytes", size,
		}
		if k, ok := keyFrom(c); ok {
			attrs = append(attrs, "api_key", k.name)
		}
		loggerFrom(c).Log(ctx, level, "request", attrs...)
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

// closeAfterChunked closes the connection after answering a request that
// came with Transfer-Encoding. A request with both Transfer-Encoding and
// Content-Length is a smuggling attempt (RFC 9112 §6.1, §11.2): a proxy in
// front that framed it by Content-Length may have put a second request
// where Guard sees body, or the reverse, so nothing more is read from that
// connection. net/http removes the Content-Length of a chunked request
// before Guard sees it, so every request with Transfer-Encoding is treated
// so; callers that send chunked bodies pay a reconnect, nobody else. On
// HTTP/1.0 net/http drops Transfer-Encoding unseen (and frames the body by
// Content-Length), so every HTTP/1.0 request closes its connection: one
// that came with both cannot be told apart, and HTTP/1.0 keep-alive is
// rare (nginx's proxy_pass speaks HTTP/1.0 with Connection: close anyway).
func closeAfterChunked() gin.HandlerFunc {
	return func(c *gin.Context) {
		if len(c.Request.TransferEncoding) > 0 || !c.Request.ProtoAtLeast(1, 1) {
			c.Header("Connection", "close")
		}
		c.Next()
	}
}
