package bench

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestRun(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		op      Op
		wantErr string
		check   func(t *testing.T, r Result)
	}{
		{"all succeed", func(context.Context, int, int) error { return nil }, "", func(t *testing.T, r Result) {
			if r.Ops == 0 || r.Errors != 0 || r.Degraded != 0 || r.Rate() <= 0 || r.P99 < r.P50 {
				t.Errorf("result = %+v, want operations, no errors, p99 >= p50", r)
			}
		}},
		{"degraded counted apart", func(_ context.Context, _, i int) error {
			if i%2 == 0 {
				return ErrDegraded
			}
			return nil
		}, "", func(t *testing.T, r Result) {
			if r.Degraded == 0 || r.Ops == 0 {
				t.Errorf("result = %+v, want both degraded and counted operations", r)
			}
		}},
		{"all degraded", func(context.Context, int, int) error { return ErrDegraded }, "", func(t *testing.T, r Result) {
			if r.Ops != 0 || r.Degraded == 0 || r.Rate() != 0 {
				t.Errorf("result = %+v, want no rate, only degraded", r)
			}
		}},
		{"all fail", func(context.Context, int, int) error { return boom }, "no operation succeeded: boom", nil},
		{"too many fail", func(_ context.Context, _, i int) error {
			if i%10 == 0 {
				return boom
			}
			return nil
		}, "operations failed, first: boom", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Run(context.Background(), tt.name, 20*time.Millisecond, 2, tt.op)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Run = %+v, %v; want an error containing %q", r, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			tt.check(t, r)
		})
	}
}

func TestRunUsesEveryWorker(t *testing.T) {
	var seen [4]atomic.Bool
	_, err := Run(context.Background(), "w", 20*time.Millisecond, len(seen), func(_ context.Context, w, _ int) error {
		seen[w].Store(true)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for w := range seen {
		if !seen[w].Load() {
			t.Errorf("worker %d never ran", w)
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b bytes.Buffer
	err := WriteTable(&b, []Result{
		{Name: "check", Ops: 2000, Elapsed: time.Second, P50: time.Millisecond, P99: 3 * time.Millisecond},
		{Name: "http", Ops: 1000, Elapsed: time.Second, Degraded: 4},
	}, "check")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vs check", "2000", "1.000ms", "3.000ms", "1.00x", "0.50x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
