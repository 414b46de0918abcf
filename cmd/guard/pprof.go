//go:build pprof

package main

// Profiling builds only: go build -tags pprof ./cmd/guard.
import _ "github.com/guardhq/guard/internal/profiling"
