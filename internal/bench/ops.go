package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/sdk"
)

// Subject is the identity of worker w's i-th operation: one of keys
// distinct users, each with its own IPv4 address.
func Subject(keys, w, i int) (user, ip string) {
	n := (w*7919 + i) % keys
	return "user" + strconv.Itoa(n) + "@example.com",
		"10." + strconv.Itoa(n>>16&255) + "." + strconv.Itoa(n>>8&255) + "." + strconv.Itoa(n&255)
}

// CheckOp decides a login of Subject(keys, w, i) with g.Check, in process.
func CheckOp(g *abuse.Guard, keys int) Op {
	return func(ctx context.Context, w, i int) error {
		user, ip := Subject(keys, w, i)
		d, err := g.Check(ctx, abuse.CheckInput{Action: "login", Subject: abuse.Subject{User: &user, IP: &ip}, APIKey: "bench"})
		if err == nil && d.Degraded {
			return ErrDegraded
		}
		return err
	}
}

// HTTPOp serves h on a fresh loopback port and returns an Op that posts a
// login check of Subject(keys, w, i) to it through the Go SDK with apiKey,
// and a function that stops the server.
func HTTPOp(h http.Handler, apiKey string, concurrency, keys int) (Op, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	transport := &http.Transport{MaxIdleConns: concurrency * 2, MaxIdleConnsPerHost: concurrency * 2}
	client := sdk.New("http://"+ln.Addr().String(), apiKey,
		sdk.WithHTTPClient(&http.Client{Transport: transport, Timeout: 10 * time.Second}), sdk.WithTimeout(10*time.Second))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		transport.CloseIdleConnections()
	}
	op := func(ctx context.Context, w, i int) error {
		user, ip := Subject(keys, w, i)
		res, err := client.Check(ctx, sdk.CheckRequest{Action: "login", User: &user, IP: &ip})
		if err == nil && res.Degraded {
			return ErrDegraded
		}
		return err
	}
	return op, stop, nil
}

// WarmUp repeats op until it succeeds, for at most d: the first calls load
// the Lua script and open connections, which on a loaded machine can miss
// the store's budget and open the breaker, so measuring starts only once
// the store answers within it. An error other than ErrDegraded ends it.
func WarmUp(ctx context.Context, op Op, d time.Duration) error {
	deadline := time.Now().Add(d)
	for i := 0; ; i++ {
		err := op(ctx, 0, i)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrDegraded) || time.Now().After(deadline) {
			return fmt.Errorf("warm-up: %w", err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
