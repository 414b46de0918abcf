package limits

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher runs the function calls of concurrent decisions together: a worker
// takes the first waiting call and every call queued behind it (up to
// maxBatch) and sends them as one pipeline, so under load Redis and Guard
// spend one read and one write per batch instead of per decision. It never
// waits for company: a call on an idle store goes out at once, alone.
// go-redis's cluster pipeline splits a batch by node.
type batcher struct {
	client   redis.UniversalClient
	fn       *redisFunc
	clock    *redisClock
	calls    chan *pending
	maxBatch int
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// pending is one function call waiting for its reply.
type pending struct {
	ctx  context.Context
	keys []string
	args []any
	res  []any
	err  error
	done chan struct{}
}

func newBatcher(client redis.UniversalClient, fn *redisFunc, clock *redisClock, workers, maxBatch int) *batcher {
	b := &batcher{
		client:   client,
		fn:       fn,
		clock:    clock,
		calls:    make(chan *pending, workers*maxBatch),
		maxBatch: maxBatch,
		stop:     make(chan struct{}),
	}
	b.wg.Add(workers)
	for range workers {
		go b.work()
	}
	return b
}

// close stops the workers after the calls they hold; later calls fail.
func (b *batcher) close() {
	b.stopOnce.Do(func() { close(b.stop) })
	b.wg.Wait()
}

var errBatcherClosed = errors.New("redis store closed")

// run sends every call and waits for all replies (or for ctx). The
// replies and errors are in the calls.
func (b *batcher) run(ctx context.Context, calls []*pending) error {
	for _, c := range calls {
		c.ctx = ctx
		c.done = make(chan struct{})
		select {
		case b.calls <- c:
		case <-b.stop:
			return errBatcherClosed
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, c := range calls {
		select {
		case <-c.done:
		case <-ctx.Done():
			return ctx.Err()
		case <-b.stop:
			return errBatcherClosed
		}
	}
	return nil
}

func (b *batcher) work() {
	defer b.wg.Done()
	batch := make([]*pending, 0, b.maxBatch)
	for {
		select {
		case <-b.stop:
			return
		case c := <-b.calls:
			batch = append(batch[:0], c)
		more:
			for len(batch) < b.maxBatch {
				select {
				case c := <-b.calls:
					batch = append(batch, c)
				default:
					break more
				}
			}
			b.exec(batch)
			clear(batch)
		}
	}
}

// runHere sends calls on the caller's goroutine, as one batch of their
// own, bounded by ctx. Admin calls (an unlock) go this way: queued among
// decisions, a call with a 2 s deadline would hold one of the workers for
// that long on a Redis that hangs.
func (b *batcher) runHere(ctx context.Context, calls []*pending) error {
	select {
	case <-b.stop:
		return errBatcherClosed
	default:
	}
	for _, c := range calls {
		c.ctx = ctx
		c.done = make(chan struct{})
	}
	b.exec(calls)
	return ctx.Err()
}

// exec sends one batch. Its deadline is the latest of its calls' (each
// caller stops waiting at its own); a call whose caller has gone is
// dropped before sending.
func (b *batcher) exec(batch []*pending) {
	live := batch[:0]
	for _, c := range batch {
		if err := c.ctx.Err(); err != nil {
			c.err = err
			close(c.done)
			continue
		}
		live = append(live, c)
	}
	if len(live) == 0 {
		return
	}
	// Each call's last argument is its caller's deadline on Redis's
	// clock, past which the function refuses it ("Late calls").
	for _, c := range live {
		c.args = append(c.args, b.clock.deadline(c.ctx))
	}
	sent := time.Now()
	if len(live) == 1 {
		c := live[0]
		c.res, c.err = b.fcall(c.ctx, b.client, c)
		if functionMissing(c.err) {
			if c.err = b.fn.reload(c.ctx, b.client); c.err == nil {
				sent = time.Now()
				c.res, c.err = b.fcall(c.ctx, b.client, c)
			}
		}
		b.clock.observe(c.ctx, sent, c.res, c.err)
		b.retryLate(c)
		close(c.done)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	cmds := b.pipeline(ctx, live)
	var again []*pending
	for i, c := range live {
		c.res, c.err = cmds[i].Slice()
		if functionMissing(c.err) {
			again = append(again, c)
			continue
		}
		b.clock.observe(c.ctx, sent, c.res, c.err)
		b.retryLate(c)
		close(c.done)
	}
	if len(again) == 0 {
		return
	}
	// After a restart, FUNCTION FLUSH or failover the whole batch meets
	// "Function not found": load the library once and send those calls
	// again together, rather than one after another while their budgets
	// run out.
	if err := b.fn.reload(ctx, b.client); err != nil {
		for _, c := range again {
			c.err = err
			close(c.done)
		}
		return
	}
	sent = time.Now()
	for i, cmd := range b.pipeline(ctx, again) {
		again[i].res, again[i].err = cmd.Slice()
		b.clock.observe(again[i].ctx, sent, again[i].res, again[i].err)
		b.retryLate(again[i])
		close(again[i].done)
	}
}

// retryLate sends c once more, alone, when the function refused it as
// LATE while its caller still waits: the estimate of Redis's clock was too
// low (a failover to a node whose clock is ahead, a clock step), and the
// refusal's now has raised it. A LATE call did nothing, so sending it again
// cannot run it twice; one whose caller has gone is not sent again.
func (b *batcher) retryLate(c *pending) {
	if !isLate(c.err) || c.ctx.Err() != nil {
		return
	}
	c.args[len(c.args)-1] = b.clock.deadline(c.ctx)
	sent := time.Now()
	c.res, c.err = b.fcall(c.ctx, b.client, c)
	b.clock.observe(c.ctx, sent, c.res, c.err)
}

// fcall sends one call alone.
func (b *batcher) fcall(ctx context.Context, c redis.Cmdable, p *pending) ([]any, error) {
	return c.FCall(ctx, b.fn.name, p.keys, p.args...).Slice()
}

// pipeline sends calls as one pipeline and returns their commands; errors
// are per command.
func (b *batcher) pipeline(ctx context.Context, calls []*pending) []*redis.Cmd {
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(calls))
	for i, c := range calls {
		cmds[i] = pipe.FCall(ctx, b.fn.name, c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	return cmds
}

func batchContext(calls []*pending) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, c := range calls {
		d, ok := c.ctx.Deadline()
		if !ok {
			return context.WithCancel(context.Background())
		}
		if d.After(latest) {
			latest = d
		}
	}
	return context.WithDeadline(context.Background(), latest)
}
