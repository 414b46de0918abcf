package audit

import (
	"context"
	"sort"
	"sync"
)

// DefaultMemoryMax is MemoryStore's capacity when NewMemoryStore gets 0.
const DefaultMemoryMax = 100000

// MemoryStore is the bounded in-memory Store Guard uses without a database
// URL: single instance, lost on restart, the oldest events evicted beyond
// its capacity. Filters, order and cursors behave exactly as PGStore's.
// It is safe for concurrent use.
type MemoryStore struct {
	max int

	mu     sync.RWMutex
	events []Event             // sorted ascending by (At, ID)
	ids    map[string]struct{} // IDs held, for replay deduplication
}

// NewMemoryStore returns a store holding at most max events
// (DefaultMemoryMax when max <= 0); inserting beyond it evicts the oldest.
func NewMemoryStore(max int) *MemoryStore {
	if max <= 0 {
		max = DefaultMemoryMax
	}
	return &MemoryStore{max: max, ids: make(map[string]struct{})}
}

// Insert stores events, skipping any whose ID is already held. It never
// fails.
func (s *MemoryStore) Insert(_ context.Context, events []Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range events {
		if _, dup := s.ids[e.ID]; dup {
			continue
		}
		e = normalize(e)
		s.ids[e.ID] = struct{}{}
		// Events arrive nearly in time order, so this is almost always an append.
		i := len(s.events)
		if i > 0 && !less(s.events[i-1], e) {
			i = sort.Search(len(s.events), func(j int) bool { return less(e, s.events[j]) })
		}
		s.events = append(s.events, Event{})
		copy(s.events[i+1:], s.events[i:])
		s.events[i] = e
	}
	if over := len(s.events) - s.max; over > 0 {
		for _, e := range s.events[:over] {
			delete(s.ids, e.ID)
		}
		s.events = append(s.events[:0:0], s.events[over:]...)
	}
	return nil
}

// less orders events ascending by (At, ID).
func less(a, b Event) bool {
	if !a.At.Equal(b.At) {
		return a.At.Before(b.At)
	}
	return a.ID < b.ID
}

// Query returns one page of matching events, newest first.
func (s *MemoryStore) Query(_ context.Context, f Filter) (Page, error) {
	f, err := checkFilter(f)
	if err != nil {
		return Page{}, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	// Start below the cursor (or Until) so a deep page does not rescan
	// every newer event.
	end := len(s.events)
	if f.Cursor != nil {
		c := *f.Cursor
		end = sort.Search(len(s.events), func(j int) bool { return !before(s.events[j], &c) })
	} else if !f.Until.IsZero() {
		end = sort.Search(len(s.events), func(j int) bool { return !s.events[j].At.Before(f.Until) })
	}
	var page Page
	for i := end - 1; i >= 0; i-- {
		e := s.events[i]
		if !f.Since.IsZero() && e.At.Before(f.Since) {
			break
		}
		if !matches(f, e) {
			continue
		}
		if len(page.Events) == f.Limit {
			last := page.Events[len(page.Events)-1]
			page.Next = &Cursor{At: last.At, ID: last.ID}
			break
		}
		page.Events = append(page.Events, e)
	}
	return page, nil
}

// Stream calls fn for every matching event, newest first, in pages of
// MaxLimit; the lock is not held while fn runs, so a slow reader never
// stalls writers. f.Limit is ignored; f.Cursor, when set, starts after it.
func (s *MemoryStore) Stream(ctx context.Context, f Filter, fn func(Event) error) error {
	return streamPages(ctx, s, f, fn)
}

// Ping never fails.
func (s *MemoryStore) Ping(context.Context) error { return nil }

// Len returns the number of events held.
func (s *MemoryStore) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.events)
}

// streamPages runs Stream on top of Query: keyset pages of MaxLimit, so
// memory stays constant and no lock, snapshot or connection is held while a
// slow client reads. Events inserted meanwhile newer than the first page
// are not included; every event present throughout is sent exactly once.
func streamPages(ctx context.Context, s Store, f Filter, fn func(Event) error) error {
	f.Limit = MaxLimit
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		page, err := s.Query(ctx, f)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if err := fn(e); err != nil {
				return err
			}
		}
		if page.Next == nil {
			return nil
		}
		f.Cursor = page.Next
	}
}
