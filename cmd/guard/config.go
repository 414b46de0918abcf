package main

import (
	"context"
	"fmt"

	"github.com/guardhq/guard/internal/config"
)

const configHelp = `
Validates a config file exactly as serve would (the file of --config or
GUARD_CONFIG, then the GUARD_* environment) and prints every problem as
FILE:LINE: message; exits 1 when there is any. It also prints warnings
where the policy departs from published guidance (NIST SP 800-63B, OWASP),
each citing its source; warnings do not fail the check (exit 0) unless
--strict is given. serve logs the same warnings at start and on reload.`

func runConfig(_ context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "config check", "[--config FILE] [--strict]", configHelp)
	path := fs.String("config", "", "config file (default: GUARD_CONFIG; none: built-in defaults)")
	strict := fs.Bool("strict", false, "exit 1 on warnings too")
	if len(args) > 0 && args[0] == "check" {
		args = args[1:]
	} else if err := parseFlags(e, fs, args); err != nil {
		return err
	} else {
		return fmt.Errorf("config: want \"guard config check\" (see guard config --help)")
	}
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("config check: unexpected argument %q", fs.Arg(0))
	}
	cfg, res := config.Check(*path, e.env)
	if cfg != nil {
		if _, err := ensureKeySecret(cfg); err != nil {
			res.Problems = append(res.Problems, fmt.Errorf("%s: %w", res.Name, err))
		}
	}
	res.Print(e.stdout, e.stderr)
	return res.Err(*strict)
}
