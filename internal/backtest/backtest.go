// Package backtest replays an audit trail through a candidate policy: every
// recorded check and report, in time order, goes to an abuse.Guard with the
// candidate's policy over a fresh in-memory limits store whose clock is the
// events' own times, and each answer is compared with the one recorded. It
// reads the trail and nothing else: it never touches Redis or writes an
// audit event.
//
// # What a replay cannot know
//
//   - Callers react to answers. A denied attacker may have stopped, slowed
//     down or moved on; an allowed one would have gone on. The trail holds
//     what was asked under the old policy, so a tighter candidate's
//     "allow->deny" counts are what it would have stopped of that traffic,
//     and a looser candidate's "deny->allow" ones admit attempts whose
//     follow-ups (the reports of attempts never made) are missing.
//   - The trail does not record a check's cost: every check replays with
//     cost 1. Nor does it record challenge_passed or manual lockouts'
//     effect on later checks (admin events are not replayed).
//   - Pseudonymized trails (audit.pseudonymize) hold keyed hashes: users
//     and devices still match themselves, but the candidate's lists (CIDRs,
//     users, devices) cannot match a hash, and an IP hash is no address, so
//     IPv6 addresses cannot be aggregated; each IP hash replays as its own
//     synthetic address (its own /64).
//   - A report replays only when its check would have gone ahead: a report
//     that names its check's decision_id (within ReportHorizon) is dropped
//     when the candidate denies that check and the trail's policy allowed
//     it. Reports without a decision_id, and those of checks both denied,
//     always replay.
//   - Events lost before they reached Postgres (a crash, a full spool) are
//     not replayed.
//   - The replay starts empty at the range's start: windows, lockouts,
//     ladder levels, trusted devices and reservations begun before it are
//     not known, so early in the range even the trail's own policy can
//     decide differently.
//   - Decisions of the fallback (degraded) came from an instance's own
//     state, which the replay's one store does not reproduce.
package backtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
)

// Transitions are the decision changes a report always lists (with 0 when
// none happened), "before->after".
var Transitions = []string{"allow->deny", "allow->challenge", "deny->allow", "deny->challenge", "challenge->allow", "challenge->deny"}

// DefaultTop is how many users, IPs and devices a report lists per action.
const DefaultTop = 10

// Config configures a Replayer.
type Config struct {
	// Guard is the candidate: its policy, lists, ipv6 prefix and
	// trusted-device TTL are replayed. KeySecret may be empty (the replay
	// store is private to the run).
	Guard abuse.Config
	// Top is how many of the most affected users, IPs and devices each
	// action lists; default DefaultTop.
	Top int
	// Actions are reported whether or not events of theirs are replayed
	// (with zeros when none is): the candidate's actions, or the one a
	// run is limited to.
	Actions []string
	// Only, when set, limits the report to this action. Every event still
	// replays: an action's decisions depend on other actions' events (a
	// lockout ledger they share, a rule name they share, the devices
	// their successes trust).
	Only string
}

// Replayer replays events one by one (Add) and sums up (Report). It is not
// safe for concurrent use: events must come in time order.
type Replayer struct {
	guard   *abuse.Guard
	store   *limits.MemoryStore
	clock   atomic.Int64 // simulated now, Unix ms
	last    captured
	top     int
	only    string
	actions map[string]*tally
	others  *tally // the actions Only leaves out
	checks  checkMemo
	// settle is, per reserve_failures action of the candidate, how long
	// its reservations live (its longest failure window): a report naming
	// a check's decision_id settles it until then.
	settle map[string]int64
}

// captured keeps the audit event the candidate Guard records for each
// call: its decision and whether it struck, in the trail's own terms.
type captured struct {
	e   audit.Event
	set bool
}

func (c *captured) Record(e audit.Event) { c.e, c.set = e, true }

// New returns a Replayer for the candidate; Close releases its store.
func New(cfg Config) (*Replayer, error) {
	r := &Replayer{top: cfg.Top, only: cfg.Only, actions: map[string]*tally{},
		checks: checkMemo{byID: map[string]memo{}, queues: map[int64][]string{}}, settle: map[string]int64{}}
	for name, a := range cfg.Guard.Policy.Actions {
		if !a.ReserveFailures {
			continue
		}
		for _, f := range a.Failures {
			r.settle[name] = max(r.settle[name], f.Window.Milliseconds())
		}
	}
	if r.top <= 0 {
		r.top = DefaultTop
	}
	for _, a := range cfg.Actions {
		r.actions[a] = newTally(r.top)
	}
	now := func() time.Time { return time.UnixMilli(r.clock.Load()).UTC() }
	// The sweep drops keys idle on the simulated clock, so a long
	// replay keeps only the state its windows still need.
	r.store = limits.NewMemory(limits.MemoryConfig{Now: now, SweepInterval: 100 * time.Millisecond})
	g := cfg.Guard
	g.Now = now
	g.Instance = "backtest"
	g.Pseudonymize = false
	if len(g.KeySecret) == 0 {
		g.KeySecret = []byte("guard-backtest")
	}
	var err error
	r.guard, err = abuse.New(nil, g, r.store, &r.last, nil)
	if err != nil {
		r.store.Close()
		return nil, fmt.Errorf("candidate: %w", err)
	}
	return r, nil
}

// Close stops the replay store.
func (r *Replayer) Close() error { return r.store.Close() }

// Add replays one recorded event (a check or a report; others are
// ignored). Events must come oldest first; the simulated clock never goes
// back. An event the candidate cannot take (an action it does not have,
// input it refuses) is counted as skipped.
func (r *Replayer) Add(ctx context.Context, e audit.Event) error {
	if e.Kind != audit.KindCheck && e.Kind != audit.KindReport {
		return nil
	}
	if ms := e.At.UnixMilli(); ms > r.clock.Load() {
		r.clock.Store(ms)
	}
	t := r.actions[e.Action]
	switch {
	case t != nil:
	case r.only != "" && e.Action != r.only:
		// Replayed for its effect on Only's decisions, not reported.
		if r.others == nil {
			r.others = newTally(r.top)
		}
		t = r.others
	default:
		t = newTally(r.top)
		r.actions[e.Action] = t
	}
	t.replayed++
	if struck(e) {
		t.before++ // whether or not the candidate runs it
	}
	subject := abuse.Subject{User: opt(e.User), IP: opt(replayIP(e.IP)), Device: opt(e.Device), Phone: opt(replayPhone(e.Phone))}
	r.checks.forget(e.At.UnixMilli())
	r.last.set = false
	var err error
	if e.Kind == audit.KindCheck {
		_, err = r.guard.Check(ctx, abuse.CheckInput{Action: e.Action, Subject: subject,
			DryRun: e.DryRun != nil && *e.DryRun, APIKey: "backtest"})
	} else {
		var decisionID string
		if m, ok := r.checks.byID[e.DecisionID]; ok && e.DecisionID != "" {
			if m.denied && !m.wasDenied && e.At.UnixMilli()-m.at <= ReportHorizon.Milliseconds() {
				// The candidate denied the attempt this report is
				// about, which the trail's policy allowed: the caller
				// would not have made it. (A report of a check that
				// both denied was made, and replays.)
				t.dropped++
				return nil
			}
			decisionID = m.id
		}
		_, err = r.guard.Report(ctx, abuse.ReportInput{Action: e.Action, Subject: subject,
			Outcome: e.Outcome, DecisionID: decisionID, APIKey: "backtest"})
	}
	var input *abuse.InputError
	switch {
	case errors.As(err, &input):
		t.skipped++
		return nil
	case err != nil:
		return fmt.Errorf("replay %s %s: %w", e.Kind, e.ID, err)
	case !r.last.set:
		return fmt.Errorf("replay %s %s: the candidate recorded no event", e.Kind, e.ID)
	}
	if e.Kind == audit.KindCheck && e.ID != "" {
		r.checks.remember(e.ID, memo{id: r.last.e.DecisionID, denied: r.last.e.Decision != "allow",
			wasDenied: e.Decision != "allow", at: e.At.UnixMilli()}, max(ReportHorizon.Milliseconds(), r.settle[e.Action]))
	}
	t.add(e, r.last.e)
	return nil
}

// ReportHorizon is how long after a check a report that names its
// decision_id is still matched to it, to be dropped when the candidate
// denied the check. A later report replays as if the candidate had
// allowed its check (it still settles the candidate's reservation of a
// reserve_failures check while that lives, as Guard's does).
const ReportHorizon = 2 * time.Minute

// checkMemo remembers what the candidate did with each recent check, for
// the reports that name it: the candidate's own decision id (so a report
// settles the candidate's reservation, reserve_failures) or that it
// denied the attempt (so the report is dropped). A check is forgotten
// ReportHorizon after it, or once its action's reservations have expired
// if that is later, which bounds its memory by the traffic of that long.
type checkMemo struct {
	byID   map[string]memo
	queues map[int64][]string // ids by how long they are kept, oldest first
}

type memo struct {
	id        string
	denied    bool  // by the candidate
	wasDenied bool  // in the trail
	at        int64 // Unix ms of the recorded check
	until     int64 // Unix ms when it is forgotten
}

// remember keeps m for keep ms after its check.
func (c *checkMemo) remember(id string, m memo, keep int64) {
	m.until = m.at + keep
	c.byID[id] = m
	c.queues[keep] = append(c.queues[keep], id)
}

// forget drops the checks kept until before now (Unix ms).
func (c *checkMemo) forget(now int64) {
	for keep, q := range c.queues {
		i := 0
		for ; i < len(q); i++ {
			m, ok := c.byID[q[i]]
			if ok && m.until >= now {
				break
			}
			delete(c.byID, q[i])
		}
		if i > 0 {
			q = q[i:]
			if cap(q) > 4096 && len(q) < cap(q)/4 {
				q = append([]string(nil), q...)
			}
			c.queues[keep] = q
		}
	}
}

// Report sums up the events added so far.
func (r *Replayer) Report() Report {
	rep := Report{Actions: make(map[string]ActionReport, len(r.actions))}
	for name, t := range r.actions {
		rep.Actions[name] = t.report()
	}
	return rep
}

// Source is a time-ordered trail (*audit.ReplayReader).
type Source interface {
	Replay(ctx context.Context, f audit.ReplayFilter, fn func(audit.Event) error) error
}

// Run replays the events of f from src through cfg's candidate. progress,
// if set, is called after every event with the number replayed so far.
// f.Action limits the report, not the replay (as Config.Only).
func Run(ctx context.Context, src Source, f audit.ReplayFilter, cfg Config, progress func(n int64)) (Report, error) {
	if f.Action != "" {
		cfg.Only, f.Action = f.Action, ""
	}
	r, err := New(cfg)
	if err != nil {
		return Report{}, err
	}
	defer r.Close()
	var n int64
	err = src.Replay(ctx, f, func(e audit.Event) error {
		if err := r.Add(ctx, e); err != nil {
			return err
		}
		n++
		if progress != nil {
			progress(n)
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	return r.Report(), nil
}

// struck reports whether an event started (or raised) a lockout: a report
// or check with lockout_until, except a check that only met a lockout.
func struck(e audit.Event) bool {
	return e.LockoutUntil != nil && !(e.Kind == audit.KindCheck && e.Reason == abuse.ReasonLockedOut)
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// replayIP is the address an event's IP replays as: itself, or for a
// pseudonymized trail's keyed hash a synthetic address of its own (fd00::/8,
// 56 bits of the hash in its /64, so distinct hashes stay distinct keys
// under the default IPv6 aggregation).
// replayPhone is the recorded phone as the candidate reads it: an E.164
// number as recorded; a keyed hash (audit.pseudonymize) has no country or
// prefix to recover, so the event replays without a phone.
func replayPhone(s string) string {
	if strings.HasPrefix(s, "+") {
		return s
	}
	return ""
}

func replayIP(s string) string {
	if s == "" {
		return ""
	}
	if _, err := netip.ParseAddr(s); err == nil {
		return s
	}
	h := sha256.Sum256([]byte(s))
	var a [16]byte
	a[0] = 0xfd
	copy(a[1:], h[:15])
	return netip.AddrFrom16(a).String()
}
