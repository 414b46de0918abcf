package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// maxErrorBody bounds how much of an error answer the client reads.
const maxErrorBody = 64 << 10

// Client calls one Guard server. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	apiKey string
	http   *http.Client
	agent  string
	now    func() time.Time
	bearer string // "Bearer " + apiKey
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc (default:
// an http.Client with a 10 s timeout).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.http = hc }
}

// WithUserAgent sets the User-Agent header (default "guard-sdk-go").
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.agent = ua }
}

// WithClock sets the clock used to turn Retry-After dates into durations
// (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(c *Client) { c.now = now }
}

// New returns a client of the Guard server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with apiKey. A malformed
// baseURL makes every call fail with an error.
func New(baseURL, apiKey string, opts ...Option) *Client {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		u = nil
	}
	c := &Client{
		base:   u,
		apiKey: apiKey,
		http:   &http.Client{Timeout: 10 * time.Second},
		agent:  "guard-sdk-go",
		now:    time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	c.bearer = "Bearer " + c.apiKey
	return c
}

// Check asks whether an attempt may go ahead. A denial is a successful
// call: inspect CheckResponse.Decision. Errors are *Error for non-2xx
// answers.
func (c *Client) Check(ctx context.Context, req CheckRequest) (*CheckResponse, error) {
	var out CheckResponse
	if err := c.do(ctx, http.MethodPost, "/v1/check", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Report tells Guard how an attempt ended.
func (c *Client) Report(ctx context.Context, req ReportRequest) (*ReportResponse, error) {
	var out ReportResponse
	if err := c.do(ctx, http.MethodPost, "/v1/report", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Lockouts lists the active lockouts that match f (scope admin).
func (c *Client) Lockouts(ctx context.Context, f LockoutFilter) (*LockoutsResponse, error) {
	q := url.Values{}
	for k, v := range map[string]string{"user": f.User, "ip": f.IP, "device": f.Device,
		"dimension": f.Dimension, "ledger": f.Ledger} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out LockoutsResponse
	if err := c.do(ctx, http.MethodGet, "/v1/lockouts", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unlock lifts a lockout (scope admin). When nothing was locked the error
// is an *Error with Status 404 and Code CodeNotFound.
func (c *Client) Unlock(ctx context.Context, req UnlockRequest) error {
	var out UnlockResponse
	return c.do(ctx, http.MethodDelete, "/v1/lockouts", nil, req, &out)
}

// Policy returns the effective policy (scope admin).
func (c *Client) Policy(ctx context.Context) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, http.MethodGet, "/v1/policy", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Audit returns one page of audit events, newest first (scope
// audit:read). Pass the page's NextCursor as f.Cursor for the next one.
func (c *Client) Audit(ctx context.Context, f AuditFilter) (*AuditPage, error) {
	var out AuditPage
	if err := c.do(ctx, http.MethodGet, "/v1/audit", f.Values(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExportAudit streams every event matching f (f.Limit is ignored) to w, as
// FormatNDJSON (one JSON event per line) or FormatCSV (with a header row).
func (c *Client) ExportAudit(ctx context.Context, f AuditFilter, format string, w io.Writer) error {
	var accept string
	switch format {
	case FormatNDJSON:
		accept = "application/x-ndjson"
	case FormatCSV:
		accept = "text/csv"
	default:
		return fmt.Errorf("guard: unknown export format %q (want %q or %q)", format, FormatNDJSON, FormatCSV)
	}
	f.Limit = 0
	req, err := c.newRequest(ctx, http.MethodGet, "/v1/audit", f.Values(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("guard: export audit: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.errorFrom(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("guard: export audit: %w", err)
	}
	return nil
}

// Ready returns the server's readiness (no key needed). A server that
// cannot decide answers with an *Error.
func (c *Client) Ready(ctx context.Context) (*Readiness, error) {
	var out Readiness
	if err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body any) (*http.Request, error) {
	if c.base == nil {
		return nil, errors.New("guard: invalid base URL")
	}
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawQuery = q.Encode()
	var rd io.Reader
	if cr, ok := body.(CheckRequest); ok {
		rd = bytes.NewReader(appendCheckRequest(make([]byte, 0, 128), &cr))
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("guard: encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("guard: new request: %w", err)
	}
	// What Header.Set stores (the names are canonical), the values in
	// one backing array.
	vals := [...]string{"application/json", "application/json", c.agent, c.bearer}
	h := req.Header
	if body != nil {
		h["Content-Type"] = vals[0:1:1]
	}
	h["Accept"] = vals[1:2:2]
	h["User-Agent"] = vals[2:3:3]
	if c.apiKey != "" {
		h["Authorization"] = vals[3:4:4]
	}
	return req, nil
}

func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("guard: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.errorFrom(resp)
	}
	if err := decodeAnswer(resp.Body, out); err != nil {
		return fmt.Errorf("guard: decode %s %s answer: %w", method, path, err)
	}
	return nil
}

// answerBuffers holds the buffers answers are read into.
var answerBuffers = sync.Pool{New: func() any {
	b := make([]byte, 0, 1024)
	return &b
}}

// maxBufferedAnswer is how much of an answer decodeAnswer reads before it
// hands the rest to encoding/json as a stream.
const maxBufferedAnswer = 64 << 10

// decodeAnswer decodes the first JSON value of body into out, as
// json.NewDecoder(body).Decode(out) does (it reads the same stream and
// returns the same errors), but a check answer in Guard's exact form is
// read without reflection (decodeCheckResponse).
func decodeAnswer(body io.Reader, out any) error {
	bp := answerBuffers.Get().(*[]byte)
	defer answerBuffers.Put(bp)
	buf, complete, err := readUpTo((*bp)[:0], body, maxBufferedAnswer)
	*bp = buf[:0]
	if complete {
		if cr, ok := out.(*CheckResponse); ok && decodeCheckResponse(buf, cr) {
			return nil
		}
	}
	src := io.Reader(bytes.NewReader(buf))
	switch {
	case err != nil:
		src = io.MultiReader(src, errReader{err})
	case !complete:
		src = io.MultiReader(src, body)
	}
	return json.NewDecoder(src).Decode(out)
}

// readUpTo appends body to buf until EOF (complete), max bytes (not
// complete: the rest is unread) or another error (returned).
func readUpTo(buf []byte, body io.Reader, max int) (_ []byte, complete bool, _ error) {
	for len(buf) < max {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):min(cap(buf), max)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
	return buf, false, nil
}

// errReader returns err once the bytes before it are consumed.
type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

// errorFrom turns a non-2xx answer into an *Error.
func (c *Client) errorFrom(resp *http.Response) error {
	e := &Error{Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode)}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
		e.RetryAfter = d
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body ErrorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code = body.Error.Code
		e.Message = body.Error.Message
		e.Field = body.Error.Field
	}
	return e
}
