package audit

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every Store implementation runs the same suite, so MemoryStore and
// PGStore cannot drift apart in filter semantics, order or paging.
func TestMemoryStore(t *testing.T) {
	runStoreSuite(t, func(t *testing.T) Store { return NewMemoryStore(0) })
}

func TestPGStore(t *testing.T) {
	runStoreSuite(t, func(t *testing.T) Store { return testPGStore(t, PGConfig{}) })
}

func runStoreSuite(t *testing.T, newStore func(*testing.T) Store) {
	t.Run("filters", func(t *testing.T) { testFilters(t, newStore(t)) })
	t.Run("replay dedup", func(t *testing.T) { testReplayDedup(t, newStore(t)) })
	t.Run("pagination under concurrent inserts", func(t *testing.T) { testPagination(t, newStore(t)) })
	t.Run("export", func(t *testing.T) { testExport(t, newStore(t)) })
	t.Run("bad filter", func(t *testing.T) { testBadFilter(t, newStore(t)) })
}

func ptr[T any](v T) *T { return &v }

// fixture returns events around base covering every kind and field.
func fixture(base time.Time) []Event {
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	return []Event{
		{ID: "e1", At: at(1), Kind: KindCheck, Action: "login", Decision: "allow", Reason: "ok", User: "alice", IP: "203.0.113.5", Device: "d1", Rule: "login/ip", DryRun: ptr(false), Degraded: ptr(false), APIKey: "auth", DecisionID: "e1", Instance: "guard-1"},
		{ID: "e2", At: at(2), Kind: KindCheck, Action: "login", Decision: "deny", Reason: "rate_limited", User: "alice", IP: "203.0.113.9", Device: "d2", Rule: "login/user", RetryAfterMs: ptr(int64(1500)), DryRun: ptr(false), DecisionID: "e2"},
		{ID: "e3", At: at(3), Kind: KindCheck, Action: "otp", Decision: "deny", Reason: "locked_out", User: "bob", IP: "2001:db8::1", Device: "d1", Phone: "+447400123456", LockoutUntil: ptr(at(13)), DryRun: ptr(true), DecisionID: "e3"},
		{ID: "e4", At: at(4), Kind: KindReport, Action: "login", Outcome: "failure", User: "alice", IP: "203.0.113.5", Phone: "+447400123456", LockoutUntil: ptr(at(9)), DecisionID: "e1"},
		{ID: "e5", At: at(5), Kind: KindAdmin, Action: "unlock", User: "bob", APIKey: "secteam", Note: "called support"},
		{ID: "e6", At: at(6), Kind: KindCheck, Action: "signup", Decision: "allow", Reason: "allowlisted", User: "carol", IP: "10.1.2.3", Phone: "+33612345678", DecisionID: "e6"},
		{ID: "e7", At: at(7), Kind: KindCheck, Action: "login", Decision: "allow", Reason: "ok", User: "dave", IP: "h:9f86d081884c7d65", DecisionID: "e7"},
		{ID: "e8", At: at(1), Kind: KindCheck, Action: "login", Decision: "allow", Reason: "ok", User: "erin", IP: "203.0.113.77", Device: "d1", DecisionID: "e8"},
	}
}

func ids(events []Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.ID
	}
	return out
}

func testFilters(t *testing.T, s Store) {
	ctx := context.Background()
	base := time.Now().UTC().Truncate(time.Millisecond).Add(-time.Hour)
	if err := s.Insert(ctx, fixture(base)); err != nil {
		t.Fatalf("insert: %v", err)
	}
	at := func(min int) time.Time { return base.Add(time.Duration(min) * time.Minute) }
	tests := []struct {
		name string
		f    Filter
		want []string
	}{
		{"all newest first, ties by id desc", Filter{}, []string{"e7", "e6", "e5", "e4", "e3", "e2", "e8", "e1"}},
		{"user", Filter{User: "alice"}, []string{"e4", "e2", "e1"}},
		{"id", Filter{ID: "e3"}, []string{"e3"}},
		{"id in a window", Filter{ID: "e3", Since: at(2), Until: at(4)}, []string{"e3"}},
		{"id outside the window", Filter{ID: "e3", Since: at(4)}, nil},
		{"id is exact", Filter{ID: "e"}, nil},
		{"ip address", Filter{IP: netip.MustParsePrefix("203.0.113.5/32")}, []string{"e4", "e1"}},
		{"ip cidr", Filter{IP: netip.MustParsePrefix("203.0.113.0/24")}, []string{"e4", "e2", "e8", "e1"}},
		{"ip cidr unmasked", Filter{IP: netip.MustParsePrefix("203.0.113.77/25")}, []string{"e4", "e2", "e8", "e1"}},
		{"ipv6 cidr", Filter{IP: netip.MustParsePrefix("2001:db8::/32")}, []string{"e3"}},
		{"ip nothing", Filter{IP: netip.MustParsePrefix("192.0.2.0/24")}, nil},
		{"device", Filter{Device: "d1"}, []string{"e3", "e8", "e1"}},
		{"phone", Filter{Phone: "+447400123456"}, []string{"e4", "e3"}},
		{"phone is exact", Filter{Phone: "+447400"}, nil},
		{"phone and kind", Filter{Phone: "+447400123456", Kind: KindCheck}, []string{"e3"}},
		{"ip text (pseudonymised)", Filter{IPText: "h:9f86d081884c7d65"}, []string{"e7"}},
		{"ip text is exact", Filter{IPText: "203.0.113"}, nil},
		{"action", Filter{Action: "login"}, []string{"e7", "e4", "e2", "e8", "e1"}},
		{"decision", Filter{Decision: "deny"}, []string{"e3", "e2"}},
		{"reason", Filter{Reason: "allowlisted"}, []string{"e6"}},
		// 'ok' and 'allow' are left out of Postgres's partial reason and
		// decision indexes (migration 000003): found all the same.
		{"reason ok", Filter{Reason: "ok"}, []string{"e7", "e8", "e1"}},
		{"reason rare", Filter{Reason: "locked_out"}, []string{"e3"}},
		{"reason of no event", Filter{Reason: "denylisted"}, nil},
		{"decision allow", Filter{Decision: "allow"}, []string{"e7", "e6", "e8", "e1"}},
		{"decision challenge", Filter{Decision: "challenge"}, nil},
		{"decision and reason", Filter{Decision: "deny", Reason: "rate_limited"}, []string{"e2"}},
		{"ip text of an address", Filter{IPText: "203.0.113.5"}, []string{"e4", "e1"}},
		{"user and cursor", Filter{User: "alice", Cursor: &Cursor{At: at(4), ID: "e4"}}, []string{"e2", "e1"}},
		{"action rare", Filter{Action: "signup"}, []string{"e6"}},
		{"kind report", Filter{Kind: KindReport}, []string{"e4"}},
		{"kind admin", Filter{Kind: KindAdmin}, []string{"e5"}},
		{"since inclusive", Filter{Since: at(6)}, []string{"e7", "e6"}},
		{"until exclusive", Filter{Until: at(2)}, []string{"e8", "e1"}},
		{"since and until", Filter{Since: at(2), Until: at(4)}, []string{"e3", "e2"}},
		// Events hold milliseconds, Postgres microseconds, a Filter
		// nanoseconds: bounds between two stored instants still compare
		// exactly.
		{"since a nanosecond after an event", Filter{Since: at(6).Add(time.Nanosecond)}, []string{"e7"}},
		{"until a nanosecond after an event", Filter{Until: at(2).Add(time.Nanosecond)}, []string{"e2", "e8", "e1"}},
		{"since a microsecond before an event", Filter{Since: at(6).Add(-time.Microsecond)}, []string{"e7", "e6"}},
		{"locked after", Filter{LockedAfter: at(10)}, []string{"e3"}},
		{"combined", Filter{User: "alice", Decision: "allow", Action: "login"}, []string{"e1"}},
		{"no match", Filter{User: "nobody"}, nil},
		{"cursor", Filter{Cursor: &Cursor{At: at(1), ID: "e8"}}, []string{"e1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			page, err := s.Query(ctx, tt.f)
			if err != nil {
				t.Fatalf("query: %v", err)
			}
			if got := ids(page.Events); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if page.Next != nil {
				t.Errorf("got next cursor %v, want nil", page.Next)
			}
		})
	}
	t.Run("fields round trip", func(t *testing.T) {
		want := map[string]Event{}
		for _, e := range fixture(base) {
			want[e.ID] = normalize(e)
		}
		page, err := s.Query(ctx, Filter{})
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		for _, got := range page.Events {
			if !reflect.DeepEqual(got, want[got.ID]) {
				t.Errorf("event %s:\n got %+v\nwant %+v", got.ID, got, want[got.ID])
			}
		}
	})
}

func testReplayDedup(t *testing.T, s Store) {
	ctx := context.Background()
	evs := fixture(time.Now().UTC().Add(-time.Hour))
	for i := 0; i < 3; i++ {
		if err := s.Insert(ctx, evs); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	// A batch that repeats an event inside itself is deduplicated too.
	if err := s.Insert(ctx, append(evs[:2:2], evs[:2]...)); err != nil {
		t.Fatalf("insert with inner duplicate: %v", err)
	}
	page, err := s.Query(ctx, Filter{Limit: MaxLimit})
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if got, want := len(page.Events), len(evs); got != want {
		t.Errorf("got %d events after replays, want %d", got, want)
	}
}

func genEvents(prefix string, n int, start time.Time, step time.Duration) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = Event{
			ID: fmt.Sprintf("%s%06d", prefix, i), At: start.Add(time.Duration(i) * step),
			Kind: KindCheck, Action: "login", Decision: "allow", Reason: "ok",
			User: fmt.Sprintf("user%d", i%7), IP: fmt.Sprintf("198.51.100.%d", i%250),
			Device: "dev", Instance: "guard-test",
		}
	}
	return out
}

func testPagination(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	// Several events share each millisecond so ties by id are exercised.
	initial := genEvents("a", 600, now.Add(-30*time.Minute), time.Millisecond/3)
	if err := s.Insert(ctx, initial); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Newer than every initial event, and a few older ones too.
			batch := genEvents(fmt.Sprintf("n%03d-", i), 20, now.Add(time.Duration(i)*time.Second), time.Millisecond)
			batch = append(batch, genEvents(fmt.Sprintf("o%03d-", i), 5, now.Add(-time.Hour), time.Millisecond)...)
			if err := s.Insert(ctx, batch); err != nil {
				t.Errorf("concurrent insert: %v", err)
				return
			}
		}
	}()
	seen := map[string]int{}
	var last *Event
	f := Filter{Limit: 37, Since: now.Add(-45 * time.Minute), Until: now}
	for pages := 0; ; pages++ {
		page, err := s.Query(ctx, f)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		for _, e := range page.Events {
			seen[e.ID]++
			if last != nil && !before(e, &Cursor{At: last.At, ID: last.ID}) {
				t.Fatalf("order: %s (%v) after %s (%v)", e.ID, e.At, last.ID, last.At)
			}
			e := e
			last = &e
		}
		if page.Next == nil {
			break
		}
		if len(page.Events) != f.Limit {
			t.Fatalf("got a short page of %d with a next cursor", len(page.Events))
		}
		f.Cursor = page.Next
	}
	close(stop)
	wg.Wait()
	for _, e := range initial {
		if seen[e.ID] != 1 {
			t.Errorf("event %s seen %d times, want 1", e.ID, seen[e.ID])
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("event %s seen %d times, want 1", id, n)
		}
	}
}

func testExport(t *testing.T, s Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	evs := genEvents("x", 2500, now.Add(-20*time.Minute), 3*time.Millisecond)
	evs[10].Note = "comma, \"quote\"\nnewline"
	if err := s.Insert(ctx, evs); err != nil {
		t.Fatalf("insert: %v", err)
	}
	f := Filter{User: "user3", Limit: 5} // the limit is ignored by export
	var want []Event
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].User == "user3" {
			want = append(want, normalize(evs[i]))
		}
	}

	var nd bytes.Buffer
	if err := WriteNDJSON(ctx, &nd, s, f); err != nil {
		t.Fatalf("ndjson: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(nd.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("got %d ndjson lines, want %d", len(lines), len(want))
	}
	for i, line := range lines {
		var got Event
		if err := json.Unmarshal([]byte(line), &got); err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Fatalf("line %d: got %+v, want %+v", i, got, want[i])
		}
	}

	var cb bytes.Buffer
	if err := WriteCSV(ctx, &cb, s, Filter{}); err != nil {
		t.Fatalf("csv: %v", err)
	}
	rows, err := csv.NewReader(&cb).ReadAll()
	if err != nil {
		t.Fatalf("read csv: %v", err)
	}
	if got, want := len(rows), len(evs)+1; got != want {
		t.Fatalf("got %d csv rows, want %d", got, want)
	}
	if !slices.Equal(rows[0], CSVHeader) {
		t.Errorf("got header %v, want %v", rows[0], CSVHeader)
	}
	noteCol := slices.Index(CSVHeader, "note")
	if got := rows[len(rows)-11][noteCol]; got != evs[10].Note {
		t.Errorf("got note %q, want %q", got, evs[10].Note)
	}

	stop := errors.New("stop")
	n := 0
	err = s.Stream(ctx, Filter{}, func(Event) error {
		if n++; n == 3 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || n != 3 {
		t.Errorf("got err %v after %d events, want fn's error after 3", err, n)
	}
}

func testBadFilter(t *testing.T, s Store) {
	for _, limit := range []int{-1, MaxLimit + 1} {
		_, err := s.Query(context.Background(), Filter{Limit: limit})
		if !errors.Is(err, ErrBadFilter) {
			t.Errorf("limit %d: got %v, want ErrBadFilter", limit, err)
		}
	}
}
