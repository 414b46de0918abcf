package api_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/api"
)

// TestListenerAnswersNetHTTPErrorsAsGuard sends requests that net/http
// answers by itself, before any handler, and holds each answer to Guard's
// error form: JSON {"error": {code, message, request_id}}, the same id in
// X-Request-Id, no 5xx, the connection closed; a good request on the same
// listener passes through untouched and keeps its connection.
func TestListenerAnswersNetHTTPErrorsAsGuard(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Header().Set("Connection", "close") // still not net/http's own answer
			_, _ = io.WriteString(w, "fine")
		}),
		MaxHeaderBytes: 1 << 10,
	}
	api.WireServer(srv)
	go func() { _ = srv.Serve(api.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()

	cases := []struct {
		name, req string
		status    int
		code      string
		message   string
	}{
		{"no host", "GET /x HTTP/1.1\r\n\r\n", 400, "invalid_request", "malformed HTTP request: missing required Host header"},
		{"garbage", "NONSENSE\r\n\r\n", 400, "invalid_request", "malformed HTTP request"},
		{"bad header line", "GET /x HTTP/1.1\r\nHost: x\r\nno colon\r\n\r\n", 400, "invalid_request", "malformed HTTP request"},
		{"headers too large", "GET /x HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 8<<10) + "\r\n\r\n", 431, "too_large", "request header fields too large"},
		{"unknown transfer coding", "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", 400, "invalid_request", "unsupported Transfer-Encoding; only chunked is supported"},
		{"HTTP/3.0", "GET /x HTTP/3.0\r\nHost: x\r\n\r\n", 400, "invalid_request", "unsupported HTTP version"},
		{"unknown expectation", "GET /x HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\n\r\n", 417, "invalid_request", "unsupported Expect header; only 100-continue is supported"},
		{"unknown expectation, HTTP/1.0", "GET /x HTTP/1.0\r\nHost: x\r\nExpect: teapot\r\n\r\n", 417, "invalid_request", "unsupported Expect header; only 100-continue is supported"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.WriteString(conn, tc.req); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			if !resp.Close {
				t.Error("connection not closed")
			}
			var e struct {
				Error struct {
					Code      string `json:"code"`
					Message   string `json:"message"`
					RequestID string `json:"request_id"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			if e.Error.Code != tc.code || e.Error.Message != tc.message {
				t.Errorf("error %+v, want code %q message %q", e.Error, tc.code, tc.message)
			}
			if id := resp.Header.Get("X-Request-Id"); id == "" || id != e.Error.RequestID {
				t.Errorf("X-Request-Id %q, body request_id %q", id, e.Error.RequestID)
			}
		})
	}

	t.Run("OPTIONS *", func(t *testing.T) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(conn, "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || resp.Header.Get("X-Request-Id") == "" || resp.ContentLength != 0 {
			t.Fatalf("OPTIONS *: %d %v, want 200 with an X-Request-Id and no body", resp.StatusCode, resp.Header)
		}
	})

	t.Run("a handler's answer passes", func(t *testing.T) {
		resp, err := http.Get("http://" + addr + "/x")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "fine" || resp.Header.Get("X-Request-Id") != "" {
			t.Fatalf("%d %q %v", resp.StatusCode, body, resp.Header)
		}
	})
}

// TestListenerLeavesBodiesAlone: a handler's body whose flushed writes
// start like each of net/http's own answers (an attacker's identifier in
// an audit export can put any text there) reaches the client byte for
// byte, on a connection that stays usable.
func TestListenerLeavesBodiesAlone(t *testing.T) {
	patterns := []string{
		"HTTP/1.1 4\r\n",
		"HTTP/1.1 \r\n",
		"HTTP/1.1 417 Expectation Failed\r\nConnection: close\r\nDate: x\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request",
		"HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n431 Request Header Fields Too Large",
		"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nDate: x\r\n\r\n",
	}
	var body strings.Builder
	for _, p := range patterns {
		body.WriteString(p)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(body.Len()))
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for _, p := range patterns { // each its own write to the connection
			_, _ = io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	})}
	api.WireServer(srv)
	go func() { _ = srv.Serve(api.Listener(ln)) }()
	t.Cleanup(func() { _ = srv.Close() })
	client := &http.Client{Timeout: 5 * time.Second}
	for i := range 3 { // the same kept-alive connection
		resp, err := client.Get("http://" + ln.Addr().String() + "/export")
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(got) != body.String() {
			t.Fatalf("request %d: %d %q, %v; want the body untouched", i, resp.StatusCode, got, err)
		}
	}
}
