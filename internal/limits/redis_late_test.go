package limits

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"
)

// TestRedisClockEstimate: the estimate of Redis's clock offset is the
// largest bound from quick replies (and LATE refusals), ignores slow
// replies, and a call carries "~0" until there is one or without a
// deadline.
func TestRedisClockEstimate(t *testing.T) {
	c := newRedisClock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if got := c.deadline(ctx); got != noDeadline {
		t.Errorf("deadline without an estimate = %v; want %v", got, noDeadline)
	}
	sent := time.Now()
	local := sent.UnixMilli()
	c.observe(context.Background(), sent, []any{local + 5000}, nil) // Redis 5s ahead
	c.observe(context.Background(), sent, []any{local + 4000}, nil) // a lower bound changes nothing
	if o, ok := c.offset(); !ok || o != 5001 {
		t.Errorf("offset = %d, %v; want 5001", o, ok)
	}
	c.observe(context.Background(), sent, nil, errors.New("LATE "+strconv.FormatInt(local+6000, 10)))
	if o, _ := c.offset(); o != 6001 {
		t.Errorf("offset after a LATE refusal = %d; want 6001", o)
	}
	c.observe(context.Background(), time.Now().Add(-time.Second), []any{local + 60000}, nil) // a reply that took 1s
	if o, _ := c.offset(); o != 6001 {
		t.Errorf("offset after a slow reply = %d; want it ignored (6001)", o)
	}
	d, _ := ctx.Deadline()
	if got, want := c.deadline(ctx), "~"+strconv.FormatInt(d.UnixMilli()+6002, 16); got != want {
		t.Errorf("deadline = %v; want %v", got, want)
	}
	if got := c.deadline(context.Background()); got != noDeadline {
		t.Errorf("deadline of a call without one = %v; want %v", got, noDeadline)
	}
	// Two epochs later the old bounds are gone.
	c.epoch.Store(local - 2*lateEpoch.Milliseconds())
	c.observe(context.Background(), sent, []any{local + 1000}, nil)
	if o, _ := c.offset(); o != 6001 {
		t.Errorf("offset one epoch on = %d; want the last epoch's 6001 still", o)
	}
	c.epoch.Store(local - 2*lateEpoch.Milliseconds())
	c.observe(context.Background(), sent, []any{local + 1000}, nil)
	if o, _ := c.offset(); o != 1001 {
		t.Errorf("offset two epochs on = %d; want 1001", o)
	}
}

// TestRedisClockSlowLate: a slow LATE refusal raises the estimate while
// its caller still waits (the estimate was too low), not once the
// caller's deadline has passed (a Redis that hung: its round trip says
// nothing of the clock).
func TestRedisClockSlowLate(t *testing.T) {
	c := newRedisClock()
	sent := time.Now().Add(-time.Second) // a refusal that took 1s
	local := sent.UnixMilli()
	late := errors.New("LATE " + strconv.FormatInt(local+5000, 10))
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	c.observe(gone, sent, nil, late)
	if o, ok := c.offset(); ok {
		t.Errorf("offset after a slow refusal of a call whose caller had gone = %d; want none", o)
	}
	c.observe(context.Background(), sent, nil, late)
	if o, _ := c.offset(); o != 5001 {
		t.Errorf("offset after a slow refusal while its caller waits = %d; want 5001", o)
	}
}

// TestRedisClockExpires: without a bound for two epochs (a Redis that
// only answered slowly, or was not called) calls carry no deadline, as
// offset and docs/redis.md say, rather than one from an estimate minutes
// or hours old (the clocks may have stepped or drifted since).
func TestRedisClockExpires(t *testing.T) {
	c := newRedisClock()
	sent := time.Now()
	local := sent.UnixMilli()
	c.observe(context.Background(), sent, []any{local + 5000}, nil)
	c.epoch.Store(local - 3*lateEpoch.Milliseconds())
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if o, ok := c.offset(); ok {
		t.Errorf("offset three epochs after the last bound = %d; want none", o)
	}
	if got := c.deadline(ctx); got != noDeadline {
		t.Errorf("deadline three epochs after the last bound = %v; want %v", got, noDeadline)
	}
	// A new bound after such a gap does not bring the old one back.
	c.observe(context.Background(), sent, []any{local + 1000}, nil)
	if o, _ := c.offset(); o != 1001 {
		t.Errorf("offset after a gap of three epochs and a new bound = %d; want 1001", o)
	}
}
