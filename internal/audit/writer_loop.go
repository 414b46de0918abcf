package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// run is the writer goroutine: the only one that writes to the store,
// replays or fsyncs the spool.
func (w *Writer) run() {
	defer close(w.done)
	ticker := time.NewTicker(w.cfg.FlushInterval)
	defer ticker.Stop()
	batch := make([]Event, 0, w.cfg.BatchSize)
	for {
		select {
		case e := <-w.q:
			batch = append(batch, e)
			if len(batch) >= w.cfg.BatchSize {
				w.flush(batch)
				batch = batch[:0]
			}
		case <-ticker.C:
			if len(batch) > 0 {
				w.flush(batch)
				batch = batch[:0]
			}
			w.tick()
		case <-w.stop:
			w.finish(batch)
			return
		}
	}
}

// flush writes one batch: to the store, or to the spool while the store is
// down or older events still wait in the spool (so the store receives them
// in order).
func (w *Writer) flush(batch []Event) {
	// Whatever happens below, the batch leaves the queue's count: written,
	// spooled (counted there) or dropped (counted as such).
	defer w.queued.Add(-int64(len(batch)))
	if w.spool != nil {
		if pending, _ := w.spool.stats(); pending > 0 || !w.up.Load() {
			w.toSpool(batch)
			return
		}
	}
	err := w.insert(batch)
	if err == nil {
		return
	}
	w.markDown(err)
	if w.spool != nil {
		w.toSpool(batch)
		return
	}
	// No spool: hold this batch and retry; meanwhile new events wait in the
	// queue, and only what overflows it is dropped (newest lost, oldest kept).
	for {
		select {
		case <-w.ctx.Done():
			w.drop(len(batch), "store down at shutdown")
			w.closeErr = errors.Join(w.closeErr, fmt.Errorf("audit writer: %d events dropped: store unreachable: %w", len(batch), err))
			return
		case <-time.After(w.cfg.RetryInterval):
		}
		if err = w.insert(batch); err == nil {
			return
		}
	}
}

// insert writes events to the store with a timeout. Events the store
// rejects as bad data (not an outage) are isolated and dropped, so one
// poisoned event can never wedge the writer or the spool.
func (w *Writer) insert(events []Event) error {
	err := w.insertOnce(events)
	if err == nil {
		w.markUp()
		w.written.Add(uint64(len(events)))
		if w.hooks.OnWritten != nil {
			w.hooks.OnWritten(len(events))
		}
		return nil
	}
	if !rejectedData(err) {
		return err
	}
	w.markUp() // the server answered
	ok := 0
	for _, e := range events {
		if err := w.insertOnce([]Event{e}); err != nil {
			if !rejectedData(err) {
				return err
			}
			w.logger.Error("audit event rejected by the store; dropped", "id", e.ID, "err", err)
			w.drop(1, "rejected by store")
			continue
		}
		ok++
	}
	w.written.Add(uint64(ok))
	if w.hooks.OnWritten != nil && ok > 0 {
		w.hooks.OnWritten(ok)
	}
	return nil
}

func (w *Writer) insertOnce(events []Event) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.InsertTimeout)
	defer cancel()
	return w.store.Insert(ctx, events)
}

// rejectedData reports whether Postgres refused the rows themselves (data
// exception or integrity violation), as opposed to being unreachable.
func rejectedData(err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return false
	}
	return len(pe.Code) == 5 && (pe.Code[:2] == "22" || pe.Code[:2] == "23")
}

func (w *Writer) toSpool(batch []Event) {
	n, err := w.spool.append(batch)
	if err != nil {
		w.spoolError(err)
		w.drop(len(batch)-n, "spool")
	}
}

// tick runs every FlushInterval: group fsync of the spool, and replay (or
// a probe) when events wait there.
func (w *Writer) tick() {
	if w.spool == nil {
		return
	}
	if err := w.spool.sync(); err != nil {
		w.logger.Error("audit spool fsync failed", "err", err)
	}
	pending, _ := w.spool.stats()
	if !w.up.Load() && w.cfg.Now().Sub(w.lastProbe) < w.cfg.RetryInterval {
		return
	}
	w.lastProbe = w.cfg.Now()
	if pending == 0 {
		if !w.up.Load() {
			// Nothing to replay (the spool filled up): probe instead.
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.InsertTimeout)
			if err := w.store.Ping(ctx); err == nil {
				w.markUp()
			}
			cancel()
		}
		return
	}
	// Replay for about one interval, then let the loop drain the queue.
	w.replay(w.cfg.Now().Add(w.cfg.FlushInterval))
}

// replay writes spooled events to the store in order, batch by batch, until
// the spool is empty, the store fails, or the deadline passes.
func (w *Writer) replay(deadline time.Time) {
	for {
		events, next, records, err := w.spool.read(w.cfg.BatchSize)
		if err != nil {
			w.logger.Error("audit spool read failed", "err", err)
			return
		}
		if records == 0 {
			return
		}
		if len(events) > 0 {
			if err := w.insert(events); err != nil {
				w.markDown(err)
				return
			}
		}
		pending, err := w.spool.commit(next, records)
		if err != nil {
			w.logger.Error("audit spool truncate failed", "err", err)
			return
		}
		if pending == 0 {
			w.logger.Info("audit spool replayed")
			if w.spoolFull.Swap(false) && w.hooks.OnSpoolFull != nil {
				w.hooks.OnSpoolFull(false)
			}
			return
		}
		if w.cfg.Now().After(deadline) {
			return
		}
	}
}

// finish runs on Close: drain the queue, write it, replay the spool while
// the store answers and Close's deadline allows, and close the spool.
func (w *Writer) finish(batch []Event) {
	for {
		select {
		case e := <-w.q:
			batch = append(batch, e)
			if len(batch) >= w.cfg.BatchSize {
				w.flush(batch)
				batch = batch[:0]
			}
			continue
		default:
		}
		break
	}
	if len(batch) > 0 {
		w.flush(batch)
	}
	if w.spool == nil {
		return
	}
	// Try even if the last write failed: the store may be back by now.
	for w.ctx.Err() == nil {
		before, _ := w.spool.stats()
		if before == 0 {
			break
		}
		w.replay(w.cfg.Now().Add(w.cfg.FlushInterval))
		if after, _ := w.spool.stats(); after == before {
			break // no progress: the store is down
		}
	}
	if pending, _ := w.spool.stats(); pending > 0 {
		w.logger.Warn("audit spool kept for the next start", "events", pending, "path", w.spool.path)
	}
	if err := w.spool.close(); err != nil {
		w.closeErr = errors.Join(w.closeErr, fmt.Errorf("audit writer: %w", err))
	}
}
