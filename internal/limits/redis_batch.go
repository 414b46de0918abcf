package limits

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// batcher runs script calls of concurrent decisions together: a worker
// takes the first waiting call and every call queued behind it (up to
// maxBatch) and sends them as one pipeline, so under load Redis and Guard
// spend one read and one write per batch instead of per decision. It never
// waits for company: a call on an idle store goes out at once, alone.
// go-redis's cluster pipeline splits a batch by node.
type batcher struct {
	client   redis.UniversalClient
	script   *redis.Script
	calls    chan *pending
	maxBatch int
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

// pending is one script call waiting for its reply.
type pending struct {
	ctx  context.Context
	keys []string
	args []any
	res  []any
	err  error
	done chan struct{}
}

func newBatcher(client redis.UniversalClient, script *redis.Script, workers, maxBatch int) *batcher {
	b := &batcher{
		client:   client,
		script:   script,
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
	if len(live) == 1 {
		c := live[0]
		c.res, c.err = b.script.Run(c.ctx, b.client, c.keys, c.args...).Slice()
		close(c.done)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(live))
	for i, c := range live {
		cmds[i] = pipe.EvalSha(ctx, b.script.Hash(), c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	var again []int
	for i, c := range live {
		c.res, c.err = cmds[i].Slice()
		if c.err != nil && redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			again = append(again, i)
			continue
		}
		close(c.done)
	}
	if len(again) == 0 {
		return
	}
	// After a restart, SCRIPT FLUSH or failover the whole batch meets
	// NOSCRIPT: load the script once and send those calls again together,
	// rather than one EVAL after another while their budgets run out.
	if err := b.script.Load(ctx, b.client).Err(); err != nil {
		for _, i := range again {
			live[i].err = err
			close(live[i].done)
		}
		return
	}
	pipe = b.client.Pipeline()
	for _, i := range again {
		c := live[i]
		cmds[i] = pipe.EvalSha(ctx, b.script.Hash(), c.keys, c.args...)
	}
	_, _ = pipe.Exec(ctx)
	for _, i := range again {
		live[i].res, live[i].err = cmds[i].Slice()
		close(live[i].done)
	}
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
