package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// refMemory is the obvious model of MemoryStore: a sorted slice, the whole
// batch inserted, then the oldest beyond max cut off and their IDs
// forgotten. The ring buffer must hold exactly what it holds.
type refMemory struct {
	max    int
	events []Event
	ids    map[string]bool
}

func (r *refMemory) insert(batch []Event) {
	for _, e := range batch {
		if r.ids[e.ID] {
			continue
		}
		e = normalize(e)
		r.ids[e.ID] = true
		i := sort.Search(len(r.events), func(j int) bool {
			o := r.events[j]
			return e.At.Before(o.At) || e.At.Equal(o.At) && e.ID < o.ID
		})
		r.events = slices.Insert(r.events, i, e)
	}
	if over := len(r.events) - r.max; over > 0 {
		for _, e := range r.events[:over] {
			delete(r.ids, e.ID)
		}
		r.events = slices.Clone(r.events[over:])
	}
}

// newestFirst returns the model's IDs in Query order.
func (r *refMemory) newestFirst() []string {
	out := make([]string, 0, len(r.events))
	for i := len(r.events) - 1; i >= 0; i-- {
		out = append(out, r.events[i].ID)
	}
	return out
}

// allPages reads every event through Query in pages of limit, following
// the cursors.
func allPages(t *testing.T, s *MemoryStore, limit int) []string {
	t.Helper()
	var out []string
	f := Filter{Limit: limit}
	for {
		page, err := s.Query(t.Context(), f)
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		out = append(out, ids(page.Events)...)
		if page.Next == nil {
			return out
		}
		f.Cursor = page.Next
	}
}

func TestMemoryStoreEvictionAtCapacity(t *testing.T) {
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	ev := func(id string, ms int) Event {
		return Event{ID: id, At: base.Add(time.Duration(ms) * time.Millisecond), Kind: KindCheck}
	}
	tests := []struct {
		name    string
		max     int
		batches [][]Event
		want    []string // newest first
	}{
		{
			name:    "below capacity keeps all",
			max:     4,
			batches: [][]Event{{ev("a", 1), ev("b", 2)}, {ev("c", 3)}},
			want:    []string{"c", "b", "a"},
		},
		{
			name:    "one batch beyond capacity drops its oldest",
			max:     3,
			batches: [][]Event{{ev("a", 1), ev("b", 2), ev("c", 3), ev("d", 4), ev("e", 5)}},
			want:    []string{"e", "d", "c"},
		},
		{
			name: "ring wraps several times",
			max:  3,
			batches: [][]Event{{ev("a", 1), ev("b", 2), ev("c", 3)}, {ev("d", 4)}, {ev("e", 5), ev("f", 6)},
				{ev("g", 7), ev("h", 8)}},
			want: []string{"h", "g", "f"},
		},
		{
			name:    "late event lands in order inside a wrapped ring",
			max:     4,
			batches: [][]Event{{ev("a", 10), ev("b", 20), ev("c", 30), ev("d", 40)}, {ev("e", 50), ev("f", 60)}, {ev("x", 35)}},
			want:    []string{"f", "e", "d", "x"},
		},
		{
			name:    "event older than all held is not kept when full",
			max:     2,
			batches: [][]Event{{ev("b", 20), ev("c", 30)}, {ev("a", 10)}},
			want:    []string{"c", "b"},
		},
		{
			name:    "ties at one millisecond order by id",
			max:     3,
			batches: [][]Event{{ev("k2", 5), ev("k4", 5), ev("k1", 5)}, {ev("k3", 5)}},
			want:    []string{"k4", "k3", "k2"},
		},
		{
			name:    "duplicate in the batch that evicts it is still skipped",
			max:     2,
			batches: [][]Event{{ev("a", 1), ev("b", 2)}, {ev("c", 3), ev("a", 1), ev("d", 4)}},
			want:    []string{"d", "c"},
		},
		{
			name:    "an id evicted in an earlier batch may come back",
			max:     2,
			batches: [][]Event{{ev("a", 5), ev("b", 6), ev("c", 7)}, {ev("a", 8)}},
			want:    []string{"a", "c"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewMemoryStore(tt.max)
			for _, b := range tt.batches {
				if err := s.Insert(t.Context(), b); err != nil {
					t.Fatalf("insert: %v", err)
				}
			}
			if got := allPages(t, s, MaxLimit); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			if got := s.Len(); got != len(tt.want) {
				t.Errorf("got Len %d, want %d", got, len(tt.want))
			}
		})
	}
}

// Random batches, mostly in time order with some late and duplicate
// events, into stores of several sizes: the ring holds exactly what the
// model holds, read whole or in pages through cursors.
func TestMemoryStoreMatchesModel(t *testing.T) {
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, max := range []int{1, 7, 64, 100, 333} {
		t.Run(fmt.Sprintf("max %d", max), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(max), 42))
			s := NewMemoryStore(max)
			ref := &refMemory{max: max, ids: map[string]bool{}}
			next := 0
			for round := 0; round < 60; round++ {
				batch := make([]Event, rng.IntN(40))
				for i := range batch {
					ms := next
					switch rng.IntN(10) {
					case 0: // late: up to a few hundred ms back
						ms -= rng.IntN(300)
					case 1: // a replayed id, possibly already evicted
						if next > 0 {
							ms = rng.IntN(next)
						}
					}
					batch[i] = Event{ID: fmt.Sprintf("e%06d", ms), At: base.Add(time.Duration(ms) * time.Millisecond)}
					next++
				}
				if err := s.Insert(t.Context(), batch); err != nil {
					t.Fatalf("insert: %v", err)
				}
				ref.insert(batch)
				want := ref.newestFirst()
				if got := allPages(t, s, MaxLimit); !slices.Equal(got, want) {
					t.Fatalf("round %d: got %v, want %v", round, got, want)
				}
				if got := allPages(t, s, 1+rng.IntN(9)); !slices.Equal(got, want) {
					t.Fatalf("round %d paged: got %v, want %v", round, got, want)
				}
				if got := s.Len(); got != len(want) {
					t.Fatalf("round %d: got Len %d, want %d", round, got, len(want))
				}
			}
		})
	}
}

// Once full, an insert must cost O(batch): no copy of the whole store. The
// store used to reallocate all its events on every insert at capacity.
func TestMemoryStoreFullInsertDoesNotCopy(t *testing.T) {
	const max = 5000
	s := NewMemoryStore(max)
	evs := genEvents("f", max+2000, time.Now(), time.Millisecond)
	if err := s.Insert(t.Context(), evs[:max]); err != nil {
		t.Fatal(err)
	}
	i := max
	allocs := testing.AllocsPerRun(1000, func() {
		s.Insert(t.Context(), evs[i:i+1])
		i++
	})
	// Map churn may allocate now and then; a copy of the store is at least
	// one allocation on every insert.
	if allocs >= 1 {
		t.Errorf("got %.0f allocations per insert into a full store, want 0", allocs)
	}
	if got := s.Len(); got != max {
		t.Errorf("got Len %d, want %d", got, max)
	}
}

// The store is bounded by bytes as well as by events: 100k reports with
// 8000-byte values once took it to 1.5 GB.
func TestMemoryStoreBoundedByBytes(t *testing.T) {
	ctx := context.Background()
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	big := func(i int) Event {
		return Event{ID: fmt.Sprintf("b%06d", i), At: base.Add(time.Duration(i) * time.Millisecond),
			Kind: KindAdmin, Note: strings.Repeat("n", 8000)}
	}
	const maxBytes = 1 << 20
	s := NewBoundedMemoryStore(1000000, maxBytes)
	for i := 0; i < 2000; i += 10 {
		batch := make([]Event, 0, 10)
		for j := i; j < i+10; j++ {
			batch = append(batch, big(j))
		}
		if err := s.Insert(ctx, batch); err != nil {
			t.Fatal(err)
		}
		if got := s.Bytes(); got > maxBytes {
			t.Fatalf("after %d events: %d bytes held, bound %d", i+10, got, maxBytes)
		}
	}
	per := eventBytes(&Event{ID: "b000000", Kind: KindAdmin, Note: strings.Repeat("n", 8000)})
	if got, want := s.Len(), int(maxBytes/per); got != want {
		t.Errorf("holds %d events, want %d (as many as fit)", got, want)
	}
	// The newest are kept.
	page, err := s.Query(ctx, Filter{Limit: 1})
	if err != nil || len(page.Events) != 1 || page.Events[0].ID != "b001999" {
		t.Errorf("newest = %v (%v), want b001999", page.Events, err)
	}
	// The count of bytes follows evictions and out-of-order merges exactly.
	var sum int64
	if err := s.Stream(ctx, Filter{}, func(e Event) error { sum += eventBytes(&e); return nil }); err != nil {
		t.Fatal(err)
	}
	if sum != s.Bytes() {
		t.Errorf("Bytes() = %d, held events sum to %d", s.Bytes(), sum)
	}
	// A late (out-of-order) event merges inside the ring; still exact.
	late := big(1990)
	late.ID = "late"
	late.At = late.At.Add(time.Microsecond)
	if err := s.Insert(ctx, []Event{late}); err != nil {
		t.Fatal(err)
	}
	sum = 0
	_ = s.Stream(ctx, Filter{}, func(e Event) error { sum += eventBytes(&e); return nil })
	if sum != s.Bytes() || s.Bytes() > maxBytes {
		t.Errorf("after a late insert: Bytes() = %d, held sum %d, bound %d", s.Bytes(), sum, maxBytes)
	}
	// One event larger than the whole bound is not kept.
	tiny := NewBoundedMemoryStore(10, 1000)
	if err := tiny.Insert(ctx, []Event{big(1)}); err != nil {
		t.Fatal(err)
	}
	if tiny.Len() != 0 || tiny.Bytes() != 0 {
		t.Errorf("oversized event kept: len %d bytes %d", tiny.Len(), tiny.Bytes())
	}
}
