package config

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger builds the process logger on w (serve's stderr) from the
// log settings (--log-format / GUARD_LOG_FORMAT: text or json,
// --log-level / GUARD_LOG_LEVEL: debug, info, warn or error).
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %s: want debug, info, warn or error", quote(level))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("log format %s: want text or json", quote(format))
	}
}
