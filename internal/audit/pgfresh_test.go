package audit

import (
	"context"
	"slices"
	"testing"
	"time"
)

// pathCounts is how many batches each PGStore path wrote.
type pathCounts struct{ direct, dedup, conflicts int64 }

func (s *PGStore) pathCounts() pathCounts {
	return pathCounts{s.directBatches.Load(), s.dedupBatches.Load(), s.directConflicts.Load()}
}

func TestPGStoreInsertFresh(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		stored []int // indexes of evs stored (through Insert) beforehand
		batch  []int // indexes of evs given to InsertFresh
		want   pathCounts
	}{
		{"fresh batch takes one direct COPY", nil, span(0, 20), pathCounts{direct: 1}},
		{"a stored event sends the batch to dedup", span(0, 5), span(3, 20), pathCounts{dedup: 1, conflicts: 1}},
		{"an event twice in the batch sends it to dedup", nil, append(span(0, 20), 7), pathCounts{dedup: 1, conflicts: 1}},
		{"empty batch writes nothing", nil, nil, pathCounts{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := testPGStore(t, PGConfig{})
			evs := genEvents("f", 20, time.Now().UTC().Add(-time.Minute), time.Millisecond)
			pick := func(idx []int) []Event {
				var out []Event
				for _, i := range idx {
					out = append(out, evs[i])
				}
				return out
			}
			if err := s.Insert(ctx, pick(tt.stored)); err != nil {
				t.Fatalf("insert beforehand: %v", err)
			}
			before := s.pathCounts()
			if err := s.InsertFresh(ctx, pick(tt.batch)); err != nil {
				t.Fatalf("insert fresh: %v", err)
			}
			after := s.pathCounts()
			got := pathCounts{after.direct - before.direct, after.dedup - before.dedup, after.conflicts - before.conflicts}
			if got != tt.want {
				t.Errorf("got paths %+v, want %+v", got, tt.want)
			}
			var want []Event
			for i := range evs {
				if slices.Contains(tt.stored, i) || slices.Contains(tt.batch, i) {
					want = append(want, evs[i])
				}
			}
			assertExactlyOnce(t, s.pool, want)
		})
	}
}

func span(from, to int) []int {
	var out []int
	for i := from; i < to; i++ {
		out = append(out, i)
	}
	return out
}
