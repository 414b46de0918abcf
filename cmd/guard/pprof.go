//go:build pprof

package main

// Profiling builds only (go build -tags pprof ./cmd/guard): with
// GUARD_PPROF_ADDR set (e.g. 127.0.0.1:6060) the process serves
// net/http/pprof there, on its own listener, apart from the API. Release
// builds carry none of this (docs/performance.md, "Profiling").

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
