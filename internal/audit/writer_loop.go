package audit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// freshInserter is a Store with a faster write for events that cannot be
// stored yet (PGStore.InsertFresh: a plain COPY). It keeps Insert's
// contract, falling back to deduplication when an event is stored after
// all, so the writer choosing it wrongly costs time, never a duplicate.
type freshInserter interface {
	InsertFresh(ctx context.Context, events []Event) error
}

// Why an event could reach the store twice, and how each case is written:
//
//   - A batch of newly recorded events, never offered to the store: fresh
//     (InsertFresh).
//   - A batch whose write failed with an error that leaves its outcome
//     unknown (timeout, lost connection, Close's deadline): it may be
//     stored. Retried without a spool, or spooled and replayed, it goes
//     through Insert (deduplicating).
//   - Spool records a previous run left: it may have stored them before a
//     crash or while its last write timed out. Replayed through Insert.
//   - Spool records spooled by this run without being offered to the store
//     (the store was down, or the queue overflowed): replayed fresh, unless
//     a replay of them failed, which makes them maybe-stored.
//   - The same event recorded twice, or an ID reused: the fresh COPY fails
//     with a unique violation and PGStore.InsertFresh writes the batch again
//     through Insert.

// inflight is a batch being written by its own goroutine.
type inflight struct {
	batch   []Event
	done    chan writeResult // buffered: the goroutine never waits for the loop
	epoch   uint64           // Writer.upEpoch when the write started
	started time.Time        // when the write started
	seq     uint64           // Writer.writes when the write started
	res     *writeResult     // received from done ahead of its turn
	refused bool             // secure could not spool its batch (logged once)
	// The spool offsets of the batch's records once secure has copied it
	// there (or a replay read it from there): from the first, to after the
	// last, and how many records that is.
	spoolFrom, spoolTo int64
	records            int
	// replayed: a replay's write of spooled records, moved to the secured
	// writes when it took secureAfter (see replay); its batch is not a
	// pooled array.
	replayed bool
}

// peek receives f's result if it is in, without waiting, and reports
// whether it is.
func (f *inflight) peek() bool {
	if f.res == nil {
		select {
		case r := <-f.done:
			f.res = &r
		default:
		}
	}
	return f.res != nil
}

// wait waits for f's write until it has been in flight for secureAfter and
// reports whether its result is in (f.res); the caller secures the writes
// in flight when it is not.
func (w *Writer) wait(f *inflight) bool {
	if f.res != nil {
		return true
	}
	left := time.Until(f.started.Add(w.secureAfter()))
	if left > 0 {
		t := time.NewTimer(left)
		defer t.Stop()
		select {
		case r := <-f.done:
			f.res = &r
			return true
		case <-t.C:
			return false
		}
	}
	select {
	case r := <-f.done:
		f.res = &r
		return true
	default:
		return false
	}
}

// secureAfter is how long a write of new events may be in flight before
// its batch is copied into the spool: a store that hangs (a network
// partition, a lock) would otherwise keep those events, and the queue
// behind them, in memory only until InsertTimeout, beyond the crash loss
// bound of one FlushInterval.
func (w *Writer) secureAfter() time.Duration {
	return 2 * w.cfg.FlushInterval
}

// secure copies the batches of the writes in flight, oldest first, into
// the spool as maybe stored and moves those writes to w.secured: the loop
// goes on without their results (new batches go to the spool behind them,
// since it is not empty now), and a write's result, when it comes, tells
// whether the store is up (settle) and, when the write succeeded with its
// records at the front of the spool, takes them out and counts them
// written; otherwise they are counted when the spool's replay writes them
// or finds them stored. A batch the spool cannot take whole (no room, an
// event too large for a record, a full disk) stays in flight, and nothing
// of it is spooled: records of part of it would be replayed and counted on
// top of its own write, or lost to the disk and counted dropped though it
// stored them.
func (w *Writer) secure() {
	if w.spool == nil {
		return
	}
	for len(w.inflight) > 0 {
		f := w.inflight[0]
		if f.peek() {
			w.complete(*f.res)
			continue
		}
		from, to, err := w.spool.addWhole(f.batch)
		if err != nil {
			// Nothing is lost: its write decides (complete), so the spool
			// is not reported full for it.
			if !f.refused {
				f.refused = true
				w.logger.Warn("audit store slow: a batch in flight could not be spooled; it waits in memory for its write",
					"events", len(f.batch), "err", err)
			}
			return
		}
		w.logger.Warn("audit store slow: a batch in flight was spooled", "events", len(f.batch),
			"in_flight_for", time.Since(f.started).Round(time.Millisecond).String())
		f.spoolFrom, f.spoolTo, f.records = from, to, len(f.batch) // off the queue count (addWhole)
		w.inflight[0] = nil
		w.inflight = w.inflight[1:]
		w.secured = append(w.secured, f)
	}
}

// settle takes the result of the oldest secured write: whether the store
// is up. Its events are in the spool either way; when it stored them and
// they are the spool's first records, they are taken out and counted
// here, so that a store that is merely slow is not sent them again (the
// replay's deduplicating write, on a store already short of time: half
// again as many rows when every write takes longer than secureAfter).
// Behind older records they are left to the replay, which finds them
// stored. The offsets still hold: the spool is only cut to empty once all
// its records are committed, and the replay, which commits, waits for the
// secured writes.
func (w *Writer) settle(r writeResult) {
	f := w.secured[0]
	w.secured[0] = nil
	w.secured = w.secured[1:]
	if !f.replayed {
		w.release(f.batch)
	}
	switch {
	case r.err == nil:
		w.okSeq = max(w.okSeq, f.seq)
		if w.spool.front() != f.spoolFrom {
			w.markUp()
			return
		}
		if len(f.batch) > 0 {
			w.applied(r)
		}
		pending, err := w.spool.commit(f.spoolTo, f.records)
		switch {
		case err != nil:
			w.logger.Error("audit spool truncate failed", "err", err)
		case pending == 0:
			w.logger.Info("audit spool replayed")
			w.setFull(fullAll, false)
		}
	case f.epoch == w.upEpoch && w.ctx.Err() == nil && !w.succeededAfter(f):
		w.markDown(r.err)
	}
}

// succeededAfter reports whether a write started after f (of new events,
// or a replay's) has succeeded, as far as the results in show (it does
// not wait): then the store is up and f's failure was its own (a dead
// pooled connection timing out), no outage to report, as in
// laterWriteMaySucceed.
func (w *Writer) succeededAfter(f *inflight) bool {
	if w.okSeq > f.seq {
		return true
	}
	for _, later := range [][]*inflight{w.secured, w.inflight} {
		for _, g := range later {
			if g.seq > f.seq && g.peek() && g.res.err == nil {
				return true
			}
		}
	}
	return false
}

// result waits for f's write (unless received already) and returns it.
func (f *inflight) result() writeResult {
	if f.res == nil {
		r := <-f.done
		f.res = &r
	}
	return *f.res
}

// writeResult is what one batch's write did. Counters and hooks are
// applied on the writer goroutine.
type writeResult struct {
	written  int   // events stored (or found already stored)
	rejected int   // events the store refused as bad data, dropped
	err      error // the store failed: the whole batch's outcome is unknown
}

// run is the writer goroutine: the only one that starts store writes,
// replays or fsyncs the spool, and applies write results.
func (w *Writer) run() {
	defer close(w.done)
	ticker := time.NewTicker(w.cfg.FlushInterval)
	defer ticker.Stop()
	batch := w.newBatch()
	for {
		// Results received ahead of their turn (wait, peek) are applied
		// first: their done channels are empty now.
		for {
			if len(w.inflight) > 0 && w.inflight[0].res != nil {
				w.complete(*w.inflight[0].res)
			} else if len(w.secured) > 0 && w.secured[0].res != nil {
				w.settle(*w.secured[0].res)
			} else {
				break
			}
		}
		var oldest, oldestSecured chan writeResult
		if len(w.inflight) > 0 {
			oldest = w.inflight[0].done
		}
		if len(w.secured) > 0 {
			oldestSecured = w.secured[0].done
		}
		select {
		case e := <-w.q:
			batch = append(batch, e)
			if len(batch) >= w.cfg.BatchSize {
				w.flush(batch)
				batch = w.newBatch()
			}
		case req := <-w.syncs:
			// A Sync queued behind another finds the events taken already
			// and writes nothing: concurrent readers share the write.
			batch = w.take(batch)
			if len(batch) > 0 {
				w.flush(batch)
				batch = w.newBatch()
			}
			w.drain()
			close(req)
		case r := <-oldest:
			w.complete(r)
		case r := <-oldestSecured:
			w.settle(r)
		case err := <-w.probe:
			w.probed(err)
		case <-ticker.C:
			if len(batch) > 0 {
				w.flush(batch)
				batch = w.newBatch()
			}
			w.tick()
		case <-w.stop:
			w.finish(batch)
			return
		}
	}
}

// newBatch returns an empty batch, reusing the array of a finished one.
func (w *Writer) newBatch() []Event {
	if n := len(w.free); n > 0 {
		b := w.free[n-1]
		w.free = w.free[:n-1]
		return b
	}
	return make([]Event, 0, w.cfg.BatchSize)
}

// release hands a finished batch's array back for reuse.
func (w *Writer) release(batch []Event) {
	clear(batch) // drop the strings for the collector
	w.free = append(w.free, batch[:0])
}

// flush sends one batch of newly recorded events on its way: to the store
// as a write in flight (at most MaxInFlight of them, so the next batch's
// COPY overlaps the previous one's round trip and commit), or to the spool
// while the store is down or older events still wait there.
func (w *Writer) flush(batch []Event) {
	for len(w.inflight) >= w.cfg.MaxInFlight {
		if !w.wait(w.inflight[0]) {
			w.secure()
			if len(w.inflight) < w.cfg.MaxInFlight {
				break
			}
		}
		w.complete(w.inflight[0].result())
	}
	if w.spool != nil {
		if pending, _ := w.spool.stats(); pending > 0 || !w.up.Load() {
			// Batches in flight first: a failed one is spooled ahead of
			// this one, so the spool keeps the order events were recorded.
			w.drain()
			rest := w.toSpool(batch, false)
			if len(rest) == 0 || !w.up.Load() {
				w.drop(len(rest), "spool full")
				w.queued.Add(-int64(len(rest)))
				w.release(batch)
				return
			}
			// The spool is full of events being replayed (its file only
			// shrinks once empty) while the store takes writes: write
			// what it has no room for directly rather than lose it.
			clear(batch[:len(batch)-len(rest)])
			batch = rest
		}
	}
	w.writes++
	f := &inflight{batch: batch, done: make(chan writeResult, 1), epoch: w.upEpoch, started: time.Now(), seq: w.writes}
	w.inflight = append(w.inflight, f)
	go func() { f.done <- w.write(batch, true) }()
}

// drain waits for every write in flight and applies its result; a write
// in flight for secureAfter is secured instead (see secure), so the loop
// never waits on a hanging store for long.
func (w *Writer) drain() {
	for len(w.inflight) > 0 {
		if !w.wait(w.inflight[0]) {
			if w.secure(); len(w.inflight) == 0 {
				return
			}
		}
		w.complete(w.inflight[0].result())
	}
}

// complete applies the result of the oldest write in flight. A failed
// batch may be stored in part or whole (the error does not say), so it is
// spooled as maybe-stored, or, without a spool, retried through the
// deduplicating path while new events wait in the queue.
func (w *Writer) complete(r writeResult) {
	f := w.inflight[0]
	w.inflight[0] = nil
	w.inflight = w.inflight[1:]
	// Whatever happens below, the batch leaves the queue's count: written,
	// spooled (the spool takes it off, counting it its own) or dropped
	// (counted as such).
	defer w.release(f.batch)
	if w.spool == nil || r.err == nil {
		// Once written, or given up on (no spool: retried until then).
		defer w.queued.Add(-int64(len(f.batch)))
	}
	if r.err == nil {
		w.okSeq = max(w.okSeq, f.seq)
		w.applied(r)
		return
	}
	stale := f.epoch != w.upEpoch
	if !stale && w.ctx.Err() == nil && !w.laterWriteMaySucceed() {
		// A stale write started before the store came back: its failure
		// belongs to an outage already reported and over. A write cut
		// short by Close's deadline says nothing about the store.
		w.markDown(r.err)
	}
	if w.spool != nil {
		rest := w.toSpool(f.batch, true)
		w.drop(len(rest), "spool full")
		w.queued.Add(-int64(len(rest)))
		return
	}
	// No spool: hold this batch and retry; meanwhile new events wait in the
	// queue, and only what overflows it is dropped (newest lost, oldest kept).
	for wait := !stale; ; wait = true {
		if wait {
			select {
			case <-w.ctx.Done():
				w.drop(len(f.batch), "store down at shutdown")
				w.closeErr = errors.Join(w.closeErr, fmt.Errorf("audit writer: %d events dropped: store unreachable: %w", len(f.batch), r.err))
				return
			case <-time.After(w.cfg.RetryInterval):
			}
		}
		if r = w.write(f.batch, false); r.err == nil {
			w.applied(r)
			return
		}
	}
}

// laterWriteMaySucceed waits for the writes in flight started after the
// failed one (each until it has been in flight for secureAfter) and
// reports whether one succeeded, or has not answered by then. Succeeded:
// the store is up and only that write failed (a dead pooled connection,
// say), which is no outage to report. Not answered: waiting longer would
// hold the loop, and that write's own result tells, reporting the outage
// if it fails as well (complete, or settle once secured). Their results
// are applied in their turn.
func (w *Writer) laterWriteMaySucceed() bool {
	for _, g := range w.inflight {
		if !w.wait(g) || g.res.err == nil {
			return true
		}
	}
	return false
}

// applied counts a successful write and reports the store up.
func (w *Writer) applied(r writeResult) {
	w.markUp()
	if r.written > 0 {
		w.written.Add(uint64(r.written))
		if w.hooks.OnWritten != nil {
			w.hooks.OnWritten(r.written)
		}
	}
	w.drop(r.rejected, "rejected by store")
}

// write stores events with a timeout, through the fast path when fresh.
// Events the store rejects as bad data (not an outage) are isolated and
// dropped, so one poisoned event can never wedge the writer or the spool.
// It may run on its own goroutine: it touches no writer state.
func (w *Writer) write(events []Event, fresh bool) writeResult {
	err := w.insertOnce(events, fresh)
	if err == nil {
		return writeResult{written: len(events)}
	}
	if !rejectedData(err) {
		return writeResult{err: err}
	}
	// A rejected batch wrote nothing; the single writes deduplicate anyway,
	// as the store may have taken the batch through a path that did.
	var r writeResult
	for _, e := range events {
		if err := w.insertOnce([]Event{e}, false); err != nil {
			if !rejectedData(err) {
				return writeResult{err: err}
			}
			w.logger.Error("audit event rejected by the store; dropped", "id", e.ID, "err", err)
			r.rejected++
			continue
		}
		r.written++
	}
	return r
}

func (w *Writer) insertOnce(events []Event, fresh bool) error {
	ctx, cancel := context.WithTimeout(w.ctx, w.cfg.InsertTimeout)
	defer cancel()
	if fi, ok := w.store.(freshInserter); ok && fresh {
		return fi.InsertFresh(ctx, events)
	}
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

// toSpool appends batch to the spool and returns the events the spool had
// no room for (the caller writes or drops them, and counts them off the
// queue); any other event it could not spool is dropped here. The events
// spooled or dropped here leave the queue's count (the spool's add takes
// off those it appends).
func (w *Writer) toSpool(batch []Event, maybeStored bool) []Event {
	added, next, err := w.spool.add(batch, maybeStored)
	if err == nil {
		return nil
	}
	w.spoolError(err)
	var rest []Event
	if errors.Is(err, errSpoolFull) {
		rest = batch[next:]
	}
	dropped := len(batch) - added - len(rest)
	w.drop(dropped, "spool")
	w.queued.Add(-int64(dropped))
	return rest
}

// tick runs every FlushInterval: writes in flight for secureAfter secured,
// group fsync of the spool, and replay when events wait there, or, while
// the store is down, a probe every RetryInterval.
func (w *Writer) tick() {
	if w.spool == nil {
		return
	}
	if len(w.inflight) > 0 && time.Since(w.inflight[0].started) >= w.secureAfter() {
		w.secure()
	}
	switch wrote, err := w.spool.sync(); {
	case err != nil:
		w.logger.Error("audit spool fsync failed", "err", err)
		if diskFull(err) {
			w.setFull(fullDisk, true)
		}
	case wrote && w.diskFullNow():
		// Records reached the disk again: it has room.
		w.setFull(fullDisk, false)
	}
	if !w.up.Load() {
		// A ping on the side, never a write on this goroutine: a store that
		// does not answer would hold the loop for InsertTimeout per probe,
		// with new events waiting unspooled and the spool unsynced.
		if w.probe != nil || w.cfg.Now().Sub(w.lastProbe) < w.cfg.RetryInterval {
			return
		}
		w.lastProbe = w.cfg.Now()
		probe := make(chan error, 1)
		w.probe = probe
		go func() {
			ctx, cancel := context.WithTimeout(w.ctx, w.cfg.InsertTimeout)
			defer cancel()
			probe <- w.store.Ping(ctx)
		}()
		return
	}
	if pending, _ := w.spool.stats(); pending > 0 {
		// Replay for about one interval, then let the loop drain the queue.
		w.replay(w.cfg.Now().Add(w.cfg.FlushInterval), false)
	}
}

// probed takes a probe's answer: the store answers again, so the spool's
// replay (whose success reports the store up) is tried, or, with nothing
// to replay, the store is reported up at once.
func (w *Writer) probed(err error) {
	w.probe = nil
	if err != nil {
		w.lastDownProbe = w.lastProbe // when this probe was sent
		return
	}
	if w.up.Load() {
		return
	}
	w.lastProbe = w.cfg.Now()
	if pending, _ := w.spool.stats(); pending == 0 {
		w.markUp()
		return
	}
	w.replay(w.cfg.Now().Add(w.cfg.FlushInterval), false)
}

// replay writes spooled events to the store until the spool is empty, the
// store fails, or the deadline passes. Up to MaxInFlight batches are
// written at once (the next one read and decoded meanwhile), and records
// leave the spool strictly in order: a batch is committed only after every
// batch before it. Writes of new events in flight finish first, so one
// that fails is spooled before the replay reads.
//
// A write that has been in flight for secureAfter is not waited for,
// unless patient (Close, which replays for as long as the store takes
// writes): the store hangs, or is slow, while it may well answer pings (a
// locked table, a synchronous standby gone), and waiting until
// InsertTimeout would hold the events recorded meanwhile in memory only,
// again after each probe. The replay's writes still in flight become
// secured writes, as in secure: their records are in the spool already,
// and settle applies their results in turn.
func (w *Writer) replay(deadline time.Time, patient bool) {
	w.drain()
	if len(w.secured) > 0 {
		// Writes that were secured have not answered yet: the store is
		// hanging, or just slow, and a replay's write would wait on the
		// loop's goroutine. Their results tell first.
		return
	}
	type job struct {
		b spoolBatch
		f *inflight
	}
	var jobs []job
	off := w.spool.front()
	reading, failed := true, false
	launched := 0
	for {
		for reading && !failed && len(jobs) < w.cfg.MaxInFlight &&
			(launched == 0 || !w.cfg.Now().After(deadline)) {
			b, err := w.spool.readAt(off, w.cfg.BatchSize)
			if err != nil {
				w.logger.Error("audit spool read failed", "err", err)
				reading = false
				break
			}
			if b.records == 0 {
				reading = false
				break
			}
			j := job{b: b, f: &inflight{batch: b.events, done: make(chan writeResult, 1), started: time.Now(),
				spoolFrom: off, spoolTo: b.next, records: b.records, replayed: true}}
			off = b.next
			if len(b.events) > 0 {
				w.writes++
				j.f.seq = w.writes
				go func() { j.f.done <- w.write(b.events, b.fresh) }()
			} else {
				j.f.done <- writeResult{} // only undecodable records: nothing to write, just commit
			}
			jobs = append(jobs, j)
			launched++
		}
		if len(jobs) == 0 {
			return
		}
		j := jobs[0]
		if !patient && !w.wait(j.f) {
			// Every batch read so far may be in the store by the time
			// their writes end.
			w.spool.maybeStored(off)
			for _, j := range jobs {
				j.f.epoch = w.upEpoch
				w.secured = append(w.secured, j.f)
			}
			w.logger.Warn("audit store slow: spool replay left to finish on the side", "batches", len(jobs),
				"in_flight_for", time.Since(j.f.started).Round(time.Millisecond).String())
			return
		}
		jobs = jobs[1:]
		r := j.f.result()
		if failed {
			// An earlier batch failed, so this one stays spooled even if it
			// was written; it is counted when replayed again.
			continue
		}
		if r.err != nil {
			failed = true
			// Every batch read so far may be in the store now.
			w.spool.maybeStored(off)
			if w.ctx.Err() == nil { // not just cut short by Close's deadline
				w.markDown(r.err)
			}
			continue
		}
		if len(j.b.events) > 0 {
			w.applied(r)
		}
		pending, err := w.spool.commit(j.b.next, j.b.records)
		if err != nil {
			failed = true
			w.spool.maybeStored(off)
			w.logger.Error("audit spool truncate failed", "err", err)
			continue
		}
		if pending == 0 {
			w.logger.Info("audit spool replayed")
			w.setFull(fullAll, false)
		}
	}
}

// take moves every event queued now into batch, flushing each batch that
// fills, and returns the batch that did not.
func (w *Writer) take(batch []Event) []Event {
	for {
		select {
		case e := <-w.q:
			batch = append(batch, e)
			if len(batch) >= w.cfg.BatchSize {
				w.flush(batch)
				batch = w.newBatch()
			}
		default:
			return batch
		}
	}
}

// finish runs on Close: drain the queue, write it, replay the spool while
// the store answers and Close's deadline allows, and close the spool.
func (w *Writer) finish(batch []Event) {
	batch = w.take(batch)
	if len(batch) > 0 {
		w.flush(batch)
	}
	w.drain()
	for len(w.secured) > 0 {
		// Bounded by InsertTimeout, or Close's deadline (w.ctx).
		w.settle(w.secured[0].result())
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
		w.replay(w.cfg.Now().Add(w.cfg.FlushInterval), true)
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
