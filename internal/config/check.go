package config

import (
	"fmt"
	"io"
)

// CheckHelp is `guard config check --help`'s description.
const CheckHelp = `
Validates a config file exactly as serve would (the file of --config or
GUARD_CONFIG, then the GUARD_* environment) and prints every problem as
FILE:LINE: message; exits 1 when there is any. It also prints warnings
where the policy departs from published guidance (NIST SP 800-63B, OWASP),
each citing its source (serve logs those at start and on reload), and
where a spool directory serve creates at start could not be created on
this machine (serve would not start here; a CI job checking a production
config need not have its directories). Warnings do not fail the check
(exit 0) unless --strict is given.`

// Reread loads the file c was loaded from again, with the same
// environment and serve's --listen override (listen, "" for none): what a
// reload (SIGHUP) reads. A file serve would refuse at start is refused
// here too, serve's key secret rule included (keySecretProblem), although
// a reload keeps the running secret either way.
func (c *Config) Reread(listen string) (*Config, error) {
	n, err := Load(c.File, c.Env)
	if err == nil && listen != "" {
		err = n.SetListen(listen)
	}
	if err == nil {
		err = n.keySecretProblem()
	}
	return n, err
}

// keySecretProblem is serve's key secret rule (EnsureKeySecret: a Redis
// needs a key_secret) as a problem at the place the Redis was configured,
// or nil; it makes no secret up.
func (c *Config) keySecretProblem() error {
	if len(c.Guard.KeySecret) != 0 || !c.Redis.Enabled() {
		return nil
	}
	where := c.redisWhere
	if where.File == "" {
		where.File = c.File
		if where.File == "" {
			where.File = "(defaults)"
		}
	}
	where.Msg = ErrKeySecretRequired.Error()
	return &where
}

// CheckResult is what `guard config check` found in a config: the problems
// that make serve refuse it and the warnings it would log.
type CheckResult struct {
	// Name is the file checked, or "(defaults)" without one.
	Name string
	// Problems are each "FILE:LINE: message" (Error), or an environment
	// variable's or the file's own problem without a line.
	Problems []error
	// Warnings are Config.Warnings (accepted, but against guidance), then
	// the spool directories this machine could not give serve.
	Warnings []Warning
	// Actions is the number of actions of a valid config.
	Actions int
}

// Check loads the config exactly as serve does (Load: the file of path or
// GUARD_CONFIG, then the environment) and reports every problem and
// warning, serve's key secret rule (EnsureKeySecret) included, and warns
// of a spool directory serve could not create on this machine (checked
// without creating anything). cfg is nil when there are problems.
func Check(path string, env Env) (*Config, CheckResult) {
	if path == "" {
		path = env.Get(EnvConfig)
	}
	res := CheckResult{Name: path}
	if path == "" {
		res.Name = "(defaults)"
	}
	cfg, err := Load(path, env)
	if err != nil {
		res.Problems = append(unjoin(err), LogProblems(env)...)
		return nil, res
	}
	// serve's own rules, on the same config and environment.
	if err := cfg.keySecretProblem(); err != nil {
		res.Problems = append(res.Problems, err)
	}
	res.Problems = append(res.Problems, LogProblems(env)...)
	if len(res.Problems) > 0 {
		return nil, res
	}
	res.Warnings = append([]Warning(nil), cfg.Warnings...)
	// serve creates its spools at start: one it cannot create stops it.
	// That is a fact of this machine, not of the file (a check in CI of a
	// production config runs where /var/lib/guard need not exist), so it
	// is a warning, which --strict turns into a failure.
	for _, err := range cfg.spoolProblems() {
		e, ok := err.(*Error)
		if !ok {
			e = &Error{File: res.Name, Msg: err.Error()}
		}
		where := e.File
		if e.Line > 0 {
			where = fmt.Sprintf("%s:%d", e.File, e.Line)
		}
		res.Warnings = append(res.Warnings, Warning{Where: where, Msg: e.Msg + spoolWarningNote})
	}
	res.Actions = len(cfg.Guard.Policy.Actions)
	return cfg, res
}

// LogProblems are the log settings of the environment that serve would
// refuse (GUARD_LOG_FORMAT, GUARD_LOG_LEVEL: NewLogger), each an *Error
// under its variable's name; serve's --log-format and --log-level win
// over them.
func LogProblems(env Env) []error {
	var ps []error
	if v := env.Get(EnvLogFormat); v != "" {
		if _, err := NewLogger(io.Discard, v, "info"); err != nil {
			ps = append(ps, &Error{File: EnvLogFormat, Msg: err.Error()})
		}
	}
	if v := env.Get(EnvLogLevel); v != "" {
		if _, err := NewLogger(io.Discard, "text", v); err != nil {
			ps = append(ps, &Error{File: EnvLogLevel, Msg: err.Error()})
		}
	}
	return ps
}

// spoolWarningNote ends a spool directory's warning.
const spoolWarningNote = "; serve would not start on this machine"

// Print writes the problems and warnings to out, one a line, then a
// one-line verdict for a valid config: "ok", or, with strict and warnings,
// that it fails under --strict (Err's verdict). Like a linter's findings they are
// the command's output (stdout); the exit status and Err's one line (on
// stderr) say whether the file is one Guard starts on (a spool directory
// this machine lacks is a warning: --strict fails on it).
func (r CheckResult) Print(out io.Writer, strict bool) {
	for _, p := range r.Problems {
		fmt.Fprintln(out, p)
	}
	for _, w := range r.Warnings {
		fmt.Fprintf(out, "%s: warning: %s\n", w.Where, w.Msg)
	}
	if len(r.Problems) == 0 {
		verdict := "ok"
		if strict && len(r.Warnings) > 0 {
			verdict = "fails under --strict"
		}
		fmt.Fprintf(out, "%s: %s (%s, %s)\n", r.Name, verdict, plural(r.Actions, "action"), plural(len(r.Warnings), "warning"))
	}
}

// Err is the check's verdict: an error when there are problems, or, with
// strict, warnings.
func (r CheckResult) Err(strict bool) error {
	switch {
	case len(r.Problems) > 0:
		return fmt.Errorf("config check: %s: %s; Guard would not start", r.Name, plural(len(r.Problems), "problem"))
	case strict && len(r.Warnings) > 0:
		return fmt.Errorf("config check: %s: %s (--strict)", r.Name, plural(len(r.Warnings), "warning"))
	}
	return nil
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
