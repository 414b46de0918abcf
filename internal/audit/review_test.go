package audit

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

// reviewStore is what the review pages ask of a store.
type reviewStore interface {
	Store
	QueryNewer(ctx context.Context, f Filter) (Page, error)
	Count(ctx context.Context, f Filter, max int) (int, error)
	Overview(ctx context.Context, q OverviewQuery) (Overview, error)
}

func TestMemoryReview(t *testing.T) {
	runReviewSuite(t, func(t *testing.T) reviewStore { return NewMemoryStore(0) })
}

func TestPGReview(t *testing.T) {
	runReviewSuite(t, func(t *testing.T) reviewStore { return testPGStore(t, PGConfig{}) })
}

func runReviewSuite(t *testing.T, newStore func(*testing.T) reviewStore) {
	t.Run("paging both ways", func(t *testing.T) { testPagingBothWays(t, newStore(t)) })
	t.Run("count", func(t *testing.T) { testCount(t, newStore(t)) })
	t.Run("overview", func(t *testing.T) { testOverview(t, newStore(t)) })
}

func testPagingBothWays(t *testing.T, s reviewStore) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	// 25 events, two per millisecond at times, so ties exercise the id order.
	events := genEvents("p", 25, now.Add(-time.Hour), time.Millisecond/2+time.Millisecond/2)
	for i := range events {
		events[i].At = now.Add(-time.Hour).Add(time.Duration(i/2) * time.Millisecond)
	}
	if err := s.Insert(ctx, events); err != nil {
		t.Fatal(err)
	}
	f := Filter{User: "", Limit: 4, Since: now.Add(-2 * time.Hour)}
	var pages [][]string
	var cursors []*Cursor // cursor that fetched each page (nil: first)
	var cur *Cursor
	for {
		f.Cursor = cur
		p, err := s.Query(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, ids(p.Events))
		cursors = append(cursors, cur)
		if p.Next == nil {
			break
		}
		cur = p.Next
	}
	if len(pages) != 7 {
		t.Fatalf("%d pages forward; want 7", len(pages))
	}
	// Walk back from the last page: the newer page of page i is page i-1.
	for i := len(pages) - 1; i > 0; i-- {
		last := pages[i]
		oldestAbove := pages[i][0]
		_ = last
		var c *Cursor
		for _, e := range events {
			if e.ID == oldestAbove {
				c = &Cursor{At: e.At, ID: e.ID}
			}
		}
		p, err := s.QueryNewer(ctx, Filter{Limit: 4, Cursor: c, Since: f.Since})
		if err != nil {
			t.Fatal(err)
		}
		if got := ids(p.Events); !slices.Equal(got, pages[i-1]) {
			t.Errorf("newer than page %d: got %v; want page %d %v", i, got, i-1, pages[i-1])
		}
		if (p.Next == nil) != (i-1 == 0) {
			t.Errorf("newer than page %d: next %v; want one unless it is the first page", i, p.Next)
		}
	}
	// Filters apply in that direction too.
	p, err := s.QueryNewer(ctx, Filter{User: "user3", Limit: 100, Cursor: &Cursor{At: events[0].At, ID: events[0].ID}})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range p.Events {
		if e.User != "user3" {
			t.Errorf("filtered newer page has %+v", e)
		}
	}
	if len(p.Events) != 4 { // user3: i = 3, 10, 17, 24
		t.Errorf("user3 newer than the first event: %v; want 4 events", ids(p.Events))
	}
	if _, err := s.QueryNewer(ctx, Filter{}); !errors.Is(err, ErrBadFilter) {
		t.Errorf("QueryNewer without a cursor: %v; want ErrBadFilter", err)
	}
}

func testCount(t *testing.T, s reviewStore) {
	ctx := context.Background()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	if err := s.Insert(ctx, fixture(base)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    Filter
		max  int
		want int
	}{
		{"all", Filter{}, 100, 8},
		{"capped", Filter{}, 3, 3},
		{"alice", Filter{User: "alice"}, 100, 3},
		{"denied checks", Filter{Kind: KindCheck, Decision: "deny"}, 100, 2},
		{"since", Filter{Since: base.Add(5 * time.Minute)}, 100, 3},
		{"cursor and limit ignored", Filter{Limit: 1, Cursor: &Cursor{At: base, ID: "x"}}, 100, 8},
	} {
		got, err := s.Count(ctx, tc.f, tc.max)
		if err != nil || got != tc.want {
			t.Errorf("%s: Count = %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
}

func testOverview(t *testing.T, s reviewStore) {
	ctx := context.Background()
	base := time.Now().UTC().Add(-time.Hour).Truncate(time.Minute)
	ev := fixture(base)
	// Two more denials of 203.0.113.9 in minute 2, one of another IP.
	ev = append(ev,
		Event{ID: "x1", At: base.Add(2*time.Minute + time.Second), Kind: KindCheck, Action: "login", Decision: "deny", Reason: "rate_limited", IP: "203.0.113.9", User: "zed", Phone: "+447400123456"},
		Event{ID: "x2", At: base.Add(2*time.Minute + 2*time.Second), Kind: KindCheck, Action: "login", Decision: "deny", Reason: "rate_limited", IP: "203.0.113.9", Phone: "+447400999888"},
		Event{ID: "x3", At: base.Add(30 * time.Minute), Kind: KindCheck, Action: "login", Decision: "deny", Reason: "denylisted", IP: "198.51.100.1", Device: "d9"},
	)
	if err := s.Insert(ctx, ev); err != nil {
		t.Fatal(err)
	}
	o, err := s.Overview(ctx, OverviewQuery{Since: base, Until: base.Add(31 * time.Minute), Top: 2})
	if err != nil {
		t.Fatal(err)
	}
	m := func(n int) time.Time { return base.Add(time.Duration(n) * time.Minute) }
	want := []SeriesCount{
		{m(1), "allow", "ok", 2},
		{m(2), "deny", "rate_limited", 3},
		{m(3), "deny", "locked_out", 1},
		{m(6), "allow", "allowlisted", 1},
		{m(7), "allow", "ok", 1},
		{m(30), "deny", "denylisted", 1},
	}
	if len(o.Series) != len(want) {
		t.Fatalf("series = %+v; want %+v", o.Series, want)
	}
	for i := range want {
		g := o.Series[i]
		if !g.Start.Equal(want[i].Start) || g.Decision != want[i].Decision || g.Reason != want[i].Reason || g.Count != want[i].Count {
			t.Errorf("series[%d] = %+v; want %+v", i, g, want[i])
		}
	}
	wantTop := func(name string, got []TopCount, want ...TopCount) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s = %+v; want %+v", name, got, want)
		}
	}
	wantTop("top IPs", o.TopIPs, TopCount{"203.0.113.9", 3}, TopCount{"198.51.100.1", 1})
	wantTop("top users", o.TopUsers, TopCount{"alice", 1}, TopCount{"bob", 1})
	wantTop("top devices", o.TopDevices, TopCount{"d1", 1}, TopCount{"d2", 1})
	wantTop("top phones", o.TopPhones, TopCount{"+447400123456", 2}, TopCount{"+447400999888", 1})

	// A window that leaves the later events out.
	o, err = s.Overview(ctx, OverviewQuery{Since: m(2), Until: m(3), Bucket: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(o.Series) != 1 || o.Series[0].Count != 3 || !o.Series[0].Start.Equal(m(2)) {
		t.Errorf("minute 2 in 30s buckets = %+v; want one bucket of 3", o.Series)
	}
	for _, q := range []OverviewQuery{
		{},
		{Since: m(2), Until: m(1)},
		{Since: m(0), Until: m(1), Bucket: time.Millisecond},
		{Since: m(0), Until: m(1), Top: 101},
		{Since: m(0), Until: m(0).Add(10001 * time.Second), Bucket: time.Second},
	} {
		if _, err := s.Overview(ctx, q); !errors.Is(err, ErrBadFilter) {
			t.Errorf("Overview(%+v) = %v; want ErrBadFilter", q, err)
		}
	}
}
