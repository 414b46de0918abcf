package limits

import (
	"context"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// Late calls. A call that Redis does not answer within its caller's
// deadline has been answered without Redis by then (the failover store's
// fallback, or a 503 for an admin call), but what it wrote is already in
// Redis's socket buffer: a Redis that hangs (SIGSTOP, a long command, a
// partition that heals) runs it when it reads it again, closed connection
// or not. Run that late, a check counts an attempt twice and may strike a
// lockout (reserve_failures, count_denials) that no answer, audit event or
// notification names, and an unlock or manual lock answered 503 takes
// effect unaudited. So every call carries its caller's deadline, on Redis's
// clock, as its last argument ("~" and the milliseconds in hexadecimal,
// "~0" for none), and the function library and the lock script refuse a
// call that they begin after it (reply "LATE <now>") before they read or
// write anything.
//
// The deadline is translated with an estimate of how far Redis's clock is
// ahead of this process's that is never below the truth: every reply
// starts with Redis's now, read after the call was sent, so now minus the
// send time (plus a millisecond for the truncation of both) bounds the
// offset from above. The estimate is the largest such bound of the last
// minute or two (on Cluster, over every node's clock) from replies that
// took at most lateSampleRTT (and from LATE refusals while their caller
// still waits, whatever they took), so a call that Redis begins before its
// caller's deadline is never refused; one begun later by more than that
// slack (a round trip, and the skew between nodes) is. Without such a
// reply in two epochs calls carry no deadline. A
// step of this process's clock backwards (or of Redis's forwards) may make
// a few calls LATE before the replies that say so raise the estimate:
// the batcher sends such a call once more while its caller still waits (a
// LATE call did nothing), with the estimate its refusal has raised.

// lateEpoch is how long a bound of the offset counts: an estimate follows
// a clock step that lowers the offset within two epochs.
const lateEpoch = time.Minute

// lateSampleRTT is the slowest reply whose bound counts: a bound exceeds
// the offset by up to the call's round trip, and the estimate is the
// largest bound, so one slow reply (a listing that took a second) would
// let calls run that late for two epochs.
const lateSampleRTT = 100 * time.Millisecond

// noOffset marks an epoch without a bound yet.
const noOffset = math.MinInt64

// noDeadline is the last argument of a call without a deadline on Redis's
// clock (no caller deadline, or no estimate yet).
var noDeadline any = "~0"

// redisClock holds the estimate of Redis's clock offset (see "Late calls").
type redisClock struct {
	cur, prev atomic.Int64 // the largest bounds (ms) of this and the last epoch
	epoch     atomic.Int64 // when cur's epoch began, Unix ms
}

func newRedisClock() *redisClock {
	c := &redisClock{}
	c.cur.Store(noOffset)
	c.prev.Store(noOffset)
	return c
}

// offset is the estimate in ms, false when no reply has been seen within
// the last two epochs.
func (c *redisClock) offset() (int64, bool) {
	// cur's bounds are from the epoch that began at epoch, prev's from
	// the one before; observe rotates them only when a bound comes.
	age := time.Now().UnixMilli() - c.epoch.Load()
	o := int64(noOffset)
	if age < 3*lateEpoch.Milliseconds() {
		o = c.cur.Load()
	}
	if age < 2*lateEpoch.Milliseconds() {
		o = max(o, c.prev.Load())
	}
	return o, o != noOffset
}

// deadline is the last argument of a call bounded by ctx.
func (c *redisClock) deadline(ctx context.Context) any {
	d, ok := ctx.Deadline()
	if !ok {
		return noDeadline
	}
	o, ok := c.offset()
	if !ok {
		return noDeadline
	}
	return "~" + strconv.FormatInt(max(d.UnixMilli()+o+1, 1), 16)
}

// isLate reports whether err is the refusal of a late call.
func isLate(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "LATE ")
}

// observe takes a bound of the offset from a reply (res, or a LATE error)
// to a call sent at sent on behalf of ctx. A LATE refusal while ctx still
// runs counts whatever its round trip: Redis began the call before the
// caller's deadline, so the estimate was too low (a failover, a clock
// step), and ignored, it would leave the retry (retryLate) the deadline
// just refused. Its bound exceeds the offset by at most the time the
// caller had left.
func (c *redisClock) observe(ctx context.Context, sent time.Time, res []any, err error) {
	var now int64
	alive := false
	switch {
	case err == nil && len(res) > 0:
		n, ok := res[0].(int64)
		if !ok {
			return
		}
		now = n
	case isLate(err):
		n, perr := strconv.ParseInt(strings.TrimPrefix(err.Error(), "LATE "), 10, 64)
		if perr != nil {
			return
		}
		now = n
		alive = ctx.Err() == nil
	default:
		return
	}
	if !alive && time.Since(sent) > lateSampleRTT {
		return
	}
	local := sent.UnixMilli()
	bound := now - local + 1
	if e := c.epoch.Load(); local-e >= lateEpoch.Milliseconds() && c.epoch.CompareAndSwap(e, local) {
		old := c.cur.Swap(noOffset)
		if local-e >= 3*lateEpoch.Milliseconds() {
			old = noOffset // expired already (offset)
		}
		c.prev.Store(old)
	}
	for {
		o := c.cur.Load()
		if bound <= o || c.cur.CompareAndSwap(o, bound) {
			return
		}
	}
}
