package backtest

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/guardhq/guard/internal/abuse"
	"github.com/guardhq/guard/internal/audit"
	"github.com/guardhq/guard/internal/testenv"
)

// synthetic generates n events of a day's traffic without holding them:
// 50,000 users on 20,000 addresses, a check every 86.4 ms (1M a day), and
// after every third check a report (one in four of them a failure) naming
// its decision_id.
type synthetic struct{ n int }

func (s synthetic) each(fn func(audit.Event) error) error {
	t0 := day
	step := 24 * time.Hour / time.Duration(max(s.n, 1))
	var lastCheck string
	for i := range s.n {
		e := audit.Event{ID: fmt.Sprintf("e%09d", i), At: t0.Add(time.Duration(i) * step).Truncate(time.Millisecond),
			Action: "login", User: fmt.Sprintf("user%d@example.com", (i*7919)%50000),
			IP: fmt.Sprintf("10.%d.%d.%d", (i%20000)/65536, (i%20000)/256%256, i%256)}
		if i%4 == 3 {
			e.Kind, e.DecisionID = audit.KindReport, lastCheck
			e.Outcome = "success"
			if i%16 == 3 {
				e.Outcome = "failure"
			}
		} else {
			e.Kind, e.Decision, e.Reason, e.DecisionID = audit.KindCheck, "allow", "ok", e.ID
			e.DryRun = new(bool)
			lastCheck = e.ID
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (s synthetic) Replay(_ context.Context, _ audit.ReplayFilter, fn func(audit.Event) error) error {
	return s.each(fn)
}

// peakHeap samples the heap in use while a replay runs.
type peakHeap struct{ max uint64 }

func (p *peakHeap) sample(n int64) {
	if n%100_000 != 0 {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	p.max = max(p.max, ms.HeapInuse)
}

func benchReplay(b *testing.B, src Source, n int) {
	cfg := Config{Guard: abuse.Config{Policy: abuse.DefaultPolicy()}}
	f := audit.ReplayFilter{Since: day, Until: day.Add(24 * time.Hour)}
	var peak peakHeap
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime()
	for range b.N {
		rep, err := Run(context.Background(), src, f, cfg, peak.sample)
		if err != nil {
			b.Fatal(err)
		}
		if got := rep.Actions["login"].Replayed; got != int64(n) {
			b.Fatalf("replayed %d, want %d", got, n)
		}
	}
	b.ReportMetric(float64(n*b.N)/time.Since(start).Seconds(), "events/s")
	if cpu := cpuTime() - cpu0; cpu > 0 {
		// Postgres's own CPU is not in it (another process).
		b.ReportMetric(float64(n*b.N)/cpu.Seconds(), "events/cpu-s")
	}
	b.ReportMetric(float64(peak.max)/(1<<20), "peak-heap-MiB")
}

// BenchmarkReplay1MInMemory is the replay alone: 1M generated events
// through the default policy, no database.
func BenchmarkReplay1MInMemory(b *testing.B) {
	benchReplay(b, synthetic{n: 1_000_000}, 1_000_000)
}

// BenchmarkReplay1MPostgres is `guard backtest` without the printing: 1M
// events written to a fresh Postgres (untimed), then streamed back in
// keyset pages over the read-only connection and replayed.
func BenchmarkReplay1MPostgres(b *testing.B) {
	const n = 1_000_000
	ctx := context.Background()
	url := testenv.Database(b, "guard_backtest_bench_")
	if _, _, err := audit.Migrate(ctx, url, audit.MigrateUp); err != nil {
		b.Fatal(err)
	}
	pg, err := audit.OpenPostgres(ctx, nil, audit.PostgresConfig{URL: url})
	if err != nil {
		b.Fatal(err)
	}
	batch := make([]audit.Event, 0, 10_000)
	write := func() {
		if err := pg.InsertFresh(ctx, batch); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	_ = synthetic{n: n}.each(func(e audit.Event) error {
		if batch = append(batch, e); len(batch) == cap(batch) {
			write()
		}
		return nil
	})
	write()
	pg.Close()
	src, err := audit.OpenReplay(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	benchReplay(b, src, n)
}
