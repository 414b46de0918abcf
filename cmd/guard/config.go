package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/guardhq/guard/internal/config"
)

func runConfig(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config check", "[--config FILE] [--strict]", config.CheckHelp)
	path := fs.String("config", "", "config file (default: GUARD_CONFIG; none: built-in defaults)")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	// Flags may come before "check" too, as with migrate and redis.
	rest := fs.Args()
	if len(rest) == 0 {
		return errors.New(`config: want "guard config check" (see guard config --help)`)
	}
	if rest[0] != "check" {
		return fmt.Errorf("config: unknown subcommand %q (want check)", rest[0])
	}
	if err := fs.Parse(rest[1:]); err != nil {
		return fmt.Errorf("config check: %w", err)
	}
	if fs.NArg() > 0 {
		return errors.New("config check: unexpected argument " + fs.Arg(0) + " (the file goes after --config)")
	}
	_, res := config.Check(*path, e.env)
	res.Print(e.stdout, *strict)
	return res.Err(*strict)
}
