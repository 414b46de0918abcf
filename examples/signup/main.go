// Command signup is a tiny signup + login + one-time-code service protected
// by Guard through the Go SDK: every step is checked before it does any work
// and reported after, a denied person is told how long to wait, and a
// device cookie lets Guard spare the devices a person already uses when
// their account is under attack.
//
//	go run ./cmd/guard serve --config scripts/dev.yaml &
//	GUARD_API_KEY=dev-check-key-change-me go run ./examples/signup
//
// Then, on http://127.0.0.1:8090 (JSON or form bodies):
//
//	POST /signup     email, password        create an account
//	POST /login      email, password        check the password, send a code
//	POST /login/code email, code            check the code, start a session
//	GET  /me                                who is logged in
//
// Codes are "sent" to the log (the -print-codes flag); a real service
// would mail or text them. Accounts live in memory.
package main

import (
	"context"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/guardhq/guard/sdk"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "signup:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	fs := flag.NewFlagSet("signup", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8090", "address to serve on")
	guardURL := fs.String("guard", "http://127.0.0.1:8080", "Guard's base URL")
	proxies := fs.String("trusted-proxies", "", "comma-separated proxies whose X-Forwarded-For is believed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := getenv("GUARD_API_KEY")
	if key == "" {
		return errors.New("set GUARD_API_KEY to a Guard key with scope check")
	}
	var trusted []string
	if *proxies != "" {
		trusted = strings.Split(*proxies, ",")
	}
	ip, err := sdk.TrustProxies(trusted...)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	client := sdk.New(*guardURL, key, sdk.WithAsyncErrorHandler(func(err error) {
		log.Warn("guard report failed", "err", err)
	}))
	a := newApp(log, client, ip, func(to, code string) { log.Info("one-time code", "to", to, "code", code) })
	srv := &http.Server{Addr: *listen, Handler: a, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("signup example listening", "addr", *listen, "guard", *guardURL)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(shut)
	_ = client.Flush(shut) // the last reports
	return err
}

// deviceCookie names the device id cookie; Guard trusts a device for a
// user after a success from it.
const deviceCookie = "device_id"

// codeTTL is how long a one-time code is valid.
const codeTTL = 5 * time.Minute

type account struct {
	salt, hash []byte
}

type pendingCode struct {
	code    string
	expires time.Time
}

// app is the service: accounts, pending codes and sessions in memory.
type app struct {
	log    *slog.Logger
	guard  *sdk.Client
	send   func(to, code string)
	now    func() time.Time
	mu     sync.Mutex
	users  map[string]account // by normalised e-mail
	codes  map[string]pendingCode
	logins map[string]string // session id -> e-mail
	http.Handler
}

func newApp(log *slog.Logger, guard *sdk.Client, ip *sdk.IPExtractor, send func(to, code string)) *app {
	a := &app{log: log, guard: guard, send: send, now: time.Now,
		users: map[string]account{}, codes: map[string]pendingCode{}, logins: map[string]string{}}
	protect := func(action, userField string) *sdk.Middleware {
		return &sdk.Middleware{
			Client: guard, Action: action, IP: ip, DeviceCookie: deviceCookie, Logger: log,
			User: func(r *http.Request) string { return formValue(r, userField) },
		}
	}
	mux := http.NewServeMux()
	mux.Handle("POST /signup", protect("signup", "email").Wrap(http.HandlerFunc(a.signup)))
	mux.Handle("POST /login", protect("login", "email").Wrap(http.HandlerFunc(a.login)))
	mux.Handle("POST /login/code", protect("otp_verify", "email").Wrap(http.HandlerFunc(a.verifyCode)))
	mux.HandleFunc("GET /me", a.me)
	a.Handler = withDevice(withJSONForm(mux))
	return a
}

// signup creates an account. Guard's signup rules (per IP and device) run
// before it; an existing e-mail gets the same answer as a new one, so the
// form does not tell which accounts exist.
func (a *app) signup(w http.ResponseWriter, r *http.Request) {
	email, password := normalise(formValue(r, "email")), formValue(r, "password")
	if !strings.Contains(email, "@") || len(password) < 10 {
		reply(w, http.StatusBadRequest, "an e-mail address and a password of at least 10 characters, please")
		return
	}
	salt := make([]byte, 16)
	_, _ = rand.Read(salt)
	hash := passwordHash(password, salt)
	a.mu.Lock()
	if _, taken := a.users[email]; !taken {
		a.users[email] = account{salt: salt, hash: hash}
	}
	a.mu.Unlock()
	sdk.AttemptFrom(r.Context()).Report(r.Context(), sdk.OutcomeSuccess)
	reply(w, http.StatusOK, "check your inbox to continue")
}

// login checks the password and sends a one-time code. A wrong password
// and an unknown account are one failure, reported to Guard alike.
func (a *app) login(w http.ResponseWriter, r *http.Request) {
	attempt := sdk.AttemptFrom(r.Context())
	email := normalise(formValue(r, "email"))
	if !a.passwordOK(email, formValue(r, "password")) {
		attempt.Report(r.Context(), sdk.OutcomeFailure)
		reply(w, http.StatusUnauthorized, "wrong e-mail or password")
		return
	}
	attempt.Report(r.Context(), sdk.OutcomeSuccess)

	// Sending a code costs money and can be abused (SMS pumping): ask
	// Guard first, per user and per address.
	s := attempt.Subject
	res, err := a.guard.Check(r.Context(), s.Check("otp_send"), sdk.FailOpen)
	if err != nil {
		a.log.Error("guard otp_send check", "err", err)
		reply(w, http.StatusInternalServerError, "something went wrong")
		return
	}
	if !res.Allowed() {
		sdk.WriteDenial(w, res)
		return
	}
	code, _ := rand.Int(rand.Reader, big.NewInt(1_000_000))
	text := fmt.Sprintf("%06d", code)
	a.mu.Lock()
	a.codes[email] = pendingCode{code: text, expires: a.now().Add(codeTTL)}
	a.mu.Unlock()
	a.send(email, text)
	reply(w, http.StatusOK, "we sent you a code")
}

// verifyCode checks the one-time code; otp_verify's failure rules lock
// out guessing.
func (a *app) verifyCode(w http.ResponseWriter, r *http.Request) {
	attempt := sdk.AttemptFrom(r.Context())
	email := normalise(formValue(r, "email"))
	a.mu.Lock()
	p, ok := a.codes[email]
	ok = ok && a.now().Before(p.expires) &&
		subtle.ConstantTimeCompare([]byte(p.code), []byte(formValue(r, "code"))) == 1
	if ok {
		delete(a.codes, email)
	}
	a.mu.Unlock()
	if !ok {
		attempt.Report(r.Context(), sdk.OutcomeFailure)
		reply(w, http.StatusUnauthorized, "wrong or expired code")
		return
	}
	// The success clears this user's failures from this address and
	// device and trusts the device for them (Guard's trusted_devices).
	attempt.Report(r.Context(), sdk.OutcomeSuccess)
	sid := randomID()
	a.mu.Lock()
	a.logins[sid] = email
	a.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: "session", Value: sid, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	reply(w, http.StatusOK, "welcome")
}

func (a *app) me(w http.ResponseWriter, r *http.Request) {
	c, err := r.Cookie("session")
	a.mu.Lock()
	email, ok := "", false
	if err == nil {
		email, ok = a.logins[c.Value]
	}
	a.mu.Unlock()
	if !ok {
		reply(w, http.StatusUnauthorized, "not logged in")
		return
	}
	reply(w, http.StatusOK, email)
}

// dummy is compared with when the account does not exist, so a login for
// an unknown e-mail takes as long as one with a wrong password.
var dummy = account{salt: make([]byte, 16), hash: passwordHash("no such account", make([]byte, 16))}

func (a *app) passwordOK(email, password string) bool {
	a.mu.Lock()
	acc, ok := a.users[email]
	a.mu.Unlock()
	if !ok {
		acc = dummy
	}
	match := subtle.ConstantTimeCompare(passwordHash(password, acc.salt), acc.hash) == 1
	return ok && match
}

func passwordHash(password string, salt []byte) []byte {
	h, err := pbkdf2.Key(sha256.New, password, salt, 100_000, 32)
	if err != nil {
		panic(err) // only for a key length FIPS mode refuses; 32 is fine
	}
	return h
}

func normalise(email string) string { return strings.ToLower(strings.TrimSpace(email)) }

func randomID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// withDevice gives every browser a device id cookie on its first request
// (and the request itself carries it, so Guard sees it at once).
func withDevice(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(deviceCookie); err != nil || c.Value == "" || len(c.Value) > 64 {
			id := randomID()
			http.SetCookie(w, &http.Cookie{Name: deviceCookie, Value: id, Path: "/", HttpOnly: true,
				SameSite: http.SameSiteLaxMode, MaxAge: 400 * 24 * 3600})
			r.Header.Del("Cookie")
			r.AddCookie(&http.Cookie{Name: deviceCookie, Value: id})
		}
		next.ServeHTTP(w, r)
	})
}

// withJSONForm lets clients post JSON objects of strings as well as forms:
// a JSON body is read into r.Form.
func withJSONForm(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") {
			var body map[string]string
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 8<<10)).Decode(&body); err != nil {
				reply(w, http.StatusBadRequest, "the body must be a JSON object of strings")
				return
			}
			r.Form = map[string][]string{}
			r.PostForm = r.Form
			for k, v := range body {
				r.Form.Set(k, v)
			}
		}
		next.ServeHTTP(w, r)
	})
}

func formValue(r *http.Request, name string) string {
	r.Body = http.MaxBytesReader(nil, r.Body, 8<<10)
	return r.FormValue(name)
}

func reply(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
}
