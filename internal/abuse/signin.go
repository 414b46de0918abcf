package abuse

import (
	"context"
	"fmt"
	"time"

	"github.com/guardhq/guard/internal/limits"
)

// Refused sign-ins of the review pages are counted in the limit store, so
// every instance on one Redis shares one count per client address: a
// fleet of N instances does not give a key guesser N times the limit.
// While Redis is down the failover store counts them on each instance,
// as it does decisions.

// SignInBlocked reports whether client (an address, or an IPv6 /64; ""
// for none) has made limit refused sign-ins in the last window, and then
// how long until one of them leaves it. It writes nothing.
func (g *Guard) SignInBlocked(ctx context.Context, client string, limit int, window time.Duration) (time.Duration, bool, error) {
	res, err := g.signIns(ctx, client, limit, window, true)
	if err != nil {
		return 0, false, err
	}
	r := res.Rules[0]
	return r.RetryAfter, !r.Allowed, nil
}

// SignInRefused counts one refused sign-in of client (see SignInBlocked);
// a client already at its limit is not counted further.
func (g *Guard) SignInRefused(ctx context.Context, client string, limit int, window time.Duration) error {
	_, err := g.signIns(ctx, client, limit, window, false)
	return err
}

func (g *Guard) signIns(ctx context.Context, client string, limit int, window time.Duration, dry bool) (limits.CheckResult, error) {
	req := limits.CheckRequest{
		Rules:  []limits.Rule{{Key: g.keys.signInKey(client), Limit: limit, Window: window}},
		Cost:   1,
		DryRun: dry,
		Nonce:  newID(g.nowMs()),
	}
	res, err := g.store.Check(ctx, &req)
	if err != nil {
		return limits.CheckResult{}, fmt.Errorf("review sign-ins: %w", err)
	}
	if len(res.Rules) != 1 {
		return limits.CheckResult{}, fmt.Errorf("review sign-ins: the store answered %d rules for 1", len(res.Rules))
	}
	return res, nil
}
