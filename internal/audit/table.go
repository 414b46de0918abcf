package audit

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/guardhq/guard/sdk"
)

// WriteTable prints events (as GET /v1/audit answers them) as aligned
// columns for a terminal, `guard audit`'s default format: absent fields are
// "-", and caller-supplied values are quoted and cut (cell) so that a
// hostile identifier cannot break or forge rows.
func WriteTable(w io.Writer, events []sdk.AuditEvent) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tKIND\tACTION\tRESULT\tREASON\tUSER\tIP\tDEVICE\tPHONE\tRULE\tRETRY\tLOCKED UNTIL\tKEY\tNOTE")
	for _, ev := range events {
		result, reason := opt(ev.Decision), opt(ev.Reason)
		if ev.Kind == sdk.KindReport {
			result = opt(ev.Outcome)
		}
		if ev.Degraded != nil && *ev.Degraded {
			reason += " (degraded)"
		}
		if ev.DryRun != nil && *ev.DryRun {
			reason += " (dry run)"
		}
		retry := "-"
		if ev.RetryAfterMs != nil && *ev.RetryAfterMs > 0 {
			retry = (time.Duration(*ev.RetryAfterMs) * time.Millisecond).String()
		}
		until := "-"
		if ev.LockoutUntil != nil {
			until = ev.LockoutUntil.UTC().Format("2006-01-02 15:04:05Z")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			ev.At.UTC().Format("2006-01-02 15:04:05.000Z"), ev.Kind, opt(ev.Action), result, reason,
			cell(opt(ev.User)), opt(ev.IP), cell(opt(ev.Device)), opt(ev.Phone), opt(ev.Rule), retry, until,
			opt(ev.APIKey), cell(opt(ev.Note)))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write table: %w", err)
	}
	if len(events) == 0 {
		_, err := fmt.Fprintln(w, "(no events match)")
		return err
	}
	return nil
}

func opt(s *string) string {
	if s == nil || *s == "" {
		return "-"
	}
	return *s
}

// cell keeps a caller-supplied value on one line and within a sane width,
// so a hostile identifier cannot break or forge table rows.
func cell(s string) string {
	s = strconv.Quote(s)
	s = s[1 : len(s)-1]
	s = strings.ReplaceAll(s, "\t", " ")
	if r := []rune(s); len(r) > 48 {
		s = string(r[:45]) + "..."
	}
	return s
}
