package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// Notifier spools and delivers notifications. Its methods are safe for
// concurrent use; Notify never blocks.
type Notifier struct {
	log    *slog.Logger
	cfg    Config
	client *http.Client
	hooks  Hooks
	// settings are swapped whole by Update; every Notify and every
	// delivery attempt reads them once.
	settings atomic.Pointer[Settings]

	// inMu guards closed and sends on in: Notify takes it shared, so
	// decisions never wait for each other or for the deliverer's mu.
	inMu   sync.RWMutex
	closed bool
	in     chan *pending // Notify -> spooler
	wake   chan struct{} // new work or settings for the deliverer

	mu      sync.Mutex
	spool   *spool     // nil until a webhook URL is first set
	queue   []*pending // on disk, oldest first
	full    bool       // the spool was full at the last Notify (logged once)
	ctx     context.Context
	cancel  context.CancelFunc
	spooled chan struct{} // closed when the spooler has drained in
	done    chan struct{} // closed when the deliverer has returned
}

// New starts the spooler and the deliverer. With a webhook URL it opens the
// spool in cfg.SpoolDir and loads the notifications a previous run left
// there (they are attempted at once); without one it touches no disk
// until Update sets a URL. client may be nil: the default client follows
// no redirects. It fails for invalid settings (Settings.Validate) or a
// spool directory it cannot create or read.
func New(logger *slog.Logger, cfg Config, client *http.Client, hooks Hooks) (*Notifier, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("notify: %w", err)
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxAge <= 0 {
		cfg.MaxAge = DefaultMaxAge
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = DefaultQueueSize
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if client == nil {
		client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	n := &Notifier{
		log: logger, cfg: cfg, client: client, hooks: hooks,
		in: make(chan *pending, cfg.QueueSize), wake: make(chan struct{}, 1),
		spooled: make(chan struct{}), done: make(chan struct{}),
	}
	if cfg.WebhookURL != "" {
		if err := n.openSpoolLocked(); err != nil {
			return nil, err
		}
	}
	n.setSettings(cfg.Settings)
	n.ctx, n.cancel = context.WithCancel(context.Background())
	go n.runSpooler()
	go n.runDeliverer()
	return n, nil
}

// openSpoolLocked opens the spool, if not yet open, and queues what a
// previous run left in it; n.mu is held (or n not yet shared).
func (n *Notifier) openSpoolLocked() error {
	if n.spool != nil {
		return nil
	}
	sp, err := openSpool(n.cfg.SpoolDir)
	if err != nil {
		return err
	}
	loaded, bad := sp.load()
	for _, err := range bad {
		n.log.Error("unreadable notification set aside (renamed *.bad)", "err", err)
	}
	now := n.cfg.Now()
	for _, p := range loaded {
		p.due = now
	}
	if len(loaded) > 0 {
		n.log.Info("pending notifications from the spool", "count", len(loaded), "dir", n.cfg.SpoolDir)
	}
	n.spool = sp
	n.queue = append(n.queue, loaded...)
	n.pendingChanged(len(n.queue))
	return nil
}

func (n *Notifier) setSettings(s Settings) {
	if s.Timeout == 0 {
		s.Timeout = DefaultTimeout
	}
	s.Events = append([]string(nil), s.Events...)
	n.settings.Store(&s)
}

// Update swaps the settings (URL, secret, events, timeout) for every
// notification enqueued and every delivery attempt that starts after it,
// retries of earlier notifications included (they go to the new URL,
// signed with the new secret). Invalid settings are refused with the
// error of Settings.Validate, and a first URL with the error of opening
// the spool; either changes nothing.
func (n *Notifier) Update(s Settings) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("notify: %w", err)
	}
	if s.WebhookURL != "" {
		n.mu.Lock()
		err := n.openSpoolLocked()
		n.mu.Unlock()
		if err != nil {
			return err
		}
	}
	n.setSettings(s)
	n.poke()
	return nil
}

// Settings returns the settings in force.
func (n *Notifier) Settings() Settings {
	s := *n.settings.Load()
	s.Events = append([]string(nil), s.Events...)
	return s
}

// Wants reports whether the settings in force send event.
func (n *Notifier) Wants(event string) bool { return n.settings.Load().wants(event) }

// Notify enqueues e if the settings send its event; it never blocks. A
// notification that finds the queue or the spool full, or the notifier
// closed, is dropped, logged and counted.
func (n *Notifier) Notify(e Event) {
	if !n.settings.Load().wants(e.Event) {
		return
	}
	p := &pending{ev: e, enqueued: n.cfg.Now()}
	n.inMu.RLock()
	defer n.inMu.RUnlock()
	if n.closed {
		n.drop(p, "notifier closed")
		return
	}
	select {
	case n.in <- p:
	default:
		n.drop(p, "notification queue full")
	}
}

// drop counts a notification that was never spooled.
func (n *Notifier) drop(p *pending, why string) {
	n.log.Error("notification dropped: "+why, "id", p.ev.ID, "event", p.ev.Event)
	n.result(p.ev.Event, ResultDropped)
}

func (n *Notifier) result(event, result string) {
	if n.hooks.OnResult != nil {
		n.hooks.OnResult(event, result)
	}
}

func (n *Notifier) pendingChanged(count int) {
	if n.hooks.OnPending != nil {
		n.hooks.OnPending(count)
	}
}

// Pending returns the number of notifications on disk awaiting delivery.
func (n *Notifier) Pending() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.queue)
}

// poke wakes the deliverer.
func (n *Notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// maxBatch bounds the notifications the spooler writes in one batch.
const maxBatch = 256

// runSpooler writes enqueued notifications to disk, in batches of what has
// arrived meanwhile, and hands them to the deliverer, until Close closes
// in.
func (n *Notifier) runSpooler() {
	defer close(n.spooled)
	for p := range n.in {
		batch := []*pending{p}
	more:
		for len(batch) < maxBatch {
			select {
			case q, ok := <-n.in:
				if !ok {
					break more
				}
				batch = append(batch, q)
			default:
				break more
			}
		}
		n.spoolBatch(batch)
	}
}

// spoolBatch writes what fits in the spool and queues it for delivery.
func (n *Notifier) spoolBatch(batch []*pending) {
	n.mu.Lock()
	room, sp := n.cfg.MaxPending-len(n.queue), n.spool
	n.mu.Unlock()
	if room < 0 {
		room = 0
	}
	if len(batch) > room {
		for _, p := range batch[room:] {
			n.spoolFull(p)
		}
		batch = batch[:room]
	}
	if len(batch) == 0 {
		return
	}
	errs := make([]error, len(batch))
	if sp == nil {
		for i := range errs {
			errs[i] = errors.New("no spool open")
		}
	} else {
		errs = sp.writeBatch(batch)
	}
	now := n.cfg.Now()
	n.mu.Lock()
	for i, p := range batch {
		if errs[i] != nil {
			continue
		}
		p.due = now
		n.queue = append(n.queue, p)
	}
	count := len(n.queue)
	wasFull := n.full && count < n.cfg.MaxPending
	if wasFull {
		n.full = false
	}
	n.mu.Unlock()
	for i, p := range batch {
		if errs[i] != nil {
			n.log.Error("notification dropped: spool not writable", "id", p.ev.ID, "event", p.ev.Event, "dir", n.cfg.SpoolDir, "err", errs[i])
			n.result(p.ev.Event, ResultDropped)
		}
	}
	if wasFull {
		n.log.Info("notification spool has room again", "pending", count)
	}
	n.pendingChanged(count)
	n.poke()
}

// spoolFull drops p, logging the first drop of each episode at ERROR.
func (n *Notifier) spoolFull(p *pending) {
	n.mu.Lock()
	first := !n.full
	n.full = true
	n.mu.Unlock()
	if first {
		n.log.Error("NOTIFICATION SPOOL FULL: new notifications are dropped until the receiver takes the pending ones",
			"max_pending", n.cfg.MaxPending, "dir", n.cfg.SpoolDir)
	}
	n.log.Warn("notification dropped: spool full", "id", p.ev.ID, "event", p.ev.Event)
	n.result(p.ev.Event, ResultDropped)
}

// Close stops taking notifications, writes those already enqueued to the
// spool and stops delivering (an attempt in flight is cut off and stays
// pending). What is on disk is delivered by the next Notifier on the same
// directory. It returns ctx's error if the spooler or the deliverer does
// not finish in time. Close is idempotent.
func (n *Notifier) Close(ctx context.Context) error {
	n.inMu.Lock()
	if !n.closed {
		n.closed = true
		close(n.in)
	}
	n.inMu.Unlock()
	var errs []error
	select {
	case <-n.spooled:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("notify: spool not drained: %w", ctx.Err()))
	}
	n.cancel()
	select {
	case <-n.done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("notify: deliverer still running: %w", ctx.Err()))
	}
	return errors.Join(errs...)
}
