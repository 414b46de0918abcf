package backtest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-isatty"

	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
)

// Help is `guard backtest --help`'s description.
const Help = `
Replays the audit trail's recorded checks and reports, oldest first,
through the candidate config's policy on an in-memory limiter whose clock is
the events' own times, and prints per action: events replayed, decisions
that change (allow->deny, deny->allow, ...), lockouts started before and
after, and the most affected users, IPs and devices. It reads Postgres
(--database-url, else GUARD_DATABASE_URL, else the candidate's database_url)
over a read-only connection and never touches Redis. --since and --until
take RFC 3339 times, dates or durations ago (24h, 7d).

Limits: callers react to answers (a denied attacker's next moves are not in
the trail), a check's cost is not recorded (replayed as 1), a
pseudonymized trail cannot match CIDR lists, and the replay starts empty at
--since (lockouts and windows begun before it are not known). See
docs/operations.md.`

// Flags binds o to the command's flags on fs; Execute resolves --since
// and --until.
func (o *Options) Flags(fs *flag.FlagSet) {
	fs.StringVar(&o.ConfigPath, "config", "", "candidate config file (default: GUARD_CONFIG)")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "audit database (default: GUARD_DATABASE_URL, else the candidate's database_url)")
	fs.StringVar(&o.SinceArg, "since", "24h", "replay events at or after this time")
	fs.StringVar(&o.UntilArg, "until", "", "replay events before this time (default: now)")
	fs.StringVar(&o.Action, "action", "", "report only this action (every action's events still replay: they share lockouts and trusted devices)")
	fs.StringVar(&o.Format, "format", "table", "output: table or json")
}

// Options are `guard backtest`'s flags.
type Options struct {
	// ConfigPath is the candidate config ("" reads GUARD_CONFIG).
	ConfigPath string
	// Env is the environment (GUARD_DATABASE_URL overrides the
	// candidate's database_url, as for serve).
	Env config.Env
	// DatabaseURL, when set, wins over both.
	DatabaseURL string
	// Since (inclusive) and Until (exclusive) bound the replayed events;
	// when zero they come from SinceArg and UntilArg (api.ParseTime: RFC
	// 3339, a date, or a duration ago; UntilArg "" is now).
	Since, Until       time.Time
	SinceArg, UntilArg string
	// Action, when set, limits the report to one action (every action's
	// events still replay).
	Action string
	// Format is "table" (default) or "json".
	Format string
}

// Execute runs a backtest: it loads the candidate exactly as serve would
// (refusing it with every problem when invalid), replays the trail of its
// database read-only and writes the report to stdout; a progress bar goes
// to stderr when stderr is a terminal.
func Execute(ctx context.Context, o Options, stdout, stderr io.Writer) error {
	now := time.Now()
	var err error
	if o.Since.IsZero() {
		if o.Since, err = api.ParseTime(o.SinceArg, now); err != nil {
			return fmt.Errorf("--since: %w", err)
		}
	}
	if o.Until.IsZero() {
		o.Until = now
		if o.UntilArg != "" {
			if o.Until, err = api.ParseTime(o.UntilArg, now); err != nil {
				return fmt.Errorf("--until: %w", err)
			}
		}
	}
	switch o.Format {
	case "", "table", "json":
	default:
		return fmt.Errorf("unknown --format %q: want table or json", o.Format)
	}
	if !o.Since.Before(o.Until) {
		return fmt.Errorf("--since %s is not before --until %s", o.Since.Format(time.RFC3339), o.Until.Format(time.RFC3339))
	}
	if o.ConfigPath == "" && o.Env.Get(config.EnvConfig) == "" {
		return errors.New("a candidate config is required: --config FILE (or GUARD_CONFIG)")
	}
	cfg, err := config.Load(o.ConfigPath, o.Env)
	if err != nil {
		return fmt.Errorf("candidate config:\n%w", err)
	}
	if _, ok := cfg.Guard.Policy.Actions[o.Action]; o.Action != "" && !ok {
		names := slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions))
		return fmt.Errorf("--action %q: the candidate has no such action (it has %s)", o.Action, strings.Join(names, ", "))
	}
	url := o.DatabaseURL
	if url == "" {
		url = cfg.DatabaseURL
	}
	if url == "" {
		return errors.New("no audit database: give --database-url, GUARD_DATABASE_URL or the candidate's database_url")
	}
	src, err := audit.OpenReplay(ctx, url)
	if err != nil {
		return err
	}
	defer src.Close()
	// --action limits the report; every action's events replay (they
	// share ledgers, rule names and trusted devices).
	f := audit.ReplayFilter{Since: o.Since, Until: o.Until}
	var progress func(int64)
	var pb *bar
	if file, ok := stderr.(*os.File); ok && isatty.IsTerminal(file.Fd()) {
		total, err := src.Count(ctx, f)
		if err != nil {
			return err
		}
		pb = newBar(stderr, total)
		progress = pb.update
	}
	// Every action the run covers is reported, also one without events.
	actions := []string{o.Action}
	if o.Action == "" {
		actions = slices.Sorted(maps.Keys(cfg.Guard.Policy.Actions))
	}
	rep, err := Run(ctx, src, f, Config{Guard: cfg.Guard, Actions: actions, Only: o.Action}, progress)
	if pb != nil {
		// Finished before the report (or the error) goes to the same
		// terminal.
		pb.done()
	}
	if err != nil {
		return err
	}
	if o.Format == "json" {
		return rep.WriteJSON(stdout)
	}
	return rep.WriteTable(stdout)
}

// bar is a one-line progress bar for a terminal.
type bar struct {
	w     io.Writer
	total int64
	n     int64
	start time.Time
	shown time.Time
}

func newBar(w io.Writer, total int64) *bar {
	now := time.Now()
	return &bar{w: w, total: max(total, 1), start: now}
}

func (b *bar) update(n int64) {
	b.n = n
	if n%1024 != 0 {
		return
	}
	if now := time.Now(); now.Sub(b.shown) >= 100*time.Millisecond {
		b.shown = now
		b.draw(now)
	}
}

func (b *bar) draw(now time.Time) {
	const width = 30
	filled := int(min(b.n, b.total) * width / b.total)
	rate := float64(b.n) / max(now.Sub(b.start).Seconds(), 1e-3)
	fmt.Fprintf(b.w, "\r[%-*s] %d/%d events %3d%% %8.0f/s", width,
		string(repeat('#', filled)), b.n, b.total, min(b.n, b.total)*100/b.total, rate)
}

func (b *bar) done() {
	b.draw(time.Now())
	fmt.Fprintln(b.w)
}

func repeat(c byte, n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = c
	}
	return out
}
