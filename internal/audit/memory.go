package audit

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"unsafe"
)

// Capacities of a MemoryStore whose bounds are given as 0.
const (
	// DefaultMemoryMax is the most events held.
	DefaultMemoryMax = 100000
	// DefaultMemoryMaxBytes is the most memory the held events take, as
	// counted by eventBytes: 64 MiB, about 250 000 typical events, so
	// with typical events DefaultMemoryMax is the bound that applies and
	// with large ones (long user, device and note values) this one.
	DefaultMemoryMaxBytes = 64 << 20
)

// MemoryStore is the bounded in-memory Store Guard uses without a database
// URL: single instance, lost on restart, the oldest events evicted beyond
// its capacity, in events and in bytes (whichever is reached first).
// Filters, order and cursors behave exactly as PGStore's. It is safe for
// concurrent use.
type MemoryStore struct {
	max      int
	maxBytes int64
	bytes    int64 // eventBytes of the held events

	mu sync.RWMutex
	// The events, sorted ascending by (At, ID), live in a ring: logical
	// index i is buf[(head+i)%len(buf)], for i in [0, n). Once full, evicting
	// the oldest is advancing head, so an insert costs O(batch), not a copy
	// of the whole store.
	buf     []Event
	head, n int
	ids     map[string]struct{} // IDs held, for replay deduplication
	add     []Event             // scratch: the batch's new events, sorted
	merged  []Event             // scratch: add merged with the held events after add[0]
	evicted []string            // scratch: IDs evicted by the current Insert
}

// NewMemoryStore returns a store holding at most max events
// (DefaultMemoryMax when max <= 0) and DefaultMemoryMaxBytes; inserting
// beyond either evicts the oldest.
func NewMemoryStore(max int) *MemoryStore {
	return NewBoundedMemoryStore(max, 0)
}

// NewBoundedMemoryStore returns a store holding at most maxEvents events
// (DefaultMemoryMax when <= 0) taking at most maxBytes of memory
// (DefaultMemoryMaxBytes when <= 0), as counted by eventBytes; inserting
// beyond either evicts the oldest. An event larger than maxBytes on its
// own is not kept.
func NewBoundedMemoryStore(maxEvents int, maxBytes int64) *MemoryStore {
	if maxEvents <= 0 {
		maxEvents = DefaultMemoryMax
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMemoryMaxBytes
	}
	return &MemoryStore{max: maxEvents, maxBytes: maxBytes, ids: make(map[string]struct{})}
}

// eventOverhead is what an event costs beyond its strings' bytes: its slot
// in the ring, the id's entry in the dedup map, the string headers' heap
// rounding and the pointer fields' allocations. An estimate on the high
// side, so the bound holds for what the process really spends.
const eventOverhead = int64(unsafe.Sizeof(Event{})) + 64 + 4*16

// eventBytes is the memory one held event accounts for: its strings (the
// ID twice: in the event and as the dedup map's key) plus eventOverhead.
func eventBytes(e *Event) int64 {
	n := 2*len(e.ID) + len(e.Kind) + len(e.Action) + len(e.Decision) + len(e.Reason) +
		len(e.Outcome) + len(e.User) + len(e.IP) + len(e.Device) + len(e.Phone) + len(e.Rule) +
		len(e.APIKey) + len(e.DecisionID) + len(e.Instance) + len(e.Note)
	return int64(n) + eventOverhead
}

// Bytes returns the memory the held events account for (see
// NewBoundedMemoryStore).
func (s *MemoryStore) Bytes() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.bytes
}

// Insert stores events, skipping any whose ID is already held. It never
// fails. Beyond the capacity the oldest events (by At, then ID) are
// evicted, whether they were held before or are in this batch.
//
// Events arrive nearly, not exactly, in order (decisions of one
// millisecond from many goroutines), so the batch is sorted and merged
// with only the held events that sort after its oldest: O(batch + that
// tail), never a shift per event or a copy of the whole store.
func (s *MemoryStore) Insert(_ context.Context, events []Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	add := s.add[:0]
	for _, e := range events {
		if _, dup := s.ids[e.ID]; dup {
			continue
		}
		s.ids[e.ID] = struct{}{}
		add = append(add, normalize(e))
	}
	if len(add) > 0 {
		if !slices.IsSortedFunc(add, compareEvents) {
			slices.SortFunc(add, compareEvents)
		}
		in := add
		if p := sort.Search(s.n, func(j int) bool { return less(&add[0], s.at(j)) }); p < s.n {
			m := s.merged[:0]
			for i, j := p, 0; i < s.n || j < len(add); {
				if j == len(add) || i < s.n && less(s.at(i), &add[j]) {
					m = append(m, *s.at(i))
					s.bytes -= eventBytes(s.at(i)) // counted again with in
					i++
				} else {
					m = append(m, add[j])
					j++
				}
			}
			s.n = p // the tail is rewritten from m
			s.merged, in = m, m
		}
		// Beyond capacity the oldest go: first held events (all older than
		// in), then in's own oldest, until both the count and the bytes fit.
		var inBytes int64
		for i := range in {
			inBytes += eventBytes(&in[i])
		}
		for s.n > 0 && (s.n+len(in) > s.max || s.bytes+inBytes > s.maxBytes) {
			s.evicted = append(s.evicted, s.buf[s.head].ID)
			s.bytes -= eventBytes(&s.buf[s.head])
			s.buf[s.head] = Event{} // let the collector have its strings
			s.head = (s.head + 1) % len(s.buf)
			s.n--
		}
		for len(in) > 0 && (len(in) > s.max || inBytes > s.maxBytes) {
			s.evicted = append(s.evicted, in[0].ID)
			inBytes -= eventBytes(&in[0])
			in = in[1:]
		}
		s.bytes += inBytes
		for i := range in {
			s.push(&in[i])
		}
	}
	// An evicted ID stays in ids until the batch is done, so a duplicate
	// later in the same batch is skipped rather than stored again.
	for _, id := range s.evicted {
		delete(s.ids, id)
	}
	clear(s.evicted)
	s.evicted = s.evicted[:0]
	s.add = reuse(add)
	s.merged = reuse(s.merged)
	return nil
}

// reuse empties a scratch slice for the next Insert, keeping its array
// unless a rare large batch made it big.
func reuse(b []Event) []Event {
	if cap(b) > 4096 {
		return nil
	}
	clear(b)
	return b[:0]
}

// push appends e after the newest event; the caller has made room.
func (s *MemoryStore) push(e *Event) {
	if s.n == len(s.buf) {
		s.grow()
	}
	s.buf[(s.head+s.n)%len(s.buf)] = *e
	s.n++
}

// grow doubles the ring (up to max), laying the events out from index 0.
func (s *MemoryStore) grow() {
	size := min(max(2*len(s.buf), 64), s.max)
	buf := make([]Event, size)
	for i := 0; i < s.n; i++ {
		buf[i] = *s.at(i)
	}
	s.buf, s.head = buf, 0
}

// at returns the event at logical index i (0 is the oldest).
func (s *MemoryStore) at(i int) *Event {
	return &s.buf[(s.head+i)%len(s.buf)]
}

// less orders events ascending by (At, ID).
func less(a, b *Event) bool {
	if !a.At.Equal(b.At) {
		return a.At.Before(b.At)
	}
	return a.ID < b.ID
}

func compareEvents(a, b Event) int {
	if c := a.At.Compare(b.At); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
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
	end := s.n
	if f.Cursor != nil {
		c := *f.Cursor
		end = sort.Search(s.n, func(j int) bool { return !before(*s.at(j), &c) })
	} else if !f.Until.IsZero() {
		end = sort.Search(s.n, func(j int) bool { return !s.at(j).At.Before(f.Until) })
	}
	var page Page
	for i := end - 1; i >= 0; i-- {
		e := *s.at(i)
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
	return s.n
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
