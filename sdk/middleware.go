package sdk

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"time"
)

// Middleware checks an action with Guard before a handler runs: the
// handler runs only for an allowed attempt, finds the Attempt in its
// request's context (AttemptFrom) and reports how it ended. A denied
// attempt is answered 429 with Retry-After, RateLimit and RateLimit-Policy
// and a generic message (DenialMessage) that names no rule, limit or
// account, so the answer reads the same whether the account exists or
// not. Set the fields, then use Wrap (net/http) or Guard (other routers;
// the guardgin module for gin).
type Middleware struct {
	// Client calls Guard; required. Its timeout bounds the check.
	Client *Client
	// Action is the action checked, e.g. "login"; required.
	Action string
	// User returns the account identifier of the attempt, "" for none
	// (e.g. r.PostFormValue("email")). nil: no user.
	User func(r *http.Request) string
	// Phone returns the phone number of the attempt (e.g. the OTP's
	// destination, r.PostFormValue("phone")), "" for none. nil: no phone.
	Phone func(r *http.Request) string
	// IP finds the client address; nil trusts no proxy (the peer
	// address).
	IP *IPExtractor
	// DeviceCookie and DeviceHeader name where the device id is (the
	// cookie first); "" for neither.
	DeviceCookie string
	DeviceHeader string
	// FailurePolicy applies when Guard cannot answer. The zero value,
	// FailError, means FailOpen here: a Guard outage lets logins through
	// (Bypassed is set on the Attempt's Result). FailClosed answers 503.
	FailurePolicy FailurePolicy
	// OnDeny answers a denied attempt (default: WriteDenial).
	OnDeny func(w http.ResponseWriter, r *http.Request, res *CheckResponse)
	// ChallengePassed reports whether r proves that the person passed
	// the challenge an earlier answer asked for (e.g. a CAPTCHA token
	// your handler verified with its provider); nil: never. It must
	// verify the proof on the server: a client's say-so is no proof.
	ChallengePassed func(r *http.Request) bool
	// OnChallenge answers an attempt Guard wants challenged
	// (DecisionChallenge), which the handler never sees (default:
	// WriteChallenge, so the client shows its CAPTCHA and sends the
	// request again with the proof).
	OnChallenge func(w http.ResponseWriter, r *http.Request, res *CheckResponse)
	// Logger receives calls that failed for a reason no policy covers (a
	// wrong API key, an unknown action); nil discards.
	Logger *slog.Logger
}

// Attempt is one checked attempt, in the handler's request context.
type Attempt struct {
	Action  string
	Subject Subject
	// Result is Guard's answer, or the failure policy's (Bypassed).
	Result *CheckResponse
	client *Client
}

// Report sends how the attempt ended (OutcomeSuccess or OutcomeFailure)
// without waiting (Client.ReportAsync), carrying the check's decision id.
// Report failures for unknown accounts too: lockouts that only real
// accounts get tell an attacker which accounts exist.
func (a *Attempt) Report(ctx context.Context, outcome string) {
	a.client.ReportAsync(ctx, a.Subject.Report(a.Action, outcome, a.Result))
}

type attemptKey struct{}

// WithAttempt returns ctx carrying a; middleware for other routers uses it.
func WithAttempt(ctx context.Context, a *Attempt) context.Context {
	return context.WithValue(ctx, attemptKey{}, a)
}

// AttemptFrom returns the Attempt Middleware put in ctx, or nil.
func AttemptFrom(ctx context.Context) *Attempt {
	a, _ := ctx.Value(attemptKey{}).(*Attempt)
	return a
}

// Wrap returns next behind the check.
func (m *Middleware) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := m.Guard(w, r); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// Guard checks r. When the attempt may go ahead it returns r with the
// Attempt in its context and true; otherwise it has answered w and
// returns false.
func (m *Middleware) Guard(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	a, err := m.Check(r)
	if err != nil {
		m.writeError(w, r, err)
		return r, false
	}
	if a.Result.Challenge() {
		if m.OnChallenge != nil {
			m.OnChallenge(w, r, a.Result)
		} else {
			WriteChallenge(w, a.Result)
		}
		return r, false
	}
	if !a.Result.Allowed() {
		if m.OnDeny != nil {
			m.OnDeny(w, r, a.Result)
		} else {
			WriteDenial(w, a.Result)
		}
		return r, false
	}
	return r.WithContext(WithAttempt(r.Context(), a)), true
}

// Check builds the subject of r and checks it; the error is one no
// failure policy covers (see Client).
func (m *Middleware) Check(r *http.Request) (*Attempt, error) {
	s := Subject{IP: m.IP.ClientIP(r)}
	if m.User != nil {
		s.User = m.User(r)
	}
	if m.Phone != nil {
		s.Phone = m.Phone(r)
	}
	if m.DeviceCookie != "" {
		if c, err := r.Cookie(m.DeviceCookie); err == nil {
			s.Device = c.Value
		}
	}
	if s.Device == "" && m.DeviceHeader != "" {
		s.Device = r.Header.Get(m.DeviceHeader)
	}
	policy := m.FailurePolicy
	if policy == FailError {
		policy = FailOpen
	}
	req := s.Check(m.Action)
	req.ChallengePassed = m.ChallengePassed != nil && m.ChallengePassed(r)
	res, err := m.Client.Check(r.Context(), req, policy)
	if err != nil {
		return nil, err
	}
	return &Attempt{Action: m.Action, Subject: s, Result: res, client: m.Client}, nil
}

// writeError answers a check that failed for a reason no policy covers.
// An identifier Guard refused (too long, not an address) came from the
// end client: 400; so does a check body over Guard's 8 KiB (413
// too_large), which only identifiers of the end client's choosing can
// make that large. Anything else is this service's configuration (key,
// action): 500, logged.
func (m *Middleware) writeError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The end client went away mid-check: nothing to answer, and no
		// error of this service to log; the handler does not run.
		return
	}
	var e *Error
	if errors.As(err, &e) && (e.Status == http.StatusRequestEntityTooLarge || e.Status == http.StatusBadRequest &&
		(e.Field == "user" || e.Field == "ip" || e.Field == "device" || e.Field == "phone")) {
		writeJSONError(w, http.StatusBadRequest, "invalid_request", "the request is not valid")
		return
	}
	if m.Logger != nil {
		m.Logger.ErrorContext(r.Context(), "guard check failed", "action", m.Action, "err", err)
	}
	writeJSONError(w, http.StatusInternalServerError, "internal", "internal error")
}

// WriteDenial answers a denied attempt: 429 (503 when a FailClosed policy
// denied because Guard could not answer) with Retry-After (whole seconds,
// rounded up) when the wait is known, the RateLimit and RateLimit-Policy
// headers Guard sent, and the body {"error": {"code":
// "too_many_attempts", "message": DenialMessage(res)}}.
func WriteDenial(w http.ResponseWriter, res *CheckResponse) {
	h := w.Header()
	if res.RateLimit != "" {
		h.Set("RateLimit", res.RateLimit)
	}
	if res.RateLimitPolicy != "" {
		h.Set("RateLimit-Policy", res.RateLimitPolicy)
	}
	status := http.StatusTooManyRequests
	if res.Bypassed {
		status = http.StatusServiceUnavailable
	}
	if s := RetryAfterSeconds(res.RetryAfter()); s > 0 {
		h.Set("Retry-After", strconv.FormatInt(s, 10))
	}
	writeJSONError(w, status, "too_many_attempts", DenialMessage(res))
}

// RetryAfterSeconds is d in whole seconds, rounded up, as Retry-After
// carries it.
func RetryAfterSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// DenialMessage is the text to show the person whose attempt was denied:
// the same for rate limits, lockouts and deny lists, and for accounts that
// exist or not, with the wait when there is one ("Too many attempts. Try
// again in 2 minutes."). It never names a rule, a limit or an identifier.
func DenialMessage(res *CheckResponse) string {
	if res.Bypassed {
		return "The service is busy. Try again shortly."
	}
	d := res.RetryAfter()
	if d <= 0 {
		return "Too many attempts. Try again later."
	}
	return "Too many attempts. Try again in " + humanWait(d) + "."
}

// humanWait rounds d up to the unit a person reads.
func humanWait(d time.Duration) string {
	unit := func(n int64, one, many string) string {
		if n == 1 {
			return "1 " + one
		}
		return strconv.FormatInt(n, 10) + " " + many
	}
	secs := RetryAfterSeconds(d)
	switch {
	case secs < 60:
		return unit(secs, "second", "seconds")
	case secs <= 3600:
		return unit((secs+59)/60, "minute", "minutes")
	default:
		return unit((secs+3599)/3600, "hour", "hours")
	}
}

func writeJSONError(w http.ResponseWriter, status int, code, msg string) {
	h := w.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	b := append([]byte(`{"error":{"code":`), appendJSONString(nil, code)...)
	b = append(b, `,"message":`...)
	b = append(appendJSONString(b, msg), "}}\n"...)
	_, _ = w.Write(b)
}
