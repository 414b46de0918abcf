package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
)

// env is what a command may touch of the outside world; run receives it
// from main so tests can drive every command in-process.
type env struct {
	env    config.Env
	stdout io.Writer
	stderr io.Writer
}

// command is one subcommand of guard.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, e *env, args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the Guard HTTP service", runServe},
		{"config", "check a config file: every problem with its line, and warnings (config check)", runConfig},
		{"migrate", "apply or revert the audit database schema (up, down, version)", runMigrate},
		{"audit", "search or export the audit trail of a running Guard", runAudit},
		{"backtest", "replay the audit trail through a candidate config and show what changes", runBacktest},
		{"bench", "measure decisions/s on Redis: Guard.Check in process and the HTTP API", runBench},
		{"health", "ask a running Guard whether it is alive or ready (for container health checks)", runHealth},
		{"redis", "delete the Redis function libraries of other Guard versions (redis prune)", runRedis},
		{"version", "print guard's version (also --version)", nil},
		{"help", "describe guard or one command", nil},
	}
}

// subcommands are the words a command takes before its flags, which
// "guard help CMD SUB" accepts after CMD.
var subcommands = map[string][]string{
	"config":  {"check"},
	"migrate": {audit.MigrateUp, audit.MigrateDown, audit.MigrateVersion},
	"redis":   {"prune"},
}

const usageHead = `guard — login/OTP abuse protection: strict sliding-window limits in Redis,
escalating lockouts, an audit trail in Postgres, fail-open with alerts.

Usage:
  guard <command> [flags]

Commands:
`

const usageTail = `
Run "guard <command> --help" for a command's flags. Configuration comes from a
YAML file (--config or GUARD_CONFIG) and the environment (GUARD_LISTEN,
GUARD_REDIS_URL, GUARD_DATABASE_URL, GUARD_KEY_SECRET); see docs/configuration.md.
`

func printUsage(w io.Writer) {
	fmt.Fprint(w, usageHead)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprint(w, usageTail)
}

// run is guard's whole program: args as os.Args (args[0] the program name),
// the environment through getenv, output to stdout and stderr. It returns
// when the command is done or, for serve, when ctx is cancelled and the
// server has shut down.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	e := &env{env: config.ReadEnv(getenv), stdout: stdout, stderr: stderr}
	if len(args) < 2 {
		printUsage(stderr)
		return errors.New("no command given")
	}
	name, rest := args[1], args[2:]
	switch name {
	case "-version", "--version", "version":
		if len(rest) > 0 && (rest[0] == "-h" || rest[0] == "-help" || rest[0] == "--help") {
			fmt.Fprint(stdout, "Usage: guard version\n\nPrints guard's version, the commit it was built from and its Go toolchain\n(also guard --version).\n")
			return nil
		}
		if len(rest) > 0 {
			fmt.Fprint(stderr, "Usage: guard version\n")
			return fmt.Errorf("version: unexpected argument %q (it takes none)", rest[0])
		}
		fmt.Fprintln(stdout, versionLine())
		return nil
	case "-h", "-help", "--help", "help":
		// One command, or a command and one of its subcommands
		// ("guard help config check").
		topic := rest[:min(len(rest), 1)]
		if len(rest) > 1 && slices.Contains(subcommands[rest[0]], rest[1]) {
			topic = rest[:2]
		}
		if len(rest) > len(topic) {
			return fmt.Errorf("help: unexpected argument %q (give one command)", rest[len(topic)])
		}
		// "guard help --help" is guard's own help: handing it on would
		// ask for "--help --help", and so on until the stack overflowed.
		if len(topic) > 0 && !slices.Contains([]string{"help", "-h", "-help", "--help"}, topic[0]) {
			return run(ctx, append(append([]string{args[0]}, topic...), "--help"), getenv, stdout, stderr)
		}
		printUsage(stdout)
		return nil
	}
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			err := c.run(ctx, e, rest)
			if errors.Is(err, flag.ErrHelp) {
				return nil
			}
			return err
		}
	}
	printUsage(stderr)
	return fmt.Errorf("unknown command %q", name)
}

// newFlagSet makes a command's flag set: errors are returned (never exit),
// --help goes to stdout, mistakes to stderr.
func newFlagSet(e *env, name, usage, description string) *flag.FlagSet {
	fs := flag.NewFlagSet("guard "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: guard %s %s\n\n%s\n", name, usage, strings.TrimSpace(description))
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprint(w, "\nFlags:\n")
			fs.PrintDefaults()
		}
	}
	return fs
}

// parseFlags parses args; --help prints the usage to stdout and returns
// flag.ErrHelp, which run turns into success.
func parseFlags(e *env, fs *flag.FlagSet, args []string) error {
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fs.SetOutput(e.stdout)
			fs.Usage()
			return flag.ErrHelp
		}
	}
	if err := fs.Parse(args); err != nil {
		// main prints "guard: " before every error.
		return fmt.Errorf("%s: %w", strings.TrimPrefix(fs.Name(), "guard "), err)
	}
	return nil
}

// sdkError is an error of the Go SDK under the command's name. The SDK's
// errors start with "guard: " for its callers' logs; main prints that
// prefix before every error already.
type sdkError struct {
	command string
	err     error
}

func (e *sdkError) Error() string {
	return e.command + ": " + strings.TrimPrefix(e.err.Error(), "guard: ")
}

func (e *sdkError) Unwrap() error { return e.err }

// wrapSDK puts err, if any, under command (sdkError).
func wrapSDK(command string, err error) error {
	if err == nil {
		return nil
	}
	return &sdkError{command: command, err: err}
}

// minTimeout is the least --timeout (health, redis prune) and bench
// --duration accepted: zero, negative or nanosecond values only fail later
// with "context deadline exceeded".
const minTimeout = time.Millisecond

// durationFlagAtLeast refuses a duration flag's value below least, naming
// the command and the flag.
func durationFlagAtLeast(command, name string, d, least time.Duration) error {
	if d < least {
		return fmt.Errorf("%s: --%s %s: must be at least %s", command, name, d, least)
	}
	return nil
}

// guardURL picks a client command's Guard base URL: flagValue (--url),
// else GUARD_URL, else fallback. One given without http:// or https:// (an
// address, as GUARD_LISTEN takes it) is refused, naming where it came
// from; net/url and the SDK would only say "first path segment in URL
// cannot contain colon" or "invalid base URL". The value is not repeated:
// it may hold a password.
func guardURL(command, flagValue string, e *env, fallback string) (string, error) {
	raw, source := flagValue, "--url"
	if raw == "" {
		raw, source = e.env.Get(config.EnvURL), config.EnvURL
	}
	if raw == "" {
		return fallback, nil
	}
	if u, err := url.Parse(raw); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%s: %s: want an http:// or https:// URL such as http://%s", command, source, config.DefaultListen)
	}
	return raw, nil
}
