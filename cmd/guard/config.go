package main

import (
	"context"
	"errors"

	"github.com/guardhq/guard/internal/config"
)

func runConfig(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config check", "[--config FILE] [--strict]", config.CheckHelp)
	path := fs.String("config", "", "config file (default: GUARD_CONFIG; none: built-in defaults)")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	if len(args) == 0 || args[0] != "check" {
		if err := parseFlags(e, fs, args); err != nil {
			return err
		}
		return errors.New(`config: want "guard config check" (see guard config --help)`)
	}
	if err := parseFlags(e, fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return errors.New("config check: unexpected argument " + fs.Arg(0) + " (the file goes after --config)")
	}
	_, res := config.Check(*path, e.env)
	res.Print(e.stdout, *strict)
	return res.Err(*strict)
}
