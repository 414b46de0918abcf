package audit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkAuditThroughput compares, in one run against the same Postgres
// and the same rows, a raw COPY into audit_events (the server's ceiling, on
// one connection and on two at once), PGStore.Insert (COPY into staging +
// INSERT ... ON CONFLICT DO NOTHING), PGStore.InsertFresh (plain COPY) and
// the whole Writer path (Record → batch → InsertFresh, two batches in
// flight): once with the default queue, which a Record loop outruns so
// most events overflow to the spool and are replayed from it, and once
// with a queue holding every event (the live path only). One op is one
// event; the rows/s metric is what docs/performance.md reports.
func BenchmarkAuditThroughput(b *testing.B) {
	ctx := context.Background()
	run := 0
	rows := func(b *testing.B) []Event {
		run++
		evs := genEvents(fmt.Sprintf("b%d-%d-", time.Now().UnixNano(), run), b.N, time.Now().UTC().Add(-time.Hour), time.Microsecond*50)
		for i := range evs {
			evs[i].DecisionID = evs[i].ID
			evs[i].Rule = "login/ip"
			evs[i].DryRun = ptr(false)
			evs[i].Degraded = ptr(false)
		}
		return evs
	}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rows/s")
	}
	const batch = 1000

	b.Run("raw_copy", func(b *testing.B) {
		s := testPGStore(b, PGConfig{})
		evs := rows(b)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < len(evs); i += batch {
			chunk := evs[i:min(i+batch, len(evs))]
			_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"audit_events"}, eventColumns,
				pgx.CopyFromSlice(len(chunk), func(j int) ([]any, error) { return eventRow(normalize(chunk[j])), nil }))
			if err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("raw_copy_2conn", func(b *testing.B) {
		s := testPGStore(b, PGConfig{})
		evs := rows(b)
		b.ResetTimer()
		start := time.Now()
		chunks := make(chan []Event)
		errs := make(chan error, 2)
		for range 2 {
			go func() {
				for chunk := range chunks {
					_, err := s.pool.CopyFrom(ctx, pgx.Identifier{"audit_events"}, eventColumns,
						pgx.CopyFromSlice(len(chunk), func(j int) ([]any, error) { return eventRow(normalize(chunk[j])), nil }))
					if err != nil {
						errs <- err
						for range chunks {
						}
						return
					}
				}
				errs <- nil
			}()
		}
		for i := 0; i < len(evs); i += batch {
			chunks <- evs[i:min(i+batch, len(evs))]
		}
		close(chunks)
		for range 2 {
			if err := <-errs; err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("store_insert", func(b *testing.B) {
		s := testPGStore(b, PGConfig{})
		evs := rows(b)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < len(evs); i += batch {
			if err := s.Insert(ctx, evs[i:min(i+batch, len(evs))]); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	b.Run("store_insert_fresh", func(b *testing.B) {
		s := testPGStore(b, PGConfig{})
		evs := rows(b)
		b.ResetTimer()
		start := time.Now()
		for i := 0; i < len(evs); i += batch {
			if err := s.InsertFresh(ctx, evs[i:min(i+batch, len(evs))]); err != nil {
				b.Fatal(err)
			}
		}
		report(b, start)
	})
	writer := func(b *testing.B, cfg WriterConfig) {
		s := testPGStore(b, PGConfig{})
		evs := rows(b)
		cfg.SpoolDir = b.TempDir()
		w, err := NewWriter(discardLogger(), cfg, s, WriterHooks{})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		for _, e := range evs {
			w.Record(e)
		}
		if err := w.Close(ctx); err != nil {
			b.Fatal(err)
		}
		report(b, start)
		if st := w.Stats(); st.Dropped != 0 || st.Written != uint64(b.N) {
			b.Fatalf("got written %d dropped %d, want %d written", st.Written, st.Dropped, b.N)
		}
	}
	b.Run("writer", func(b *testing.B) { writer(b, WriterConfig{}) })
	b.Run("writer_live", func(b *testing.B) { writer(b, WriterConfig{QueueSize: b.N}) })
}

// BenchmarkRecord is the decision path's cost of auditing: one Record call.
func BenchmarkRecord(b *testing.B) {
	w, err := NewWriter(discardLogger(), WriterConfig{}, NewMemoryStore(1000), WriterHooks{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close(context.Background())
	e := genEvents("r", 1, time.Now(), 0)[0]
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			e.ID = strconv.Itoa(i)
			i++
			w.Record(e)
		}
	})
}

// BenchmarkMemoryStoreInsertFull is a writer batch of 100 events into a
// MemoryStore at its default capacity (100k events), where every insert
// evicts as many as it adds. One op is one batch. "out of order" shuffles
// the events in windows of 500, as decisions of one millisecond from many
// goroutines arrive: each lands up to a few batches behind the newest.
func BenchmarkMemoryStoreInsertFull(b *testing.B) {
	for _, tc := range []struct {
		name    string
		shuffle bool
	}{{"in order", false}, {"out of order", true}} {
		b.Run(tc.name, func(b *testing.B) {
			s := NewMemoryStore(0)
			start := time.Now().UTC()
			if err := s.Insert(context.Background(), genEvents("w", DefaultMemoryMax, start, time.Microsecond)); err != nil {
				b.Fatal(err)
			}
			const batch = 100
			gen := func(prefix string, from time.Time) []Event {
				evs := genEvents(prefix, batch*1000, from, time.Microsecond)
				if tc.shuffle {
					rng := rand.New(rand.NewPCG(1, 2))
					for w := 0; w < len(evs); w += 500 {
						win := evs[w:min(w+500, len(evs))]
						rng.Shuffle(len(win), func(i, j int) { win[i], win[j] = win[j], win[i] })
					}
				}
				return evs
			}
			evs := gen("n", start.Add(time.Second))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				j := i % 1000 * batch
				if i > 0 && j == 0 { // used up: new events, past everything held
					b.StopTimer()
					evs = gen(fmt.Sprintf("n%d-", i), start.Add(time.Duration(i)*time.Second))
					b.StartTimer()
				}
				if err := s.Insert(context.Background(), evs[j:j+batch]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
