package sdk_test

import (
	"errors"
	"testing"
	"time"

	"github.com/guardhq/guard/sdk"
)

func TestVerifyWebhook(t *testing.T) {
	secret := []byte("whsec-test")
	body := []byte(`{"id":"01JD","event":"lockout"}`)
	signedAt := time.Unix(1764586800, 0)
	good := sdk.SignWebhook(secret, signedAt, body)
	if want := "t=1764586800,v1="; good[:len(want)] != want || len(good) != len(want)+64 {
		t.Fatalf("SignWebhook = %q, want t=<seconds>,v1=<64 hex digits>", good)
	}
	other := sdk.SignWebhook([]byte("old-secret"), signedAt, body)
	tests := []struct {
		name   string
		secret []byte
		header string
		body   []byte
		now    time.Time
		tol    time.Duration
		want   error
	}{
		{"valid", secret, good, body, signedAt.Add(time.Minute), 0, nil},
		{"valid at the tolerance", secret, good, body, signedAt.Add(-5 * time.Minute), 0, nil},
		{"rotation: one of two matches", secret, other + ",v1=" + good[len("t=1764586800,v1="):], body, signedAt, 0, nil},
		{"spaces", secret, "t=1764586800, v1=" + good[len("t=1764586800,v1="):], body, signedAt, 0, nil},
		{"wrong secret", []byte("nope"), good, body, signedAt, 0, sdk.ErrSignatureMismatch},
		{"body changed", secret, good, []byte(`{"id":"01JD","event":"unlock"}`), signedAt, 0, sdk.ErrSignatureMismatch},
		{"timestamp changed", secret, "t=1764586801" + good[len("t=1764586800"):], body, signedAt, 0, sdk.ErrSignatureMismatch},
		{"replayed later", secret, good, body, signedAt.Add(6 * time.Minute), 0, sdk.ErrSignatureExpired},
		{"from the future", secret, good, body, signedAt.Add(-6 * time.Minute), 0, sdk.ErrSignatureExpired},
		{"own tolerance", secret, good, body, signedAt.Add(31 * time.Second), 30 * time.Second, sdk.ErrSignatureExpired},
		{"empty header", secret, "", body, signedAt, 0, sdk.ErrSignatureMissing},
		{"no v1", secret, "t=1764586800", body, signedAt, 0, sdk.ErrSignatureMissing},
		{"no t", secret, good[len("t=1764586800,"):], body, signedAt, 0, sdk.ErrSignatureMissing},
		{"t not a number", secret, "t=soon,v1=00", body, signedAt, 0, sdk.ErrSignatureMissing},
		{"v1 not hex", secret, "t=1764586800,v1=zz", body, signedAt, 0, sdk.ErrSignatureMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := sdk.VerifyWebhook(tt.secret, tt.header, tt.body, tt.now, tt.tol)
			if tt.want == nil && got != nil || tt.want != nil && !errors.Is(got, tt.want) {
				t.Errorf("VerifyWebhook = %v, want %v", got, tt.want)
			}
		})
	}
}
