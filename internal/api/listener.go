package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/guardhq/guard/sdk"
)

// Listener wraps ln so that the answers net/http writes by itself, before
// any handler runs, are Guard's error answers too: a malformed request
// line or header (400), a header section over MaxHeaderBytes (431), a
// transfer coding or protocol version it does not support (net/http's 501
// and 505, here 400: no input makes Guard answer 5xx) and an Expect it
// does not know (417). Each gets the JSON error body and an X-Request-Id,
// as every answer does (contract "Errors", v1.1 "HTTP conformance"), and
// still closes the connection; net/http's 200 to "OPTIONS *" gets the
// X-Request-Id. Every other write passes through untouched.
//
// The server must be set up with WireServer: a write is only ever taken
// for net/http's own answer while no handler's answer is under way on its
// connection (from the handler's start until net/http has finished the
// answer and gone idle), so no part of a body, whatever it holds, is
// rewritten.
func Listener(ln net.Listener) net.Listener { return wireListener{ln} }

// WireServer sets srv up for a Listener: it marks each connection busy
// while a handler answers on it (srv.Handler, ConnContext) and idle again
// when net/http is done with the answer (ConnState). Call it after
// setting srv.Handler.
func WireServer(srv *http.Server) {
	h := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(wireConnKey{}).(*wireConn); ok {
			c.answering.Store(true)
		}
		h.ServeHTTP(w, r)
	})
	connContext := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if connContext != nil {
			ctx = connContext(ctx, c)
		}
		if wc, ok := c.(*wireConn); ok {
			ctx = context.WithValue(ctx, wireConnKey{}, wc)
		}
		return ctx
	}
	connState := srv.ConnState
	srv.ConnState = func(c net.Conn, st http.ConnState) {
		if wc, ok := c.(*wireConn); ok && st == http.StateIdle {
			wc.answering.Store(false)
		}
		if connState != nil {
			connState(c, st)
		}
	}
}

type wireConnKey struct{}

type wireListener struct{ net.Listener }

func (l wireListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c}, nil
}

// wireConn is a connection whose writes outside a handler's answer may be
// net/http's own answers (rewriteServerAnswer).
type wireConn struct {
	net.Conn
	answering atomic.Bool // a handler's answer is under way
}

func (c *wireConn) Write(p []byte) (int, error) {
	if c.answering.Load() {
		return c.Conn.Write(p)
	}
	out, ok := rewriteServerAnswer(p)
	if !ok {
		return c.Conn.Write(p)
	}
	if _, err := c.Conn.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// CloseWrite lets net/http half-close a TCP connection after an answer it
// wrote itself, as it does on a *net.TCPConn.
func (c *wireConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// netHTTPErrorHeaders follow the status line of every answer net/http
// writes itself on a request it cannot read (server.go, conn.serve). An
// answer of a handler never starts so: net/http writes a handler's header
// fields sorted (Connection before Content-Type), then Date.
const netHTTPErrorHeaders = "\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n"

// globalOptionsAnswer is how net/http's answer to "OPTIONS *" goes on
// after its version, and expectationFailedAnswer its 417
// (sendExpectationFailed); a handler's answer always carries X-Request-Id
// (sorted before Date) instead.
const (
	globalOptionsAnswer     = "200 OK\r\nContent-Length: 0\r\nDate: "
	expectationFailedAnswer = "417 Expectation Failed\r\nConnection: close\r\nDate: "
)

// rewriteServerAnswer returns Guard's answer for p when p is one that
// net/http wrote by itself: an error answer of conn.serve, 417, which no
// handler of Guard's writes, or the answer to "OPTIONS *".
func rewriteServerAnswer(p []byte) ([]byte, bool) {
	// net/http's own answers are one short write each: a longer write is
	// never rewritten. Its error answers always say HTTP/1.1; its 417 and
	// its answer to OPTIONS * follow the request's version.
	if len(p) < 12 || len(p) > 512 {
		return nil, false
	}
	proto := string(p[:9])
	if proto != "HTTP/1.1 " && proto != "HTTP/1.0 " {
		return nil, false
	}
	end := bytes.Index(p[:min(len(p), 200)], []byte("\r\n"))
	if end < len(proto)+3 {
		return nil, false
	}
	code, err := strconv.Atoi(string(p[len(proto) : len(proto)+3]))
	if err != nil {
		return nil, false
	}
	rest := p[len(proto):] // the answer after its version
	var message string
	switch {
	case bytes.HasPrefix(rest, []byte(globalOptionsAnswer)) && bytes.HasSuffix(p, []byte("\r\n\r\n")):
		// OPTIONS *, which net/http answers itself: 200 with no body,
		// given the request id every answer carries.
		out := make([]byte, 0, len(p)+64)
		out = append(out, p[:end]...)
		out = append(out, "\r\nX-Request-Id: "...)
		out = append(out, newRequestID()...)
		return append(out, p[end:]...), true
	case bytes.HasPrefix(rest, []byte(expectationFailedAnswer)) && bytes.HasSuffix(p, []byte("\r\nContent-Length: 0\r\n\r\n")):
		message = "unsupported Expect header; only 100-continue is supported"
	case proto == "HTTP/1.1 " && bytes.HasPrefix(p[end:], []byte(netHTTPErrorHeaders)):
		body := string(p[end+len(netHTTPErrorHeaders):])
		switch code {
		case http.StatusRequestHeaderFieldsTooLarge:
			message = "request header fields too large"
		case http.StatusNotImplemented:
			// "Unsupported transfer encoding": bad input, so 400.
			code, message = http.StatusBadRequest, "unsupported Transfer-Encoding; only chunked is supported"
		case http.StatusHTTPVersionNotSupported:
			code, message = http.StatusBadRequest, "unsupported HTTP version"
		default:
			// "400 Bad Request: <why>", or a bare "400 Bad Request".
			message = "malformed HTTP request"
			if _, why, ok := strings.Cut(body, ": "); ok && why != "" {
				message = "malformed HTTP request: " + why
			}
			if code >= 500 {
				code = http.StatusBadRequest
			}
		}
	default:
		return nil, false
	}
	errCode := sdk.CodeInvalidRequest
	if code == http.StatusRequestHeaderFieldsTooLarge {
		errCode = sdk.CodeTooLarge
	}
	id := newRequestID()
	body, _ := json.Marshal(errorBody{Error: errorDetail{Code: errCode, Message: message, RequestID: id}})
	var b bytes.Buffer
	b.WriteString(proto)
	b.WriteString(strconv.Itoa(code))
	b.WriteByte(' ')
	b.WriteString(http.StatusText(code))
	b.WriteString("\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: ")
	b.WriteString(strconv.Itoa(len(body)))
	b.WriteString("\r\nContent-Type: application/json; charset=utf-8\r\nDate: ")
	b.WriteString(time.Now().UTC().Format(http.TimeFormat))
	b.WriteString("\r\nX-Request-Id: ")
	b.WriteString(id)
	b.WriteString("\r\n\r\n")
	b.Write(body)
	return b.Bytes(), true
}
