package api

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// endless is a request body of n bytes that counts what was read of it.
type endless struct{ n, read int64 }

func (r *endless) Read(p []byte) (int, error) {
	if r.read >= r.n {
		return 0, io.EOF
	}
	k := min(int64(len(p)), r.n-r.read)
	for i := range p[:k] {
		p[i] = 'a'
	}
	r.read += k
	return int(k), nil
}

// A review form larger than MaxFormBytes is 413 and is not read to its
// end, also on /ui/login (no key needed) and for a multipart form, whose
// file parts gin would otherwise keep in memory and on disk.
func TestUIFormTooLarge(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 1)})
	const size = 64 << 20
	tests := []struct {
		name, path, ctype, key string
		length                 int64 // Content-Length; -1 unknown (chunked)
		accept, wantCode       string
	}{
		{"multipart sign-in, length unknown", "/ui/login", "multipart/form-data; boundary=b", "", -1, "text/html", ""},
		{"url-encoded sign-in, length unknown", "/ui/login", "application/x-www-form-urlencoded", "", -1, "text/html", ""},
		{"url-encoded sign-in, length given", "/ui/login", "application/x-www-form-urlencoded", "", size, "text/html", ""},
		{"bulk unlock by a script", "/ui/lockouts/unlock-many", "multipart/form-data; boundary=b", keyAdmin, -1, "", "too_large"},
		{"manual lockout", "/ui/lockouts/lock", "application/x-www-form-urlencoded", keyAdmin, -1, "", "too_large"},
		{"sign out", "/ui/logout", "multipart/form-data; boundary=b", "", -1, "", "too_large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := &endless{n: size}
			prefix := ""
			if strings.HasPrefix(tt.ctype, "multipart/") {
				prefix = "--b\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n"
			}
			req := httptest.NewRequest("POST", tt.path, io.MultiReader(strings.NewReader(prefix), body))
			req.ContentLength = tt.length
			req.Header.Set("Content-Type", tt.ctype)
			if tt.accept != "" {
				req.Header.Set("Accept", tt.accept)
			}
			if tt.key != "" {
				req.Header.Set("Authorization", "Bearer "+tt.key)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 413 {
				t.Fatalf("status = %d; want 413 (%.200s)", w.Code, w.Body)
			}
			if body.read > MaxFormBytes+1 {
				t.Errorf("read %d bytes of the body; want at most %d", body.read, MaxFormBytes+1)
			}
			if tt.wantCode != "" {
				if code, _ := errorOf(t, w); code != tt.wantCode {
					t.Errorf("code = %q; want %q", code, tt.wantCode)
				}
			}
		})
	}
}

// A form within the limit is read as before.
func TestUIFormWithinLimit(t *testing.T) {
	h := newTestHandler(t, testConfig(), Deps{Audit: seedAudit(t, 1)})
	for _, ctype := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=b"} {
		body := "key=" + keyAudit + "&next=%2Fui%2Fevents&pad=" + strings.Repeat("x", MaxFormBytes/2)
		if strings.HasPrefix(ctype, "multipart/") {
			body = "--b\r\nContent-Disposition: form-data; name=\"key\"\r\n\r\n" + keyAudit +
				"\r\n--b\r\nContent-Disposition: form-data; name=\"next\"\r\n\r\n/ui/events" +
				"\r\n--b\r\nContent-Disposition: form-data; name=\"pad\"; filename=\"p\"\r\n\r\n" + strings.Repeat("x", MaxFormBytes/2) + "\r\n--b--\r\n"
		}
		req := httptest.NewRequest("POST", "/ui/login", strings.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 303 || w.Header().Get("Location") != "/ui/events" {
			t.Errorf("%s: status = %d, Location %q; want 303 to /ui/events (%.200s)", ctype, w.Code, w.Header().Get("Location"), w.Body)
		}
	}
}
