package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/guardhq/guard/sdk"
)

// Defaults of ExportConfig.
const (
	defaultMaxExports         = 4
	defaultExportWriteTimeout = 30 * time.Second
)

var errTooManyExports = &Error{Status: http.StatusServiceUnavailable, Code: sdk.CodeUnavailable,
	Message: "too many audit exports are running; retry later"}

// exportLimits bounds the exports running at once.
type exportLimits struct {
	slots        chan struct{}
	writeTimeout time.Duration
	// lastRefusal is when a refused export was last logged (Unix ns),
	// shared by the copies of one State: refusals are logged at most
	// once a minute, so a client retrying in a loop cannot flood the log.
	lastRefusal *atomic.Int64
}

// refusalLogEvery is how often refused exports are logged at most.
const refusalLogEvery = time.Minute

// logRefusal reports whether a refused export at now is to be logged.
func (l exportLimits) logRefusal(now time.Time) bool {
	last := l.lastRefusal.Load()
	return now.UnixNano()-last >= int64(refusalLogEvery) && l.lastRefusal.CompareAndSwap(last, now.UnixNano())
}

func newExportLimits(cfg ExportConfig) exportLimits {
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = defaultMaxExports
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = defaultExportWriteTimeout
	}
	return exportLimits{slots: make(chan struct{}, cfg.MaxConcurrent), writeTimeout: cfg.WriteTimeout, lastRefusal: new(atomic.Int64)}
}

// acquire takes an export slot without waiting; release gives it back.
func (l exportLimits) acquire() (release func(), ok bool) {
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, true
	default:
		return nil, false
	}
}

// exportContext is the request's context, also cancelled when the server
// begins to stop (Deps.Stopping); then out refuses further writes and a
// write blocked on a client that does not read is cut short at once.
func (s *server) exportContext(parent context.Context, out *deadlineWriter) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	if s.deps.Stopping != nil {
		stopping := s.deps.Stopping
		go func() {
			select {
			case <-stopping:
				out.stop()
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}

// errExportStopped ends an export when the server begins to stop.
var errExportStopped = errors.New("audit export stopped: the server is shutting down")

// deadlineWriter moves the connection's write deadline forward before
// every write, so an export may run as long as its client keeps reading,
// and a client that stops reading is cut off timeout after its last
// progress (the blocked write fails). Exports are the only answers that
// may outlast the server's WriteTimeout.
type deadlineWriter struct {
	w          io.Writer
	rc         *http.ResponseController
	timeout    time.Duration
	stopped    atomic.Bool
	unsettable bool // the ResponseWriter cannot set deadlines (a test recorder)
}

// newDeadlineWriter sets the first deadline at once (the server's
// WriteTimeout, set when the request arrived, may be shorter than the
// export's first page takes).
func newDeadlineWriter(w gin.ResponseWriter, timeout time.Duration) *deadlineWriter {
	d := &deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
	d.unsettable = errors.Is(d.rc.SetWriteDeadline(time.Now().Add(timeout)), http.ErrNotSupported)
	return d
}

func (d *deadlineWriter) Write(p []byte) (int, error) {
	if d.stopped.Load() {
		return 0, errExportStopped
	}
	if !d.unsettable {
		_ = d.rc.SetWriteDeadline(time.Now().Add(d.timeout))
	}
	return d.w.Write(p)
}

// stop makes every further write fail and the one in progress, if blocked
// on the client, fail now. It may run beside Write.
func (d *deadlineWriter) stop() {
	d.stopped.Store(true)
	if !d.unsettable {
		_ = d.rc.SetWriteDeadline(time.Now())
	}
}
