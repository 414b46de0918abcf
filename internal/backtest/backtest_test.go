package backtest

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/limits"
	"github.com/guardhq/guard/internal/testenv"
)

// trailDB records the synthetic day into a fresh, migrated Postgres and
// returns its URL.
func trailDB(t testing.TB) (string, int) {
	t.Helper()
	ctx := context.Background()
	url := testenv.Database(t, "guard_backtest_")
	if _, _, err := audit.Migrate(ctx, url, audit.MigrateUp); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	pg, err := audit.OpenPostgres(ctx, nil, audit.PostgresConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	trail := record(t, false)
	for b := range slices.Chunk(trail, 1000) {
		if err := pg.Insert(ctx, b); err != nil {
			t.Fatalf("insert: %v", err)
		}
	}
	return url, len(trail)
}

func countEvents(t *testing.T, url string) int64 {
	t.Helper()
	r, err := audit.OpenReplay(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	n, err := r.Count(context.Background(), audit.ReplayFilter{Since: day.Add(-time.Hour), Until: day.Add(49 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestBacktestDay replays the recorded day from Postgres through a tighter
// and a looser candidate. The counts follow from the script (see
// traffic_test.go): the tighter candidate admits 10 of each minute's 60
// stuffing attempts (100 of 600), locks the victim after the brute force's
// 5th failure for an hour (89 further brute-force checks and the victim's
// own 05:07 login denied) and drops the 590 reports of denied attempts;
// the looser one never strikes, so the 6 checks the baseline's lockout
// denied are allowed.
func TestBacktestDay(t *testing.T) {
	url, recorded := trailDB(t)
	f := audit.ReplayFilter{Since: day, Until: day.Add(24 * time.Hour), PageSize: 700}
	tests := []struct {
		name     string
		policy   abuse.Policy
		action   string
		want     map[string]ActionReport
		wantUser Count
		wantIPs  []Count
	}{
		{name: "tighter", policy: tighter(), want: map[string]ActionReport{
			"login": {Replayed: 5604, DroppedReports: 590, Changed: changes("allow->deny", 590),
				Lockouts: Lockouts{Before: 1, After: 1}},
			"signup": {Replayed: 10, Changed: changes()},
		}, wantUser: Count{victim, 91}, wantIPs: []Count{{attackerA, 500}, {attackerB, 90}, {"10.1.0.7", 1}}},
		{name: "looser", policy: looser(), want: map[string]ActionReport{
			"login":  {Replayed: 6194, Changed: changes("deny->allow", 6), Lockouts: Lockouts{Before: 1, After: 0}},
			"signup": {Replayed: 10, Changed: changes()},
		}, wantUser: Count{victim, 7}, wantIPs: []Count{{attackerB, 7}}},
		{name: "one action", policy: looser(), action: "signup", want: map[string]ActionReport{
			"signup": {Replayed: 10, Changed: changes()},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := audit.OpenReplay(context.Background(), url)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			f := f
			f.Action = tt.action
			rep, err := Run(context.Background(), src, f, Config{Guard: abuse.Config{Policy: tt.policy}, Top: 3}, nil)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got, want := slices.Sorted(maps.Keys(rep.Actions)), slices.Sorted(maps.Keys(tt.want)); !slices.Equal(got, want) {
				t.Fatalf("actions = %v, want %v", got, want)
			}
			for name, want := range tt.want {
				got := rep.Actions[name]
				if got.Replayed != want.Replayed || got.DroppedReports != want.DroppedReports || got.Lockouts != want.Lockouts || !maps.Equal(got.Changed, want.Changed) {
					t.Errorf("%s: got replayed %d dropped %d changed %v lockouts %+v,\nwant replayed %d dropped %d changed %v lockouts %+v",
						name, got.Replayed, got.DroppedReports, got.Changed, got.Lockouts,
						want.Replayed, want.DroppedReports, want.Changed, want.Lockouts)
				}
			}
			if tt.wantUser.Value == "" {
				return
			}
			login := rep.Actions["login"]
			if len(login.Top.Users) == 0 || login.Top.Users[0] != tt.wantUser {
				t.Errorf("top users = %v, want %v first", login.Top.Users, tt.wantUser)
			}
			if got := login.Top.IPs; !slices.Equal(got, tt.wantIPs) {
				t.Errorf("top ips = %v, want %v", got, tt.wantIPs)
			}
		})
	}
	if got, want := countEvents(t, url), int64(recorded); got != want {
		t.Errorf("%d events in the trail after the backtests, want the %d recorded (a backtest never writes)", got, want)
	}
}

// changes is a Changed map: every transition 0 but those given.
func changes(kv ...any) map[string]int64 {
	m := map[string]int64{}
	for _, tr := range Transitions {
		m[tr] = 0
	}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i].(string)] = int64(kv[i+1].(int))
	}
	return m
}

func TestReportFormats(t *testing.T) {
	rep := Report{Actions: map[string]ActionReport{"login": {Replayed: 12, DroppedReports: 2, Changed: changes("allow->deny", 3),
		Lockouts: Lockouts{Before: 1, After: 2}, Top: Top{Users: []Count{{"alice", 3}}, IPs: []Count{{"203.0.113.9", 3}}}}}}
	var js, table strings.Builder
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"actions": {`, `"login": {`, `"replayed": 12`, `"allow->deny": 3`, `"deny->allow": 0`,
		`"lockouts": {`, `"before": 1`, `"after": 2`, `"top": {`, `"users": [`, `"value": "alice"`} {
		if !strings.Contains(js.String(), want) {
			t.Errorf("json lacks %s:\n%s", want, js.String())
		}
	}
	if err := rep.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	want := "login: 12 events replayed (2 reports dropped: the candidate denied their checks)\n" +
		"  decisions changed: allow->deny 3\n  lockouts started: 1 before, 2 after\n" +
		"  most affected users: alice (3)\n  most affected ips: 203.0.113.9 (3)\n"
	if got := table.String(); got != want {
		t.Errorf("table =\n%s\nwant\n%s", got, want)
	}
}

func TestTopK(t *testing.T) {
	tests := []struct {
		name     string
		capacity int
		stream   string // one letter a value
		want     string
	}{
		{"exact below capacity", 4, "abcabca", "a3 b2 c2"},
		{"heavy hitter survives eviction (newcomers inherit the evicted count)", 2, "aaaaabcdaa", "a7 d3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := newTopK(tt.capacity)
			for _, c := range tt.stream {
				k.add(string(c))
			}
			var got []string
			for _, c := range k.top(3) {
				got = append(got, fmt.Sprintf("%s%d", c.Value, c.Changed))
			}
			if g := strings.Join(got, " "); g != tt.want {
				t.Errorf("top = %q, want %q", g, tt.want)
			}
		})
	}
}

func TestReplayIP(t *testing.T) {
	hashA, hashB := strings.Repeat("ab", 32), strings.Repeat("cd", 32)
	if got := replayIP("203.0.113.7"); got != "203.0.113.7" {
		t.Errorf("replayIP(address) = %q, want it unchanged", got)
	}
	a, b := netip.MustParseAddr(replayIP(hashA)), netip.MustParseAddr(replayIP(hashB))
	pa, _ := a.Prefix(64)
	pb, _ := b.Prefix(64)
	if pa == pb || replayIP(hashA) != a.String() {
		t.Errorf("replayIP of two hashes = %s, %s: want distinct /64s, stable", a, b)
	}
}

// sliceSource replays events held in memory, filtered by action as
// audit.ReplayReader does.
type sliceSource []audit.Event

func (s sliceSource) Replay(_ context.Context, f audit.ReplayFilter, fn func(audit.Event) error) error {
	for _, e := range s {
		if f.Action != "" && e.Action != f.Action {
			continue
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// TestBacktestPseudonymized: a trail of keyed hashes replays with the same
// counts as the raw one when the candidate has no lists: users, devices
// and (as synthetic addresses) IPs still match themselves.
func TestBacktestPseudonymized(t *testing.T) {
	trail := record(t, true)
	if e := trail[len(trail)-1]; e.IP == "" || netip.MustParseAddr(replayIP(e.IP)).String() == e.IP {
		t.Fatalf("recorded ip %q, want a keyed hash", e.IP)
	}
	rep, err := Run(context.Background(), sliceSource(trail), audit.ReplayFilter{}, Config{Guard: abuse.Config{Policy: tighter()}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	login := rep.Actions["login"]
	if got, want := login.Changed, changes("allow->deny", 590); !maps.Equal(got, want) {
		t.Errorf("changed = %v, want %v", got, want)
	}
	if got, want := login.Lockouts, (Lockouts{Before: 1, After: 1}); got != want {
		t.Errorf("lockouts = %+v, want %+v", got, want)
	}
	if len(login.Top.IPs) == 0 || login.Top.IPs[0].Changed != 500 {
		t.Errorf("top ips = %v, want the stuffing address's hash first with 500", login.Top.IPs)
	}
}

// TestBacktestSamePolicyReplaysReportsOfDeniedChecks: a caller that
// reports an attempt its check denied made that report, so replaying the
// trail through the policy that wrote it replays the report too and finds
// the same strike (it used to drop it: lockouts 1 before, 0 after).
func TestBacktestSamePolicyReplaysReportsOfDeniedChecks(t *testing.T) {
	pol := abuse.Policy{Actions: map[string]abuse.Action{"login": {
		Limits:   []abuse.Rule{{Dimension: abuse.DimUser, Limit: 2, Window: 30 * time.Second}},
		Failures: []abuse.Rule{{Dimension: abuse.DimUserIP, Limit: 3, Window: 15 * time.Minute}},
		Lockout:  abuse.Lockout{Ladder: []time.Duration{time.Minute}},
	}}}
	var clock atomic.Int64
	clock.Store(day.UnixMilli())
	now := func() time.Time { return time.UnixMilli(clock.Load()).UTC() }
	store := limits.NewMemory(limits.MemoryConfig{Now: now})
	defer store.Close()
	var trail events
	g, err := abuse.New(nil, abuse.Config{Policy: pol, KeySecret: []byte("recorded-secret"), Now: now}, store, &trail, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	subj := abuse.Subject{User: opt("bt1@example.com"), IP: opt("192.0.2.1")}
	denied := 0
	for range 3 {
		clock.Add(1000)
		d, err := g.Check(ctx, abuse.CheckInput{Action: "login", Subject: subj, APIKey: "auth"})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
		clock.Add(100)
		if _, err := g.Report(ctx, abuse.ReportInput{Action: "login", Subject: subj, Outcome: "failure", DecisionID: d.ID, APIKey: "auth"}); err != nil {
			t.Fatal(err)
		}
	}
	if denied != 1 {
		t.Fatalf("%d checks denied while recording, want the third", denied)
	}
	rep, err := Run(ctx, sliceSource(trail), audit.ReplayFilter{}, Config{Guard: abuse.Config{Policy: pol}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	login := rep.Actions["login"]
	if login.Lockouts != (Lockouts{Before: 1, After: 1}) || login.DroppedReports != 0 || login.Replayed != 6 || !maps.Equal(login.Changed, changes()) {
		t.Errorf("same policy: %+v; want 6 replayed, none dropped or changed, lockouts 1 before and 1 after", login)
	}
}
