// Package bench measures an operation the way `guard bench` reports it:
// repeated by concurrent workers for a fixed time, as operations per second
// and p50/p99 latency, with answers that came from a fallback (a degraded
// Guard) counted apart rather than mixed into the rate.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// ErrDegraded is what an operation returns when its answer came from a
// fallback (Redis missed the budget): counted in Result.Degraded, left out
// of the rate and the latencies.
var ErrDegraded = errors.New("degraded answer")

// Op is one operation; w is the worker's index, i its iteration counter.
type Op func(ctx context.Context, w, i int) error

// Result is one measured run.
type Result struct {
	Name string
	// Ops counts the operations that succeeded (not degraded).
	Ops int
	// Errors and Degraded count the others.
	Errors, Degraded int
	Elapsed          time.Duration
	P50, P99         time.Duration
}

// Rate is successful operations per second.
func (r Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Ops) / r.Elapsed.Seconds()
}

// Run repeats op from concurrency workers for d (each worker at least
// once). It fails when no
// operation succeeded, or when more than 1% of them failed (not counting
// degraded answers); a run whose every answer was degraded is a Result
// without a rate.
func Run(ctx context.Context, name string, d time.Duration, concurrency int, op Op) (Result, error) {
	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu        sync.Mutex
		latencies []time.Duration
		errs      int
		degraded  int
		firstErr  error
		wg        sync.WaitGroup
	)
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			local := make([]time.Duration, 0, 4096)
			var nerr, ndeg int
			var ferr error
			// Every worker runs at least once, however late it starts.
			for i := 0; i == 0 || runCtx.Err() == nil; i++ {
				t0 := time.Now()
				err := op(ctx, w, i)
				switch {
				case errors.Is(err, ErrDegraded):
					ndeg++
				case err != nil:
					nerr++
					if ferr == nil {
						ferr = err
					}
				default:
					local = append(local, time.Since(t0))
				}
			}
			mu.Lock()
			latencies = append(latencies, local...)
			errs += nerr
			degraded += ndeg
			if firstErr == nil {
				firstErr = ferr
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}
	if len(latencies) == 0 && degraded == 0 {
		return Result{}, fmt.Errorf("no operation succeeded: %v", firstErr)
	}
	if len(latencies) == 0 {
		// Every answer came from the fallback: report that, not a rate.
		return Result{Name: name, Errors: errs, Degraded: degraded, Elapsed: elapsed}, nil
	}
	if errs > len(latencies)/100 {
		return Result{}, fmt.Errorf("%d of %d operations failed, first: %v", errs, errs+len(latencies), firstErr)
	}
	slices.Sort(latencies)
	pct := func(p float64) time.Duration { return latencies[int(p*float64(len(latencies)-1))] }
	return Result{Name: name, Ops: len(latencies), Errors: errs, Degraded: degraded, Elapsed: elapsed,
		P50: pct(0.50), P99: pct(0.99)}, nil
}

// WriteTable prints results as aligned columns, with each rate relative to
// the result named base ("-" when there is none).
func WriteTable(w io.Writer, results []Result, base string) error {
	var baseRate float64
	for _, r := range results {
		if r.Name == base {
			baseRate = r.Rate()
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tdecisions/s\tp50\tp99\tvs "+base+"\terrors\tdegraded\t")
	for _, r := range results {
		ratio := "-"
		if baseRate > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Rate()/baseRate)
		}
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%d\t%d\t\n", r.Name, r.Rate(), ms(r.P50), ms(r.P99), ratio, r.Errors, r.Degraded)
	}
	return tw.Flush()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3fms", float64(d)/float64(time.Millisecond)) }
