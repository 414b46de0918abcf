package sdk

import (
	"context"
	"net/http"
	"testing"
)

// BenchmarkNewCheckRequest builds the HTTP request of one check: URL,
// body and headers (no I/O).
func BenchmarkNewCheckRequest(b *testing.B) {
	c := New("http://127.0.0.1:8080", "k-bench-0000000001")
	user, ip := "user123@example.com", "10.0.1.123"
	ctx := context.Background()
	for b.Loop() {
		req := CheckRequest{Action: "login", User: &user, IP: &ip}
		if _, err := c.newRequest(ctx, call{method: http.MethodPost, path: "/v1/check", body: appendCheckRequest(make([]byte, 0, 128), &req)}); err != nil {
			b.Fatal(err)
		}
	}
}
