package main

import (
	"context"
	"fmt"

	"github.com/guardhq/guard/internal/backtest"
)

func runBacktest(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "backtest", "--config CANDIDATE [flags]", backtest.Help)
	o := backtest.Options{Env: e.env}
	o.Flags(fs)
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("backtest: unexpected argument %q", fs.Arg(0))
	}
	if err := backtest.Execute(ctx, o, e.stdout, e.stderr); err != nil {
		return fmt.Errorf("backtest: %w", err)
	}
	return nil
}
