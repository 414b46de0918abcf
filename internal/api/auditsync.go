package api

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/guardhq/guard/internal/audit"
)

// auditSyncWait bounds how long a read of the trail waits for the events
// recorded before it (Deps.AuditSync). Past it the read goes ahead
// without them: a slow store delays an answer, it never fails it.
const auditSyncWait = time.Second

// syncedReader is an AuditReader whose reads first wait for the writer
// (Deps.AuditSync); syncedReview adds the review pages' reads when the
// store has them, so the pages keep their counts and links.
type syncedReader struct {
	r    AuditReader
	sync func(context.Context) error
	// stuck is when a wait last ran out (unix ns): for auditSyncWait
	// after it reads do not wait again, so that a page of several reads
	// waits at most auditSyncWait in all while the writer is stuck.
	stuck *atomic.Int64
}

type syncedReview struct {
	syncedReader
	rv auditReview
}

func syncAudit(r AuditReader, sync func(context.Context) error) AuditReader {
	sr := syncedReader{r: r, sync: sync, stuck: new(atomic.Int64)}
	if rv, ok := r.(auditReview); ok {
		return syncedReview{sr, rv}
	}
	return sr
}

func (s syncedReader) wait(ctx context.Context) {
	if t := s.stuck.Load(); t != 0 && time.Since(time.Unix(0, t)) < auditSyncWait {
		return
	}
	wctx, cancel := context.WithTimeout(ctx, auditSyncWait)
	defer cancel()
	if err := s.sync(wctx); err != nil && ctx.Err() == nil {
		s.stuck.Store(time.Now().UnixNano())
	}
}

func (s syncedReader) Query(ctx context.Context, f audit.Filter) (audit.Page, error) {
	s.wait(ctx)
	return s.r.Query(ctx, f)
}

func (s syncedReader) Stream(ctx context.Context, f audit.Filter, fn func(audit.Event) error) error {
	s.wait(ctx)
	return s.r.Stream(ctx, f, fn)
}

func (s syncedReview) QueryNewer(ctx context.Context, f audit.Filter) (audit.Page, error) {
	s.wait(ctx)
	return s.rv.QueryNewer(ctx, f)
}

func (s syncedReview) Count(ctx context.Context, f audit.Filter, max int) (int, error) {
	s.wait(ctx)
	return s.rv.Count(ctx, f, max)
}

func (s syncedReview) Overview(ctx context.Context, q audit.OverviewQuery) (audit.Overview, error) {
	s.wait(ctx)
	return s.rv.Overview(ctx, q)
}
