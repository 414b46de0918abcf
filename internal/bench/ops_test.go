package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestWarmUp(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name    string
		op      func(i int) error
		wantErr string
	}{
		{"degraded, then answers", func(i int) error {
			if i < 3 {
				return ErrDegraded
			}
			return nil
		}, ""},
		{"a real error ends it", func(int) error { return boom }, "warm-up: boom"},
		{"degraded past the deadline", func(int) error { return ErrDegraded }, "warm-up: degraded answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				err := WarmUp(context.Background(), func(_ context.Context, _, i int) error { return tt.op(i) }, time.Second)
				if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
					t.Errorf("WarmUp() = %v, want error %q", err, tt.wantErr)
				}
			})
		})
	}
}

func TestSubjectSpreadsOverKeys(t *testing.T) {
	seen := map[string]string{}
	for i := range 100 {
		user, ip := Subject(10, 1, i)
		if prev, ok := seen[user]; ok && prev != ip {
			t.Fatalf("user %s came with IPs %s and %s, want one IP per user", user, prev, ip)
		}
		seen[user] = ip
	}
	if got, want := len(seen), 10; got != want {
		t.Errorf("distinct users = %d, want %d", got, want)
	}
}
