package backtest

import (
	"container/heap"
	"slices"
	"strings"
)

// topK finds the most frequent values of a stream in bounded memory: the
// Space-Saving algorithm (Metwally, Agrawal, El Abbadi 2005). It keeps at
// most capacity counters; a new value when full takes over the smallest
// counter and inherits its count. Every value whose true count exceeds
// (values seen)/capacity is kept, and counts are exact as long as no more
// than capacity distinct values were seen.
type topK struct {
	capacity int
	index    map[string]*counter
	h        counterHeap
}

type counter struct {
	value string
	n     int64
	pos   int
}

func newTopK(capacity int) *topK {
	return &topK{capacity: capacity, index: map[string]*counter{}}
}

func (t *topK) add(v string) {
	if c, ok := t.index[v]; ok {
		c.n++
		heap.Fix(&t.h, c.pos)
		return
	}
	if len(t.h) < t.capacity {
		c := &counter{value: v, n: 1}
		t.index[v] = c
		heap.Push(&t.h, c)
		return
	}
	c := t.h[0]
	delete(t.index, c.value)
	c.value = strings.Clone(v)
	c.n++
	t.index[c.value] = c
	heap.Fix(&t.h, 0)
}

// top returns the k largest counts, largest first (ties by value).
func (t *topK) top(k int) []Count {
	out := make([]Count, 0, len(t.h))
	for _, c := range t.h {
		out = append(out, Count{Value: c.value, Changed: c.n})
	}
	slices.SortFunc(out, func(a, b Count) int {
		if a.Changed != b.Changed {
			if a.Changed > b.Changed {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Value, b.Value)
	})
	if len(out) > k {
		out = out[:k]
	}
	return out
}

// counterHeap is a min-heap of counters by count.
type counterHeap []*counter

func (h counterHeap) Len() int           { return len(h) }
func (h counterHeap) Less(i, j int) bool { return h[i].n < h[j].n }
func (h counterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos, h[j].pos = i, j
}
func (h *counterHeap) Push(x any) {
	c := x.(*counter)
	c.pos = len(*h)
	*h = append(*h, c)
}
func (h *counterHeap) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}
