package main

import (
	"context"
	"fmt"
	"time"

	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/backtest"
)

const backtestHelp = `
Replays the audit trail's recorded checks and reports, oldest first,
through the candidate config's policy on an in-memory limiter whose clock is
the events' own times, and prints per action: events replayed, decisions
that change (allow->deny, deny->allow, ...), lockouts started before and
after, and the most affected users, IPs and devices. It reads Postgres
(--database-url, else GUARD_DATABASE_URL, else the candidate's database_url)
over a read-only connection and never touches Redis. --since and --until
take RFC 3339 times, dates or durations ago (24h, 7d).

Limits: callers react to answers (a denied attacker's next moves are not in
the trail), a check's cost is not recorded (replayed as 1), and a
pseudonymized trail cannot match CIDR lists. See docs/operations.md.`

func runBacktest(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "backtest", "--config CANDIDATE [flags]", backtestHelp)
	o := backtest.Options{Env: e.env}
	fs.StringVar(&o.ConfigPath, "config", "", "candidate config file (default: GUARD_CONFIG)")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "audit database (default: GUARD_DATABASE_URL, else the candidate's database_url)")
	since := fs.String("since", "24h", "replay events at or after this time")
	until := fs.String("until", "", "replay events before this time (default: now)")
	fs.StringVar(&o.Action, "action", "", "replay only this action")
	fs.StringVar(&o.Format, "format", "table", "output: table or json")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	now, err := time.Now(), error(nil)
	if o.Since, err = api.ParseTime(*since, now); err != nil {
		return fmt.Errorf("backtest: --since: %w", err)
	}
	if o.Until = now; *until != "" {
		if o.Until, err = api.ParseTime(*until, now); err != nil {
			return fmt.Errorf("backtest: --until: %w", err)
		}
	}
	return backtest.Execute(ctx, o, e.stdout, e.stderr)
}
