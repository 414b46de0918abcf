package backtest

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/guardhq/guard/internal/audit"
)

// Report is a backtest's result: per action, what the candidate changes.
// Its JSON is the contract's `guard backtest --format json`.
type Report struct {
	Actions map[string]ActionReport `json:"actions"`
}

// ActionReport is one action's result.
type ActionReport struct {
	// Replayed counts the action's checks and reports the candidate ran;
	// DroppedReports and Skipped count those read from the trail that it
	// did not run.
	Replayed int64 `json:"replayed"`
	// Changed counts checks whose decision changed, by "before->after";
	// every one of Transitions is present.
	Changed map[string]int64 `json:"changed"`
	// Lockouts counts the strikes (lockouts started or raised) recorded
	// in the trail and those the candidate makes.
	Lockouts Lockouts `json:"lockouts"`
	// Top lists the users, IPs and devices with the most changes (a
	// changed decision or a strike that came or went), most first.
	Top Top `json:"top"`
	// DroppedReports counts reports not replayed because the candidate
	// denied the check they name (the attempt would not have been made).
	DroppedReports int64 `json:"dropped_reports,omitempty"`
	// Skipped counts events the candidate cannot take (an action it lacks,
	// input it refuses).
	Skipped int64 `json:"skipped,omitempty"`
}

// Lockouts compares strikes.
type Lockouts struct {
	Before int64 `json:"before"`
	After  int64 `json:"after"`
}

// Top is the most affected identifiers of an action, as the trail holds
// them (keyed hashes in a pseudonymized trail).
type Top struct {
	Users   []Count `json:"users"`
	IPs     []Count `json:"ips"`
	Devices []Count `json:"devices"`
}

// Count is one identifier and its number of changes.
type Count struct {
	Value   string `json:"value"`
	Changed int64  `json:"changed"`
}

// tally accumulates one action.
type tally struct {
	replayed, skipped   int64
	dropped             int64
	changed             map[string]int64
	before, after       int64
	users, ips, devices *topK
	k                   int // how many of each to list
}

func newTally(k int) *tally {
	// Each top list keeps many more candidates than it shows, so its
	// counts are exact unless the changes spread over more identifiers
	// than that (see topK).
	c := max(64*k, 1024)
	return &tally{changed: map[string]int64{}, users: newTopK(c), ips: newTopK(c), devices: newTopK(c), k: k}
}

// add compares a recorded event with the candidate's.
func (t *tally) add(was, now audit.Event) {
	changed := false
	if was.Kind == audit.KindCheck && was.Decision != now.Decision {
		t.changed[was.Decision+"->"+now.Decision]++
		changed = true
	}
	sw, sn := struck(was), struck(now)
	if sn {
		t.after++
	}
	if !changed && sw == sn {
		return
	}
	for _, c := range []struct {
		k *topK
		v string
	}{{t.users, was.User}, {t.ips, was.IP}, {t.devices, was.Device}} {
		if c.v != "" {
			c.k.add(c.v)
		}
	}
}

func (t *tally) report() ActionReport {
	r := ActionReport{Replayed: t.replayed - t.skipped - t.dropped, Skipped: t.skipped, DroppedReports: t.dropped, Changed: map[string]int64{},
		Lockouts: Lockouts{Before: t.before, After: t.after}}
	for _, tr := range Transitions {
		r.Changed[tr] = 0
	}
	for k, n := range t.changed {
		r.Changed[k] = n
	}
	r.Top = Top{Users: t.users.top(t.k), IPs: t.ips.top(t.k), Devices: t.devices.top(t.k)}
	return r
}

// WriteJSON writes the report as one JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // "allow->deny", not "allow-\u003edeny"
	return enc.Encode(r)
}

// WriteTable writes the report for people: one block per action, in name
// order.
func (r Report) WriteTable(w io.Writer) error {
	names := make([]string, 0, len(r.Actions))
	for n := range r.Actions {
		names = append(names, n)
	}
	slices.Sort(names)
	var b strings.Builder
	replayed := int64(0)
	for _, a := range r.Actions {
		replayed += a.Replayed + a.Skipped + a.DroppedReports
	}
	if replayed == 0 {
		b.WriteString("no checks or reports in the range\n")
	}
	for _, n := range names {
		a := r.Actions[n]
		fmt.Fprintf(&b, "%s: %d events replayed", n, a.Replayed)
		if a.DroppedReports > 0 {
			fmt.Fprintf(&b, " (%d reports dropped: the candidate denied their checks)", a.DroppedReports)
		}
		if a.Skipped > 0 {
			fmt.Fprintf(&b, " (%d skipped: the candidate cannot take them)", a.Skipped)
		}
		var changes []string
		for _, k := range slices.Sorted(maps.Keys(a.Changed)) {
			if v := a.Changed[k]; v > 0 {
				changes = append(changes, fmt.Sprintf("%s %d", k, v))
			}
		}
		if len(changes) == 0 {
			changes = []string{"none"}
		}
		fmt.Fprintf(&b, "\n  decisions changed: %s", strings.Join(changes, ", "))
		fmt.Fprintf(&b, "\n  lockouts started: %d before, %d after\n", a.Lockouts.Before, a.Lockouts.After)
		for _, l := range []struct {
			name string
			c    []Count
		}{{"users", a.Top.Users}, {"ips", a.Top.IPs}, {"devices", a.Top.Devices}} {
			if len(l.c) == 0 {
				continue
			}
			fmt.Fprintf(&b, "  most affected %s:", l.name)
			for i, c := range l.c {
				if i > 0 {
					b.WriteString(",")
				}
				fmt.Fprintf(&b, " %s (%d)", c.Value, c.Changed)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
