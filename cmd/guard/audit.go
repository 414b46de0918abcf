package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/guardhq/guard/internal/api"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/config"
	"github.com/guardhq/guard/sdk"
)

const auditHelp = `
Searches the audit trail of a running Guard through its API (GET /v1/audit;
the key needs the audit:read or admin scope). Filters combine with AND.
Events come newest first.

  table   one page as aligned columns (default; --limit rows, then a hint
          with the --cursor of the next page)
  json    one page as the API's JSON ({"events": [...], "next_cursor": ...})
  ndjson  every matching event, one JSON object per line (export; --limit
          is refused)
  csv     every matching event with a header row (export; --limit is
          refused)

--since and --until take RFC 3339 times (2026-01-02T15:04:05Z), dates
(2026-01-02, UTC) or a duration back from now (90m, 24h, 7d).

The server comes from --url, else GUARD_URL, else http://127.0.0.1:8080;
the key from --key, else GUARD_API_KEY (prefer the variable: command lines
are visible to other users of the machine).

Examples:
  guard audit --user alice@example.com --since 24h
  guard audit --ip 203.0.113.0/24 --decision deny --format csv > denials.csv`

// auditFlags are the filters and output options of `guard audit`.
type auditFlags struct {
	url, key                  string
	user, ip, device, action  string
	phone                     string
	decision, reason, kind    string
	since, until, cursor, fmt string
	limit                     int
}

func runAudit(ctx context.Context, e *env, args []string) error {
	fs := newFlagSet(e, "audit", "[flags]", auditHelp)
	var f auditFlags
	fs.StringVar(&f.url, "url", "", "Guard's base URL (default: GUARD_URL or http://127.0.0.1:8080)")
	fs.StringVar(&f.key, "key", "", "API key with scope audit:read (default: GUARD_API_KEY)")
	fs.StringVar(&f.user, "user", "", "only events of this user (normalised like checks)")
	fs.StringVar(&f.ip, "ip", "", "only events from this address or CIDR")
	fs.StringVar(&f.device, "device", "", "only events of this device id")
	fs.StringVar(&f.phone, "phone", "", "only events of this phone number (normalised like checks)")
	fs.StringVar(&f.action, "action", "", "only this action (login, otp_send, ...; lock, unlock or reload for admin events)")
	fs.StringVar(&f.decision, "decision", "", "allow, deny or challenge")
	fs.StringVar(&f.reason, "reason", "", "ok, rate_limited, locked_out, denylisted, allowlisted, shadow, store_unavailable, challenge_required")
	fs.StringVar(&f.kind, "kind", "", "check, report or admin")
	fs.StringVar(&f.since, "since", "", "events at or after this time (RFC 3339, date, or duration ago)")
	fs.StringVar(&f.until, "until", "", "events before this time (RFC 3339, date, or duration ago)")
	fs.IntVar(&f.limit, "limit", 100, "page size for table and json, 1..1000")
	fs.StringVar(&f.cursor, "cursor", "", "continue after a previous page (table and json)")
	fs.StringVar(&f.fmt, "format", "table", "table, json, ndjson or csv")
	if err := parseFlags(e, fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("audit: unexpected argument %q", fs.Arg(0))
	}
	base, err := guardURL("audit", f.url, e, "http://"+config.DefaultListen)
	if err != nil {
		return err
	}
	key := firstNonEmpty(f.key, e.env.Get(config.EnvAPIKey))
	if key == "" {
		return errors.New("audit: no API key: set --key or GUARD_API_KEY")
	}
	now := time.Now()
	filter := sdk.AuditFilter{
		User: f.user, IP: f.ip, Device: f.device, Phone: f.phone, Action: f.action,
		Decision: f.decision, Reason: f.reason, Kind: f.kind, Limit: f.limit, Cursor: f.cursor,
	}
	if filter.Since, err = parseWhen(f.since, now); err != nil {
		return fmt.Errorf("audit: --since: %w", err)
	}
	if filter.Until, err = parseWhen(f.until, now); err != nil {
		return fmt.Errorf("audit: --until: %w", err)
	}
	client := sdk.New(base, key, sdk.WithUserAgent("guard-cli"))
	switch f.fmt {
	case "ndjson", "csv":
		limitSet := false
		fs.Visit(func(fl *flag.Flag) { limitSet = limitSet || fl.Name == "limit" })
		if limitSet {
			// An export has every match: a --limit it ignored would
			// look honoured.
			return fmt.Errorf("audit: --limit applies to --format table and json; --format %s exports every matching event (narrow it with --since and --until)", f.fmt)
		}
		format := sdk.FormatNDJSON
		if f.fmt == "csv" {
			format = sdk.FormatCSV
		}
		return wrapSDK("audit", client.ExportAudit(ctx, filter, format, e.stdout))
	case "table", "json":
		if f.limit < 1 || f.limit > 1000 {
			return fmt.Errorf("audit: --limit %d outside 1..1000", f.limit)
		}
		page, err := client.Audit(ctx, filter)
		if err != nil {
			return wrapSDK("audit", err)
		}
		if f.fmt == "json" {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(page)
		}
		if err := audit.WriteTable(e.stdout, page.Events); err != nil {
			return err
		}
		if page.NextCursor != nil {
			fmt.Fprintf(e.stderr, "more events: add --cursor %s\n", *page.NextCursor)
		}
		return nil
	default:
		return fmt.Errorf("audit: unknown --format %q (want table, json, ndjson or csv)", f.fmt)
	}
}

// parseWhen reads a time as api.ParseTime does; "" is the zero time (no
// filter).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	return api.ParseTime(s, now)
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}
