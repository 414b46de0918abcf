// Package profiling serves net/http/pprof on GUARD_PPROF_ADDR (for
// example 127.0.0.1:6060), on a listener of its own, apart from the API.
// Only profiling builds import it (go build -tags pprof ./cmd/guard, see
// cmd/guard/pprof.go); release builds carry none of it
// (docs/performance.md, "Profiling").
package profiling

import (
	"log/slog"
	"net/http"
	_ "net/http/pprof" // registers /debug/pprof on http.DefaultServeMux
	"os"
)

func init() {
	addr := os.Getenv("GUARD_PPROF_ADDR")
	if addr == "" {
		return
	}
	go func() {
		if err := http.ListenAndServe(addr, nil); err != nil {
			slog.Error("pprof listener", "addr", addr, "err", err)
		}
	}()
}
