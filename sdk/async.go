package sdk

import (
	"context"
	"errors"
)

// ErrTooManyPendingReports is what ReportAsync hands the async error
// handler when WithMaxPendingReports reports are already in flight.
var ErrTooManyPendingReports = errors.New("guard: too many reports pending; report dropped")

// ReportAsync sends req in the background and returns at once, so a
// login answers without waiting for Guard. The report runs detached from
// ctx's cancellation (a request context that ends when the handler
// returns does not cut it short; ctx's values are kept) and is bounded by
// the client's timeout. Errors go to WithAsyncErrorHandler. Flush waits
// for the reports in flight.
func (c *Client) ReportAsync(ctx context.Context, req ReportRequest) {
	select {
	case c.slots <- struct{}{}:
	default:
		c.asyncError(ErrTooManyPendingReports)
		return
	}
	ctx = context.WithoutCancel(ctx)
	c.pending.Add(1)
	go func() {
		defer c.pending.Done()
		defer func() { <-c.slots }()
		if _, err := c.Report(ctx, req); err != nil {
			c.asyncError(err)
		}
	}()
}

// Flush waits until every report started by ReportAsync has ended, or ctx
// ends (its error is returned). Call it on shutdown.
func (c *Client) Flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		c.pending.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *Client) asyncError(err error) {
	if c.onAsyncError != nil {
		c.onAsyncError(err)
	}
}
