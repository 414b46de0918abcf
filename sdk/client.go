package sdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of a Client; each has an Option.
const (
	// DefaultTimeout bounds a Check or Report call, retries included: a
	// Guard that accepts connections but does not answer delays a login
	// by at most this much.
	DefaultTimeout = 300 * time.Millisecond
	// DefaultAdminTimeout bounds the other calls (lockouts, policy, a
	// page of the audit trail, readiness), retries included. ExportAudit
	// streams and is bounded by its context only.
	DefaultAdminTimeout = 10 * time.Second
	// DefaultRetries is how many times a call is retried after a failure
	// that allows it (see Client).
	DefaultRetries = 2
	// DefaultMaxPendingReports bounds the reports ReportAsync runs at once.
	DefaultMaxPendingReports = 1024
)

// maxErrorBody bounds how much of an error answer the client reads.
const maxErrorBody = 64 << 10

// Backoff between attempts: full jitter over an exponentially growing
// ceiling, never past what remains of the call's timeout.
const (
	backoffBase = 20 * time.Millisecond
	backoffMax  = 250 * time.Millisecond
)

// Client calls one Guard server. It is safe for concurrent use.
//
// Every call has a deadline (WithTimeout for Check and Report, default
// 300 ms; WithAdminTimeout for the rest, default 10 s) covering all its
// attempts. A call is retried, with jittered exponential backoff, at most
// WithRetries times (default 2), and only when that cannot count an
// attempt twice: GET calls after a network error or a 5xx answer; any
// call when the connection could not be made at all (nothing was sent).
// Check and Report are POSTs that record attempts, so a timeout or a 5xx
// is not retried for them.
//
// When Guard cannot answer (network error, timeout, 5xx), Check follows
// the failure policy (WithFailurePolicy, or a FailurePolicy passed to one
// call): FailError returns the error, FailOpen and FailClosed return a
// CheckResponse with Bypassed set. Answers that say the call itself is
// wrong (4xx) are always errors, and so is a call whose context the
// caller cancelled (context.Canceled): no policy answers for a caller who
// stopped waiting.
type Client struct {
	base *url.URL
	// confErr, when set, is why no request of this client can be sent
	// (see New); every call returns it.
	confErr      error
	apiKey       string
	bearer       string // "Bearer " + apiKey
	http         *http.Client
	agent        string
	now          func() time.Time
	timeout      time.Duration
	adminTimeout time.Duration
	retries      int
	policy       FailurePolicy
	onAsyncError func(error)
	pending      sync.WaitGroup
	slots        chan struct{}
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the client send its requests through hc (default: a
// client over a clone of http.DefaultTransport). The client's deadlines
// apply on top of hc.Timeout.
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

// WithTimeout bounds each Check and Report call, retries included
// (default DefaultTimeout, 300 ms). d <= 0 leaves only the context's
// deadline.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = d }
}

// WithAdminTimeout bounds each call other than Check, Report and
// ExportAudit (default DefaultAdminTimeout, 10 s). d <= 0 leaves only the
// context's deadline.
func WithAdminTimeout(d time.Duration) Option {
	return func(c *Client) { c.adminTimeout = d }
}

// WithRetries sets how many times a call may be retried (default
// DefaultRetries, 2); 0 disables retries.
func WithRetries(n int) Option {
	return func(c *Client) { c.retries = max(n, 0) }
}

// WithFailurePolicy sets what Check does when Guard cannot answer
// (default FailError: return the error). A FailurePolicy passed to one
// Check call overrides it.
func WithFailurePolicy(p FailurePolicy) Option {
	return func(c *Client) { c.policy = p }
}

// WithAsyncErrorHandler receives the errors of reports sent with
// ReportAsync (default: dropped). It is called from the report's
// goroutine.
func WithAsyncErrorHandler(f func(error)) Option {
	return func(c *Client) { c.onAsyncError = f }
}

// WithMaxPendingReports bounds how many ReportAsync reports run at once
// (default DefaultMaxPendingReports); past it a report is dropped with
// ErrTooManyPendingReports, so a stalled Guard cannot pile up goroutines.
func WithMaxPendingReports(n int) Option {
	return func(c *Client) { c.slots = make(chan struct{}, max(n, 1)) }
}

// New returns a client of the Guard server at baseURL (e.g.
// "http://127.0.0.1:8080") that authenticates with apiKey. White space
// around apiKey (a key read from a file with its newline) is dropped: no
// HTTP header value can carry it.
//
// A client that cannot send a valid request makes every call fail with an
// error that says why, under every failure policy (it is no outage, and
// IsUnavailable reports false for it): a baseURL that is not http:// or
// https:// with a host, an apiKey or WithUserAgent value holding a control
// character. Errors never include the key.
func New(baseURL, apiKey string, opts ...Option) *Client {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		u = nil
	}
	c := &Client{
		base:         u,
		apiKey:       strings.Trim(apiKey, " \t\r\n"),
		agent:        "guard-sdk-go",
		now:          time.Now,
		timeout:      DefaultTimeout,
		adminTimeout: DefaultAdminTimeout,
		retries:      DefaultRetries,
	}
	for _, o := range opts {
		o(c)
	}
	if c.http == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConnsPerHost = 64 // one auth service, one Guard: keep connections warm
		c.http = &http.Client{Transport: t}
	}
	if c.slots == nil {
		c.slots = make(chan struct{}, DefaultMaxPendingReports)
	}
	c.bearer = "Bearer " + c.apiKey
	switch {
	case c.base == nil:
		c.confErr = errors.New("guard: invalid base URL (want http:// or https:// and a host)")
	case hasControl(c.apiKey):
		c.confErr = errors.New("guard: the API key holds a control character and cannot be sent in a header")
	case hasControl(c.agent):
		c.confErr = errors.New("guard: the user agent holds a control character and cannot be sent in a header")
	}
	return c
}

// hasControl reports whether s holds a byte no HTTP header value may
// carry (a control character other than a tab, or DEL).
func hasControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if b := s[i]; (b < 0x20 && b != '\t') || b == 0x7f {
			return true
		}
	}
	return false
}

// call is one API call as do sends it.
type call struct {
	method, path string
	query        url.Values
	body         []byte // nil: no body
	timeout      time.Duration
	// idempotent calls are retried after network errors and 5xx answers.
	idempotent bool
	// header, when set, receives the answer's headers.
	header *http.Header
}

// Check asks whether an attempt may go ahead. A denial is a successful
// call: inspect CheckResponse.Allowed. When Guard cannot answer, the
// failure policy decides (see Client); so it does for a 2xx that is not a
// check answer (not JSON, or JSON without a decision: another server at
// the URL). Other errors are *Error for non-2xx answers.
func (c *Client) Check(ctx context.Context, req CheckRequest, opts ...CallOption) (*CheckResponse, error) {
	cfg := callConfig{policy: c.policy}
	for _, o := range opts {
		o.applyCall(&cfg)
	}
	var out CheckResponse
	var h http.Header
	err := c.do(ctx, call{method: http.MethodPost, path: "/v1/check",
		body: appendCheckRequest(make([]byte, 0, 128), &req), timeout: c.timeout, header: &h}, &out)
	if err == nil && out.Decision == "" {
		// JSON, but no answer of Guard's (another server at the URL): as
		// for an answer that is not JSON at all, Guard did not answer.
		err = &unavailableError{errors.New("guard: POST /v1/check answered without a decision: is the URL Guard's?")}
	}
	if err != nil {
		// A ctx the caller cancelled is no Guard outage: nobody waits for
		// the answer, and FailOpen would let an unchecked attempt through
		// (a client that hangs up mid-login). Its deadline is one: Guard
		// did not answer within the caller's budget.
		if cfg.policy != FailError && IsUnavailable(err) && !errors.Is(ctx.Err(), context.Canceled) {
			return bypassed(cfg.policy, err), nil
		}
		return nil, err
	}
	out.RateLimit = h.Get("RateLimit")
	out.RateLimitPolicy = h.Get("RateLimit-Policy")
	return &out, nil
}

// Report tells Guard how an attempt ended. It is bounded by the client's
// timeout like Check; use ReportAsync to send it without waiting.
func (c *Client) Report(ctx context.Context, req ReportRequest) (*ReportResponse, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("guard: encode report: %w", err)
	}
	var out ReportResponse
	if err := c.do(ctx, call{method: http.MethodPost, path: "/v1/report", body: b, timeout: c.timeout}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Lockouts lists one page of the active lockouts that match f (scope
// admin); the answer's NextCursor, as f.Cursor, asks for the next.
func (c *Client) Lockouts(ctx context.Context, f LockoutFilter) (*LockoutsResponse, error) {
	q := url.Values{}
	for k, v := range map[string]string{"user": f.User, "ip": f.IP, "device": f.Device, "phone": f.Phone,
		"dimension": f.Dimension, "ledger": f.Ledger, "cursor": f.Cursor} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if f.Limit != 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	var out LockoutsResponse
	if err := c.do(ctx, c.get("/v1/lockouts", q), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Unlock lifts a lockout (scope admin). When nothing was locked the error
// is an *Error with Status 404 and Code CodeNotFound. It is not retried
// after a timeout: a first call that did arrive would make the retry 404.
func (c *Client) Unlock(ctx context.Context, req UnlockRequest) error {
	b, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("guard: encode unlock: %w", err)
	}
	var out UnlockResponse
	return c.do(ctx, call{method: http.MethodDelete, path: "/v1/lockouts", body: b, timeout: c.adminTimeout}, &out)
}

// Policy returns the effective policy (scope admin).
func (c *Client) Policy(ctx context.Context) (*Policy, error) {
	var out Policy
	if err := c.do(ctx, c.get("/v1/policy", nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Audit returns one page of audit events, newest first (scope
// audit:read). Pass the page's NextCursor as f.Cursor for the next one.
func (c *Client) Audit(ctx context.Context, f AuditFilter) (*AuditPage, error) {
	var out AuditPage
	if err := c.do(ctx, c.get("/v1/audit", f.Values()), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExportAudit streams every event matching f (f.Limit is ignored) to w, as
// FormatNDJSON (one JSON event per line) or FormatCSV (with a header row).
// Only ctx bounds it; it is not retried (w may hold part of the answer). A
// transfer Guard or the network breaks off (Guard cuts an export whose
// store fails mid-way) is an error IsUnavailable reports; w's own error is
// returned wrapped, and is not.
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
	req, err := c.newRequest(ctx, call{method: http.MethodGet, path: "/v1/audit", query: f.Values()})
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	resp, err := c.http.Do(req)
	if err != nil {
		return &unavailableError{fmt.Errorf("guard: export audit: %w", err)}
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.errorFrom(resp)
	}
	// A proxy's sign-in page or another server at the URL answers 200
	// too: copy only what Guard would send for the format asked for.
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != accept {
		return fmt.Errorf("guard: export audit: the server answered %.64q, not %s: is the URL Guard's?", resp.Header.Get("Content-Type"), accept)
	}
	body := &readErrs{r: resp.Body}
	if _, err := io.Copy(w, body); err != nil {
		if body.err != nil {
			// Guard broke off the transfer (it cuts an export whose store
			// fails mid-way), or the connection did.
			return &unavailableError{fmt.Errorf("guard: export audit: %w", err)}
		}
		return fmt.Errorf("guard: export audit: %w", err) // w's own error
	}
	return nil
}

// readErrs remembers the error its reader returned other than io.EOF, so
// that a failed copy tells Guard's broken answer from the writer's error.
type readErrs struct {
	r   io.Reader
	err error
}

func (r *readErrs) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF {
		r.err = err
	}
	return n, err
}

// Ready returns the server's readiness (no key needed). A server that
// cannot decide answers with an *Error.
func (c *Client) Ready(ctx context.Context) (*Readiness, error) {
	var out Readiness
	if err := c.do(ctx, c.get("/readyz", nil), &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Health checks that the Guard process serves (GET /healthz, no key
// needed): nil when it answers its 200 {"status": "ok"}, an *Error for
// another status, and an error IsUnavailable reports true for when it
// cannot be reached. Bounded and retried like the admin calls. Unlike
// Ready it says nothing of Redis or Postgres: use it for liveness.
func (c *Client) Health(ctx context.Context) error {
	var out struct {
		Status string `json:"status"`
	}
	if err := c.do(ctx, c.get("/healthz", nil), &out); err != nil {
		return err
	}
	if out.Status != "ok" {
		return fmt.Errorf("guard: /healthz answered status %.32q, not \"ok\": is the URL Guard's?", out.Status)
	}
	return nil
}

func (c *Client) get(path string, q url.Values) call {
	return call{method: http.MethodGet, path: path, query: q, timeout: c.adminTimeout, idempotent: true}
}

func (c *Client) newRequest(ctx context.Context, k call) (*http.Request, error) {
	if c.confErr != nil {
		return nil, c.confErr
	}
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + k.path
	u.RawQuery = k.query.Encode()
	var rd io.Reader
	if k.body != nil {
		rd = bytes.NewReader(k.body)
	}
	req, err := http.NewRequestWithContext(ctx, k.method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("guard: new request: %w", err)
	}
	// What Header.Set stores (the names are canonical), the values in
	// one backing array.
	vals := [...]string{"application/json", "application/json", c.agent, c.bearer}
	h := req.Header
	if k.body != nil {
		h["Content-Type"] = vals[0:1:1]
	}
	h["Accept"] = vals[1:2:2]
	h["User-Agent"] = vals[2:3:3]
	if c.apiKey != "" {
		h["Authorization"] = vals[3:4:4]
	}
	return req, nil
}

// do sends k until it succeeds, fails in a way that allows no retry, runs
// out of retries or of time, and decodes a 2xx answer into out.
func (c *Client) do(ctx context.Context, k call, out any) error {
	if k.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, k.timeout)
		defer cancel()
	}
	for attempt := 0; ; attempt++ {
		err, retry := c.once(ctx, k, out)
		if err == nil {
			return nil
		}
		if !retry || attempt >= c.retries {
			return err
		}
		// Full jitter: a fleet of callers that failed together does not
		// come back together.
		ceiling := min(backoffBase<<attempt, backoffMax)
		wait := time.Duration(rand.Int64N(int64(ceiling)) + 1)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= wait {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// once sends k one time; retry says whether a failure may be retried.
func (c *Client) once(ctx context.Context, k call, out any) (err error, retry bool) {
	req, err := c.newRequest(ctx, k)
	if err != nil {
		return err, false
	}
	resp, err := c.http.Do(req)
	if err != nil {
		err = &unavailableError{fmt.Errorf("guard: %s %s: %w", k.method, k.path, err)}
		return err, ctx.Err() == nil && (k.idempotent || notSent(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return c.errorFrom(resp), k.idempotent && resp.StatusCode >= 500 && ctx.Err() == nil
	}
	if k.header != nil {
		*k.header = resp.Header
	}
	if err := decodeAnswer(resp.Body, out); err != nil {
		// A connection that breaks in the middle of the answer.
		return &unavailableError{fmt.Errorf("guard: decode %s %s answer: %w", k.method, k.path, err)}, false
	}
	return nil, false
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
	e := &Error{Status: resp.StatusCode, Message: http.StatusText(resp.StatusCode),
		RequestID: resp.Header.Get("X-Request-Id")}
	if d, ok := ParseRetryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
		e.RetryAfter = d
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body errorBody
	if json.Unmarshal(b, &body) == nil && body.Error.Code != "" {
		e.Code = body.Error.Code
		e.Message = body.Error.Message
		e.Field = body.Error.Field
		if body.Error.RequestID != "" {
			e.RequestID = body.Error.RequestID
		}
	}
	return e
}
