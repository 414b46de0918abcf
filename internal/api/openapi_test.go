package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/metrics"
)

// openAPIFile is docs/openapi.yaml, seen from this package.
const openAPIFile = "../../docs/openapi.yaml"

// openAPIBase is the document's server: requests go to it so that the
// router matches them.
const openAPIBase = "http://127.0.0.1:8080"

// Keys of the OpenAPI stack, one per scope.
const (
	oasCheckKey = "k-check"
	oasAuditKey = "k-audit"
	oasAdminKey = "k-admin"
)

// Answers in Prometheus's protobuf format (GET /metrics) are bytes to
// the validator.
func init() {
	openapi3filter.RegisterBodyDecoder("application/vnd.google.protobuf", openapi3filter.FileBodyDecoder)
}

// oasChecker drives Guard's real handler and holds every request and
// answer to docs/openapi.yaml.
type oasChecker struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	h      http.Handler
	// srv serves h as guard serve does (net/http with Guard's listener
	// and wiring): HEAD requests go to it, since net/http, not the
	// handler, drops a HEAD's body.
	srv  *httptest.Server
	opts *openapi3filter.Options
	// seen holds the operations exercised ("POST /v1/check").
	seen map[string]bool
}

// exchange is one request and the status Guard must answer it with.
type exchange struct {
	method, target string // target: path and query
	key            string // API key; "" sends no Authorization
	body           string
	header         http.Header     // more request headers
	ctx            context.Context // the request's context; nil: Background
	status         int
	// offDoc marks a request that breaks the document on purpose:
	// ValidateRequest must refuse it (and Guard answers status).
	offDoc bool
}

// answer is what Guard answered to a request the document routes.
type answer struct {
	w  *httptest.ResponseRecorder
	in *openapi3filter.RequestValidationInput
}

func newOASChecker(t *testing.T) *oasChecker {
	t.Helper()
	ctx := context.Background()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openAPIFile)
	if err != nil {
		t.Fatalf("load %s: %v", openAPIFile, err)
	}
	if err := doc.Validate(ctx); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openAPIFile, err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	h := oasHandler(t)
	srv := httptest.NewUnstartedServer(wireContext(h))
	srv.Listener = api.Listener(srv.Listener)
	api.WireServer(srv.Config)
	srv.Start()
	t.Cleanup(srv.Close)
	return &oasChecker{t: t, doc: doc, router: router, h: h, srv: srv, seen: map[string]bool{},
		opts: &openapi3filter.Options{AuthenticationFunc: bearerPresent, IncludeResponseStatus: true}}
}

// oasGone is a request header, only between the checker and its server,
// asking for the request's context to be cancelled before Guard sees it
// (exchange.ctx over the wire).
const oasGone = "Oas-Test-Gone"

func wireContext(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(oasGone) != "" {
			r.Header.Del(oasGone)
			ctx, cancel := context.WithCancel(r.Context())
			cancel()
			r = r.WithContext(ctx)
		}
		h.ServeHTTP(w, r)
	})
}

// oasHandler is Guard's real handler over the integration stack's
// abuse.Guard and audit store (newStack), with the policy's actions
// widened to challenges, distinct rules, counters and phones, and the
// real metrics.
func oasHandler(t *testing.T) http.Handler {
	t.Helper()
	st := newStack(t, func(c *abuse.Config) {
		c.Policy.Actions["signup"] = abuse.Action{Limits: []abuse.Rule{
			{Dimension: abuse.DimDevice, Limit: 1, Window: time.Minute, OnLimit: abuse.OnLimitChallenge},
			{Dimension: abuse.DimIP, Limit: 3, Window: time.Minute},
		}}
		c.Policy.Actions["otp_send"] = abuse.Action{Limits: []abuse.Rule{
			{Dimension: abuse.DimPhone, Limit: 5, Window: 10 * time.Minute},
			{Dimension: abuse.DimPhoneCountry, Limit: 1000, Window: time.Hour, Algorithm: abuse.AlgCounter},
			{Dimension: abuse.DimIP, Distinct: abuse.DimUser, Limit: 20, Window: time.Hour},
		}}
	})
	m := metrics.New()
	h, err := api.New(slog.New(slog.DiscardHandler), api.Config{
		Keys: []api.Key{
			{Name: "auth-service", Scopes: []string{api.ScopeCheck}, Key: oasCheckKey},
			{Name: "secteam", Scopes: []string{api.ScopeAuditRead}, Key: oasAuditKey},
			{Name: "ops", Scopes: []string{api.ScopeAdmin}, Key: oasAdminKey},
		},
		// httptest's peer, 192.0.2.1, is the proxy, and so is the
		// loopback peer of requests over the wire.
		ForwardAuth: api.ForwardAuthConfig{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("192.0.2.1/32"),
			netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}},
	}, api.Deps{Guard: st.guard, Audit: st.store, Cursors: audit.NewCursorCodec([]byte("cursor-secret")),
		Now: st.clock.Now, Metrics: m.Handler(), Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	// Audit reads see every decision made before them.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1/audit") {
			st.settle(t)
		}
		h.ServeHTTP(w, r)
	})
}

// bearerPresent is the document's security as a client sees it: a Bearer
// token is sent. Whether Guard knows it is Guard's answer to check.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	scheme, token, _ := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "bearer") || token == "" {
		return errors.New("no Bearer token")
	}
	return nil
}

func (ex exchange) request() *http.Request {
	var req *http.Request
	if ex.body == "" {
		req = httptest.NewRequest(ex.method, openAPIBase+ex.target, nil)
	} else {
		req = httptest.NewRequest(ex.method, openAPIBase+ex.target, strings.NewReader(ex.body))
		req.Header.Set("Content-Type", "application/json")
	}
	if ex.key != "" {
		req.Header.Set("Authorization", "Bearer "+ex.key)
	}
	for k, vs := range ex.header {
		req.Header[k] = vs
	}
	if ex.ctx != nil {
		req = req.WithContext(ex.ctx)
	}
	return req
}

// do sends ex to Guard and holds the request and the answer to the
// document. A request the document does not route (an unknown path, a
// method a path does not take) must be answered 404 or 405 with the
// error body (to a HEAD, with none).
func (v *oasChecker) do(ex exchange) answer {
	t := v.t
	t.Helper()
	name := ex.method + " " + ex.target
	route, params, routeErr := v.router.FindRoute(ex.request())
	var w *httptest.ResponseRecorder
	if ex.method == http.MethodHead {
		w = v.wire(ex)
	} else {
		w = httptest.NewRecorder()
		v.h.ServeHTTP(w, ex.request())
	}
	if w.Code != ex.status {
		t.Errorf("%s: status %d, want %d (%s)", name, w.Code, ex.status, w.Body)
	}
	if routeErr != nil {
		if w.Code != http.StatusNotFound && w.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s: the document has no operation for it (%v), and Guard answers %d", name, routeErr, w.Code)
		}
		if ex.method == http.MethodHead {
			if w.Body.Len() > 0 {
				t.Errorf("%s: answer %d with a body %q", name, w.Code, w.Body)
			}
		} else if err := v.visitSchema("Error", w.Body.Bytes()); err != nil {
			t.Errorf("%s: error body %s: %v", name, w.Body, err)
		}
		if w.Header().Get("X-Request-Id") == "" {
			t.Errorf("%s: no X-Request-Id", name)
		}
		return answer{w: w}
	}
	v.seen[route.Method+" "+route.Path] = true
	in := &openapi3filter.RequestValidationInput{Request: ex.request(), PathParams: params, Route: route, Options: v.opts}
	err := openapi3filter.ValidateRequest(context.Background(), in)
	switch {
	case ex.offDoc && err == nil:
		t.Errorf("%s: the document accepts a request Guard answers %d to", name, w.Code)
	case !ex.offDoc && err != nil:
		t.Errorf("%s: the document refuses the request: %v", name, err)
	}
	if err := v.validateResponse(in, w.Code, w.Header(), w.Body.Bytes()); err != nil {
		t.Errorf("%s: answer %d %s: %v", name, w.Code, w.Body, err)
	}
	if missing := v.undeclaredHeaders(route.Operation, w.Code, w.Header()); len(missing) > 0 {
		t.Errorf("%s: answer %d carries %v, which the document does not declare for it", name, w.Code, missing)
	}
	return answer{w: w, in: in}
}

// wire sends ex to Guard over a connection to v.srv and reads the answer
// as the bytes on the wire: whatever follows a HEAD answer's header
// section is its body (http.ReadResponse would not read one).
func (v *oasChecker) wire(ex exchange) *httptest.ResponseRecorder {
	t := v.t
	t.Helper()
	req := ex.request()
	if ex.ctx != nil {
		if ex.ctx.Err() == nil {
			t.Fatalf("%s %s: only a cancelled context goes over the wire", ex.method, ex.target)
		}
		req.Header.Set(oasGone, "1")
	}
	req.Close = true // the server closes after its answer: the rest is its body
	conn, err := net.Dial("tcp", v.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("%s %s: %v", ex.method, ex.target, err)
	}
	br := bufio.NewReader(bytes.NewReader(raw))
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		t.Fatalf("%s %s: %v in %q", ex.method, ex.target, err, raw)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: %v", ex.method, ex.target, err)
	}
	rest, _ := io.ReadAll(br)
	w := httptest.NewRecorder()
	maps.Copy(w.Header(), resp.Header)
	w.Code = resp.StatusCode
	w.Body.Write(body)
	w.Body.Write(rest)
	return w
}

// head sends ex as GET, then as HEAD (RFC 9110 §9.3.2): the HEAD must
// have the GET's status and headers (sameAsGET), and no body (do refuses
// one, since no head operation declares content). Only for requests that
// change nothing, so that both get the same answer: a forward-auth HEAD
// counts an attempt, and goes through do alone.
func (v *oasChecker) head(ex exchange) (get, head answer) {
	v.t.Helper()
	ex.method = http.MethodGet
	get = v.do(ex)
	ex.method = http.MethodHead
	head = v.do(ex)
	if err := sameAsGET(get.w.Code, get.w.Header(), head.w.Code, head.w.Header()); err != nil {
		v.t.Errorf("HEAD %s: %v", ex.target, err)
	}
	return get, head
}

// headFraming are the headers net/http writes itself, by the answer's
// framing and the time: a HEAD answer over the wire has them, a GET
// answer from a ResponseRecorder not.
var headFraming = map[string]bool{"Date": true, "Content-Length": true, "Connection": true, "Transfer-Encoding": true}

// sameAsGET checks that a HEAD answer has a GET's status and headers,
// with the same values except the request id (fresh for each).
func sameAsGET(getCode int, get http.Header, headCode int, head http.Header) error {
	if headCode != getCode {
		return fmt.Errorf("status %d, GET's %d", headCode, getCode)
	}
	for k := range get {
		if k == "X-Request-Id" {
			if head.Get(k) == "" {
				return errors.New("no X-Request-Id")
			}
		} else if !slices.Equal(head.Values(k), get.Values(k)) {
			return fmt.Errorf("%s %q, GET's %q", k, head.Values(k), get.Values(k))
		}
	}
	for k := range head {
		if _, ok := get[k]; !ok && !headFraming[k] {
			return fmt.Errorf("%s %q, which GET's answer does not carry", k, head.Values(k))
		}
	}
	return nil
}

// undeclaredHeaders lists the headers of the document's components that
// an answer carries but the document does not declare for that answer: a
// header Guard sends (Cache-Control, Retry-After, ...) must be in the
// answer's description, not only allowed as an extra.
func (v *oasChecker) undeclaredHeaders(op *openapi3.Operation, status int, h http.Header) []string {
	ref := op.Responses.Status(status)
	if ref == nil || ref.Value == nil {
		return nil // ValidateResponse has already refused the status
	}
	var missing []string
	for name := range v.doc.Components.Headers {
		if h.Get(name) == "" {
			continue
		}
		if _, ok := ref.Value.Headers[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	return missing
}

// validateResponse holds an answer to the document. An answer the
// document gives no content has no body. NDJSON has no decoder: its
// status and headers are validated as any answer's, and each line against
// the schema of the media type (one event).
func (v *oasChecker) validateResponse(in *openapi3filter.RequestValidationInput, status int, h http.Header, body []byte) error {
	if in.Request.Method == http.MethodHead {
		// kin-openapi's ValidateResponse passes every answer to a HEAD
		// unseen: the answer is held to the head operation (in.Route) as
		// if it answered a GET.
		asGET := *in
		asGET.Request = in.Request.Clone(context.Background())
		asGET.Request.Method = http.MethodGet
		in = &asGET
	}
	opts := *v.opts
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	ndjson := mt == audit.ContentTypeNDJSON
	opts.ExcludeResponseBody = ndjson
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: h, Options: &opts}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		return err
	}
	declared := in.Route.Operation.Responses.Status(status)
	if declared == nil || declared.Value == nil {
		return fmt.Errorf("status %d is not in the document", status)
	}
	if len(declared.Value.Content) == 0 {
		if len(body) > 0 {
			return fmt.Errorf("a body of %d bytes (%.40q), where the document declares none", len(body), body)
		}
		return nil
	}
	if !ndjson {
		return nil
	}
	media := declared.Value.Content.Get(mt)
	if media == nil {
		return errors.New("the document has no " + mt + " answer")
	}
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var line any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return err
		}
		if err := media.Schema.Value.VisitJSON(line, openapi3.VisitAsResponse()); err != nil {
			return err
		}
	}
	return sc.Err()
}

// visitSchema validates body against components.schemas[name].
func (v *oasChecker) visitSchema(name string, body []byte) error {
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		return err
	}
	return v.doc.Components.Schemas[name].Value.VisitJSON(value, openapi3.VisitAsResponse())
}

// decode reads a JSON answer.
func decode[T any](t *testing.T, a answer) T {
	t.Helper()
	var out T
	if err := json.Unmarshal(a.w.Body.Bytes(), &out); err != nil {
		t.Fatalf("answer %s: %v", a.w.Body, err)
	}
	return out
}

// wantError checks an error answer's code and field.
func wantError(t *testing.T, a answer, code, field string) {
	t.Helper()
	var body struct {
		Error struct{ Code, Field string } `json:"error"`
	}
	if err := json.Unmarshal(a.w.Body.Bytes(), &body); err != nil {
		t.Fatalf("error body %s: %v", a.w.Body, err)
	}
	if body.Error.Code != code || body.Error.Field != field {
		t.Errorf("error %s: want code %q field %q", a.w.Body, code, field)
	}
}

// The document is valid OpenAPI 3.0.3, and every request and answer of a
// session covering every operation and the main answers matches it.
func TestOpenAPI(t *testing.T) {
	v := newOASChecker(t)
	if v.doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q, want 3.0.3", v.doc.OpenAPI)
	}
	t.Run("operations", func(t *testing.T) { v.t = t; testOpenAPIOperations(v) })
	t.Run("errors", func(t *testing.T) { v.t = t; testOpenAPIErrors(v) })
	t.Run("head", func(t *testing.T) { v.t = t; testOpenAPIHead(v) })
	t.Run("drift", func(t *testing.T) { v.t = t; testOpenAPIDrift(v) })
	t.Run("methods", func(t *testing.T) { v.t = t; testOpenAPIMethods(v) })

	// Every operation of the document was exercised.
	for path, item := range v.doc.Paths.Map() {
		for method := range item.Operations() {
			if !v.seen[method+" "+path] {
				t.Errorf("%s %s: not exercised", method, path)
			}
		}
	}
}

func testOpenAPIOperations(v *oasChecker) {
	t := v.t
	for _, target := range []string{"/healthz", "/readyz", "/metrics"} {
		v.do(exchange{method: "GET", target: target, status: 200})
	}
	// Every media type the document lists for /metrics is one Guard
	// answers when asked for it (protobuf only with its parameters).
	for mt := range v.doc.Paths.Value("/metrics").Get.Responses.Status(200).Value.Content {
		accept := mt
		if mt == "application/vnd.google.protobuf" {
			accept += "; proto=io.prometheus.client.MetricFamily; encoding=delimited"
		}
		a := v.do(exchange{method: "GET", target: "/metrics", header: http.Header{"Accept": {accept}}, status: 200})
		if got, _, _ := mime.ParseMediaType(a.w.Header().Get("Content-Type")); got != mt {
			t.Errorf("GET /metrics with Accept %s: Content-Type %q", mt, a.w.Header().Get("Content-Type"))
		}
	}
	v.do(exchange{method: "GET", target: "/v1/policy", key: oasAdminKey, status: 200})

	// Checks: three allowed from one address (RateLimit headers, no
	// Retry-After), the fourth denied (Retry-After).
	const login = `{"action":"login","user":"alice@example.com","ip":"203.0.113.7","device":"d-4f1c"`
	for i := range 3 {
		a := v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: login + `}`, status: 200})
		h := a.w.Header()
		if h.Get("RateLimit") == "" || h.Get("RateLimit-Policy") == "" || h.Get("Retry-After") != "" {
			t.Errorf("allowed check %d: RateLimit %q, RateLimit-Policy %q, Retry-After %q", i, h.Get("RateLimit"), h.Get("RateLimit-Policy"), h.Get("Retry-After"))
		}
	}
	a := v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: login + `,"cost":1}`, status: 200})
	if got := decode[checkAnswer](t, a); got.Decision != "deny" || got.Reason != "rate_limited" || a.w.Header().Get("Retry-After") == "" {
		t.Errorf("fourth check: %s, Retry-After %q; want deny rate_limited with Retry-After", a.w.Body, a.w.Header().Get("Retry-After"))
	}
	// Nulls stand for absent fields; a dry run; a denylisted user.
	v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, status: 200,
		body: `{"action":"login","user":"bob","ip":null,"device":null,"phone":null,"cost":null,"dry_run":true,"challenge_passed":null}`})
	a = v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: `{"action":"login","user":"mallory"}`, status: 200})
	if got := decode[checkAnswer](t, a); got.Reason != "denylisted" {
		t.Errorf("denylisted check: %s", a.w.Body)
	}
	// A challenge, then the check with the challenge passed.
	const signup = `{"action":"signup","ip":"198.51.100.9","device":"d-9"`
	v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: signup + `}`, status: 200})
	a = v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: signup + `}`, status: 200})
	if got := decode[checkAnswer](t, a); got.Decision != "challenge" || a.w.Header().Get("Retry-After") != "" {
		t.Errorf("second signup: %s, Retry-After %q; want a challenge without Retry-After", a.w.Body, a.w.Header().Get("Retry-After"))
	}
	v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: signup + `,"challenge_passed":true}`, status: 200})
	// A phone, a counter and a distinct rule.
	a = v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, status: 200,
		body: `{"action":"otp_send","user":"carol","ip":"198.51.100.7","phone":"+447400123456"}`})
	if got := decode[checkAnswer](t, a); len(got.Limits) != 3 {
		t.Errorf("otp_send check: %s, want three limits", a.w.Body)
	}

	// Reports: the second failure strikes a user+ip lockout; the check
	// then meets it.
	id := decode[checkAnswer](t, v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, status: 200,
		body: `{"action":"login","user":"alice@example.com","ip":"203.0.113.8"}`})).DecisionID
	report := `{"action":"login","user":"alice@example.com","ip":"203.0.113.8","outcome":"failure"`
	v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, body: report + `,"decision_id":"` + id + `"}`, status: 200})
	a = v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, body: report + `,"decision_id":null}`, status: 200})
	if !strings.Contains(a.w.Body.String(), `"dimension":"user+ip"`) {
		t.Errorf("striking report: %s, want a user+ip lockout", a.w.Body)
	}
	a = v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, status: 200,
		body: `{"action":"login","user":"alice@example.com","ip":"203.0.113.8"}`})
	if got := decode[checkAnswer](t, a); got.Reason != "locked_out" || got.Lockout == nil || a.w.Header().Get("Retry-After") == "" {
		t.Errorf("locked check: %s, Retry-After %q", a.w.Body, a.w.Header().Get("Retry-After"))
	}

	// Lockouts: a manual one (201), a listing in pages of one, a filter.
	v.do(exchange{method: "POST", target: "/v1/lockouts", key: oasAdminKey, status: 201,
		body: `{"dimension":"ip","ip":"203.0.113.9","duration_ms":3600000,"reason":"credential stuffing","ledger":"auth"}`})
	v.do(exchange{method: "POST", target: "/v1/lockouts", key: oasAdminKey, status: 201,
		body: `{"dimension":"device","device":"d-stolen","user":null,"duration_ms":60000,"reason":null,"ledger":null}`})
	// A check that the manual lockout decides: level 0, the key has no strikes.
	a = v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: `{"action":"login","ip":"203.0.113.9"}`, status: 200})
	if got := decode[checkAnswer](t, a); got.Reason != "locked_out" || got.Lockout == nil || got.Lockout.Level != 0 {
		t.Errorf("check of the manually locked address: %s, want locked_out at level 0", a.w.Body)
	}
	type listing struct {
		Lockouts   []json.RawMessage `json:"lockouts"`
		NextCursor *string           `json:"next_cursor"`
	}
	first := decode[listing](t, v.do(exchange{method: "GET", target: "/v1/lockouts?limit=1", key: oasAdminKey, status: 200}))
	if len(first.Lockouts) != 1 || first.NextCursor == nil {
		t.Fatalf("first page: %d lockouts, next_cursor %v; want 1 and a cursor", len(first.Lockouts), first.NextCursor)
	}
	n := len(first.Lockouts)
	for next := first.NextCursor; next != nil && n < 10; n++ {
		page := decode[listing](t, v.do(exchange{method: "GET", target: "/v1/lockouts?limit=1&cursor=" + url.QueryEscape(*next),
			key: oasAdminKey, status: 200}))
		if len(page.Lockouts) != 1 {
			t.Errorf("page %d: %d lockouts, want 1", n+1, len(page.Lockouts))
		}
		next = page.NextCursor
	}
	if n != 3 { // the struck user+ip lockout and the two manual ones
		t.Errorf("%d pages of lockouts, want 3", n)
	}
	v.do(exchange{method: "GET", target: "/v1/lockouts?user=Alice@Example.com&dimension=user%2Bip&ledger=auth", key: oasAdminKey, status: 200})

	// Unlock: 200, then 404 (nothing is locked any more); a success.
	unlock := `{"dimension":"user+ip","user":"alice@example.com","ip":"203.0.113.8","reason":"ticket 123"}`
	v.do(exchange{method: "DELETE", target: "/v1/lockouts", key: oasAdminKey, body: unlock, status: 200})
	wantError(t, v.do(exchange{method: "DELETE", target: "/v1/lockouts", key: oasAdminKey, status: 404,
		body: `{"dimension":"user+ip","user":"alice@example.com","ip":"203.0.113.8","device":null,"ledger":null,"reason":null}`}), "not_found", "")
	v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, status: 200,
		body: `{"action":"login","user":"alice@example.com","ip":"203.0.113.8","device":"d-4f1c","outcome":"success"}`})

	// Forward-auth: three allowed (204) from the client behind the
	// proxy, the fourth denied (429 with Retry-After).
	fwd := http.Header{"X-Forwarded-For": {"198.51.100.20"}, "X-Guard-User": {"dave"}}
	for range 3 {
		v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 204})
	}
	a = v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 429})
	if a.w.Header().Get("Retry-After") == "" {
		t.Error("forward-auth denial without Retry-After")
	}

	// The audit trail: pages with a cursor, filters, the exports.
	type page struct {
		Events     []json.RawMessage `json:"events"`
		NextCursor *string           `json:"next_cursor"`
	}
	p := decode[page](t, v.do(exchange{method: "GET", target: "/v1/audit?limit=2", key: oasAuditKey, status: 200}))
	if len(p.Events) != 2 || p.NextCursor == nil {
		t.Fatalf("audit page: %d events, next_cursor %v; want 2 and a cursor", len(p.Events), p.NextCursor)
	}
	v.do(exchange{method: "GET", target: "/v1/audit?limit=2&cursor=" + url.QueryEscape(*p.NextCursor), key: oasAuditKey, status: 200})
	v.do(exchange{method: "GET", target: "/v1/audit?kind=check&decision=deny&since=2026-03-01T00:00:00Z&until=2026-03-02T00:00:00Z",
		key: oasAdminKey, status: 200})
	v.do(exchange{method: "GET", target: "/v1/audit?kind=admin", key: oasAuditKey, status: 200})
	v.do(exchange{method: "GET", target: "/v1/audit?kind=report&user=alice@example.com", key: oasAuditKey, status: 200})
	a = v.do(exchange{method: "GET", target: "/v1/audit", key: oasAuditKey, header: http.Header{"Accept": {audit.ContentTypeNDJSON}}, status: 200})
	if n := strings.Count(a.w.Body.String(), "\n"); n < 10 {
		t.Errorf("NDJSON export: %d lines", n)
	}
	a = v.do(exchange{method: "GET", target: "/v1/audit", key: oasAuditKey, header: http.Header{"Accept": {audit.ContentTypeCSV}}, status: 200})
	rows, err := csv.NewReader(a.w.Body).ReadAll()
	if err != nil || len(rows) < 10 {
		t.Fatalf("CSV export: %d rows, %v", len(rows), err)
	}
	// The header row is the event's fields, in the document's order.
	if want := v.doc.Components.Schemas["AuditEvent"].Value.Required; !slices.Equal(rows[0], want) {
		t.Errorf("CSV header %v, want the AuditEvent fields %v", rows[0], want)
	}
}

func testOpenAPIErrors(v *oasChecker) {
	t := v.t
	check := func(body string, offDoc bool, code, field string) {
		t.Helper()
		a := v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: body, status: 400, offDoc: offDoc})
		wantError(t, a, code, field)
	}
	// 400: what the document refuses too, and what only Guard can tell.
	check(`{"action":"login","user":"a","cost":0}`, true, "invalid_request", "cost")
	check(`{"action":"login","user":"a","usr":"b"}`, true, "invalid_request", "usr")
	check(`{"action":"login","user":"a","cost":"2"}`, true, "invalid_request", "cost")
	check(`{"action":"login","user":"a","cost":99}`, false, "invalid_request", "cost")
	check(`{"action":"nope","user":"a"}`, false, "unknown_action", "action")
	check(`{"action":"login","ip":"010.1.2.3"}`, false, "invalid_request", "ip")
	check(`{"action":"login"}`, false, "invalid_request", "")
	wantError(t, v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, status: 400, offDoc: true,
		body: `{"action":"login","user":"a","outcome":"failure","decision_id":"has space"}`}), "invalid_request", "decision_id")
	wantError(t, v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, status: 400, offDoc: true,
		body: `{"action":"login","user":"a","outcome":"maybe"}`}), "invalid_request", "outcome")
	wantError(t, v.do(exchange{method: "POST", target: "/v1/lockouts", key: oasAdminKey, status: 400, offDoc: true,
		body: `{"dimension":"ip","ip":"203.0.113.9","duration_ms":500}`}), "invalid_request", "duration_ms")
	wantError(t, v.do(exchange{method: "POST", target: "/v1/lockouts", key: oasAdminKey, status: 400,
		body: `{"dimension":"user","duration_ms":60000}`}), "invalid_request", "user")
	wantError(t, v.do(exchange{method: "DELETE", target: "/v1/lockouts", key: oasAdminKey, status: 400, offDoc: true,
		body: `{"ip":"203.0.113.9"}`}), "invalid_request", "dimension")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/lockouts?limit=0", key: oasAdminKey, status: 400, offDoc: true}), "invalid_request", "limit")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/lockouts?colour=red", key: oasAdminKey, status: 400}), "invalid_request", "colour")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/audit?kind=bogus", key: oasAuditKey, status: 400, offDoc: true}), "invalid_request", "kind")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/audit?cursor=forged", key: oasAuditKey, status: 400}), "invalid_request", "cursor")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/forward-auth", key: oasCheckKey, status: 400, offDoc: true}), "invalid_request", "action")

	// 401 without a key (off the document) and with an unknown one; 403.
	wantError(t, v.do(exchange{method: "POST", target: "/v1/check", body: `{"action":"login","user":"a"}`, status: 401, offDoc: true}), "unauthenticated", "")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/lockouts", key: "k-nobody", status: 401}), "unauthenticated", "")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/policy", key: oasCheckKey, status: 403}), "forbidden", "")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/audit", key: oasCheckKey, status: 403}), "forbidden", "")
	wantError(t, v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasAuditKey, status: 403}), "forbidden", "")

	// 404 and 405 have no operation: their bodies are the Error schema.
	wantError(t, v.do(exchange{method: "GET", target: "/v1/nope", key: oasAdminKey, status: 404}), "not_found", "")
	wantError(t, v.do(exchange{method: "PUT", target: "/v1/check", key: oasCheckKey, status: 405}), "method_not_allowed", "")

	// 413: a body the document takes (white space), over 8 KiB.
	big := `{"action":"login","user":"a"` + strings.Repeat(" ", api.MaxBodyBytes) + `}`
	wantError(t, v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: big, status: 413}), "too_large", "")
	// 415: a Content-Type the document does not take.
	wantError(t, v.do(exchange{method: "POST", target: "/v1/report", key: oasCheckKey, status: 415, offDoc: true,
		header: http.Header{"Content-Type": {"text/plain"}}, body: `{"action":"login","user":"a","outcome":"failure"}`}), "unsupported_media_type", "")

	// 503: an export whose request is gone before the store answers.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	wantError(t, v.do(exchange{method: "GET", target: "/v1/audit", key: oasAuditKey, ctx: gone, status: 503,
		header: http.Header{"Accept": {audit.ContentTypeNDJSON}}}), "unavailable", "")
}

// testOpenAPIHead exercises the head operations: each HEAD of a read
// against its GET, and forward-auth's HEADs, which are checks.
func testOpenAPIHead(v *oasChecker) {
	t := v.t
	for _, target := range []string{"/healthz", "/readyz", "/metrics"} {
		v.head(exchange{target: target, status: 200})
	}
	for mt := range v.doc.Paths.Value("/metrics").Get.Responses.Status(200).Value.Content {
		accept := mt
		if mt == "application/vnd.google.protobuf" {
			accept += "; proto=io.prometheus.client.MetricFamily; encoding=delimited"
		}
		v.head(exchange{target: "/metrics", header: http.Header{"Accept": {accept}}, status: 200})
	}
	v.head(exchange{target: "/v1/policy", key: oasAdminKey, status: 200})
	v.head(exchange{target: "/v1/lockouts?limit=1", key: oasAdminKey, status: 200})
	v.head(exchange{target: "/v1/lockouts?dimension=ip&ledger=auth", key: oasAdminKey, status: 200})
	v.head(exchange{target: "/v1/audit?limit=2", key: oasAuditKey, status: 200})
	for _, ct := range []string{audit.ContentTypeNDJSON, audit.ContentTypeCSV} {
		_, a := v.head(exchange{target: "/v1/audit?kind=check", key: oasAuditKey, header: http.Header{"Accept": {ct}}, status: 200})
		if got, _, _ := mime.ParseMediaType(a.w.Header().Get("Content-Type")); got != ct {
			t.Errorf("HEAD /v1/audit with Accept %s: Content-Type %q", ct, a.w.Header().Get("Content-Type"))
		}
	}

	// A HEAD export asks the store as its GET does: where the GET is 503
	// (here the request is gone before the store answers), so is the HEAD.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	v.head(exchange{target: "/v1/audit", key: oasAuditKey, ctx: gone, status: 503,
		header: http.Header{"Accept": {audit.ContentTypeNDJSON}}})

	// Errors answer HEAD as GET, without the error body.
	v.head(exchange{target: "/v1/lockouts?limit=0", key: oasAdminKey, status: 400, offDoc: true})
	v.head(exchange{target: "/v1/audit?cursor=forged", key: oasAuditKey, status: 400})
	v.head(exchange{target: "/v1/audit?kind=check", status: 401, offDoc: true})
	v.head(exchange{target: "/v1/policy", key: "k-nobody", status: 401})
	v.head(exchange{target: "/v1/lockouts", key: oasAuditKey, status: 403})
	v.head(exchange{target: "/v1/audit", key: oasCheckKey, status: 403})
	v.head(exchange{target: "/v1/nope", key: oasAdminKey, status: 404})
	v.do(exchange{method: "HEAD", target: "/v1/check", key: oasCheckKey, status: 405})

	// Forward-auth: HEAD is a check like GET. An allowed one (204 with a
	// decision id), then the same client over its limit (429 with
	// Retry-After), a request without an action, the wrong key.
	fwd := http.Header{"X-Forwarded-For": {"198.51.100.21"}, "X-Guard-User": {"frank"}}
	a := v.do(exchange{method: "HEAD", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 204})
	if a.w.Header().Get("X-Guard-Decision-Id") == "" || a.w.Header().Get("RateLimit") == "" {
		t.Errorf("allowed HEAD forward-auth: headers %v, want a decision id and RateLimit", a.w.Header())
	}
	for range 2 {
		v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 204})
	}
	get := v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 429})
	a = v.do(exchange{method: "HEAD", target: "/v1/forward-auth?action=login", key: oasCheckKey, header: fwd, status: 429})
	if err := sameAsGET(get.w.Code, get.w.Header(), a.w.Code, a.w.Header()); err != nil {
		t.Errorf("denied HEAD forward-auth: %v", err)
	}
	v.do(exchange{method: "HEAD", target: "/v1/forward-auth", key: oasCheckKey, header: fwd, status: 400, offDoc: true})
	v.do(exchange{method: "HEAD", target: "/v1/forward-auth?action=login", key: oasAuditKey, header: fwd, status: 403})
}

// testOpenAPIDrift checks that the validation above would fail on drift:
// real answers, altered, are refused.
func testOpenAPIDrift(v *oasChecker) {
	t := v.t
	a := v.do(exchange{method: "POST", target: "/v1/check", key: oasCheckKey, body: `{"action":"login","user":"erin"}`, status: 200})
	var body map[string]any
	if err := json.Unmarshal(a.w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	alter := func(f func(m map[string]any)) []byte {
		m := make(map[string]any, len(body))
		for k, v := range body {
			m[k] = v
		}
		f(m)
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name   string
		header http.Header
		body   []byte
	}{
		{"an extra field", a.w.Header(), alter(func(m map[string]any) { m["score"] = 0.5 })},
		{"no decision_id", a.w.Header(), alter(func(m map[string]any) { delete(m, "decision_id") })},
		{"an unknown decision", a.w.Header(), alter(func(m map[string]any) { m["decision"] = "maybe" })},
		{"lockout not an object", a.w.Header(), alter(func(m map[string]any) { m["lockout"] = "none" })},
		{"no X-Request-Id", func() http.Header { h := a.w.Header().Clone(); h.Del("X-Request-Id"); return h }(), a.w.Body.Bytes()},
	} {
		if err := v.validateResponse(a.in, a.w.Code, tc.header, tc.body); err == nil {
			t.Errorf("a check answer with %s passes the document", tc.name)
		}
	}
	if err := v.validateResponse(a.in, http.StatusTeapot, a.w.Header(), a.w.Body.Bytes()); err == nil {
		t.Error("an undocumented status passes the document")
	}
	// An answer the document declares without content has no body.
	a = v.do(exchange{method: "GET", target: "/v1/forward-auth?action=login", key: oasCheckKey, status: 204,
		header: http.Header{"X-Forwarded-For": {"198.51.100.30"}}})
	if err := v.validateResponse(a.in, a.w.Code, a.w.Header(), []byte(`{}`)); err == nil {
		t.Error("a forward-auth 204 with a body passes the document")
	}

	// A HEAD answer: with a body, with a status the document does not
	// give it or that is not GET's, without a header it requires.
	get, head := v.head(exchange{target: "/readyz", status: 200})
	without := func(k string) http.Header { h := head.w.Header().Clone(); h.Del(k); return h }
	for _, tc := range []struct {
		name   string
		status int
		header http.Header
		body   []byte
	}{
		{"GET's body", head.w.Code, head.w.Header(), get.w.Body.Bytes()},
		{"one byte of body", head.w.Code, head.w.Header(), []byte("\n")},
		{"an undocumented status", http.StatusTeapot, head.w.Header(), nil},
		{"no Cache-Control", head.w.Code, without("Cache-Control"), nil},
		{"no X-Request-Id", head.w.Code, without("X-Request-Id"), nil},
	} {
		if err := v.validateResponse(head.in, tc.status, tc.header, tc.body); err == nil {
			t.Errorf("a HEAD /readyz answer with %s passes the document", tc.name)
		}
	}
	if err := v.validateResponse(head.in, http.StatusServiceUnavailable, head.w.Header(), nil); err != nil {
		t.Errorf("HEAD /readyz answered 503: %v", err)
	} else if sameAsGET(get.w.Code, get.w.Header(), http.StatusServiceUnavailable, head.w.Header()) == nil {
		t.Error("a HEAD answered 503 where GET is 200 passes as GET's answer")
	}
	if sameAsGET(get.w.Code, get.w.Header(), head.w.Code, without("Cache-Control")) == nil {
		t.Error("a HEAD answer without GET's Cache-Control passes as GET's answer")
	}
	extra := head.w.Header().Clone()
	extra.Set("Retry-After", "5")
	if sameAsGET(get.w.Code, get.w.Header(), head.w.Code, extra) == nil {
		t.Error("a HEAD answer with a header GET's lacks passes as GET's answer")
	}
}

// testOpenAPIMethods checks that the document lists every method of each
// path Guard serves: a 405's Allow names them, HEAD beside GET.
// forward-auth takes any method and has no 405; the document lists its
// GET and HEAD.
func testOpenAPIMethods(v *oasChecker) {
	t := v.t
	for path, item := range v.doc.Paths.Map() {
		if item.Get != nil && item.Head == nil {
			t.Errorf("%s: a get operation without its head", path)
		}
		if path == "/v1/forward-auth" {
			continue
		}
		var want []string
		for method := range item.Operations() {
			want = append(want, method)
		}
		a := v.do(exchange{method: "PATCH", target: path, key: oasAdminKey, status: 405})
		var got []string
		for m := range strings.SplitSeq(a.w.Header().Get("Allow"), ",") {
			got = append(got, strings.TrimSpace(m))
		}
		sort.Strings(got)
		sort.Strings(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s: Allow %v, the document %v", path, got, want)
		}
	}
}
