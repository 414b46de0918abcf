package abuse

import (
	"strings"
	"testing"
)

func testIdentity(t *testing.T, user, ip, device string) identity {
	t.Helper()
	var s Subject
	if user != "" {
		s.User = &user
	}
	if ip != "" {
		s.IP = &ip
	}
	if device != "" {
		s.Device = &device
	}
	id, err := normalizeSubject(s, DefaultIPv6Prefix)
	if err != nil {
		t.Fatalf("normalizeSubject: %v", err)
	}
	return id
}

func TestKeyHashes(t *testing.T) {
	k := newKeyer([]byte("0123456789abcdef-secret"), DefaultKeyPrefix)
	other := newKeyer([]byte("another-secret-0123456789"), DefaultKeyPrefix)
	alice := testIdentity(t, "Alice@Example.com", "2001:db8::1", "d1")
	alice2 := testIdentity(t, "alice@example.com", "2001:db8::ffff", "d1") // same /64
	bob := testIdentity(t, "bob@example.com", "2001:db8:0:1::1", "d1")

	seen := map[string]string{}
	for d := range numDims {
		h := k.hash(&alice, d)
		if len(h) != hashLen {
			t.Errorf("hash(%s) = %q: length %d; want %d", d, h, len(h), hashLen)
		}
		if prev, dup := seen[h]; dup {
			t.Errorf("dimensions %s and %s share hash %s", prev, d, h)
		}
		seen[h] = d.String()
		if got := k.hash(&alice2, d); got != h {
			t.Errorf("hash(%s) differs for the same user and /64: %s vs %s", d, got, h)
		}
		if got := other.sum(&alice, d); got == h {
			t.Errorf("hash(%s) does not depend on the secret", d)
		}
	}
	tests := []struct {
		dim  dimIndex
		same bool
	}{{dimUser, false}, {dimIP, false}, {dimDevice, true}, {dimUserIP, false}, {dimUserDevice, false}}
	for _, tt := range tests {
		if got := k.hash(&bob, tt.dim) == k.hash(&alice, tt.dim); got != tt.same {
			t.Errorf("alice and bob share the %s hash: %v; want %v", tt.dim, got, tt.same)
		}
	}
	// IPv4 and the IPv4-mapped form are one address.
	v4 := testIdentity(t, "", "203.0.113.7", "")
	mapped := testIdentity(t, "", "::ffff:203.0.113.7", "")
	if k.hash(&v4, dimIP) != k.hash(&mapped, dimIP) {
		t.Errorf("IPv4 and IPv4-mapped hash apart")
	}
	// A user containing what looks like a separator cannot collide with a
	// user+device pair.
	a := testIdentity(t, "a", "", "bc")
	b := testIdentity(t, "ab", "", "c")
	if k.hash(&a, dimUserDevice) == k.hash(&b, dimUserDevice) {
		t.Errorf("user+device hash is ambiguous")
	}
}

func TestKeyFormats(t *testing.T) {
	k := newKeyer([]byte("0123456789abcdef-secret"), "guard:test:")
	id := testIdentity(t, "alice@example.com", "203.0.113.7", "d-1")
	h := k.hash(&id, dimUserIP)
	u, ip := k.hash(&id, dimUser), k.hash(&id, dimIP)
	for _, tt := range []struct{ name, got, want string }{
		{"log", k.key(logKind("login/ip"), &id, dimIP), "guard:test:{" + ip + "}l:login/ip"},
		{"user log", k.key(logKind("login/user"), &id, dimUser), "guard:test:{" + u + "}l:login/user"},
		{"fail", k.key(failKind("login/user+ip/failures"), &id, dimUserIP), "guard:test:{" + u + "}f:login/user+ip/failures:" + h},
		{"lock", k.key(lockKind("auth", dimUserIP), &id, dimUserIP), "guard:test:{" + u + "}k:auth:user+ip:" + h},
		{"trust", k.trustKey(&id), "guard:test:{" + u + "}t:" + k.hash(&id, dimUserDevice)},
		{"index", k.indexKey(ip), "guard:test:{" + ip + "}x"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s key = %q; want %q", tt.name, tt.got, tt.want)
		}
		for _, raw := range []string{"alice", "203.0.113.7", "d-1"} {
			if strings.Contains(tt.got, raw) {
				t.Errorf("%s key %q contains the raw identifier %q", tt.name, tt.got, raw)
			}
		}
	}
	info := k.lockInfo("auth", dimUserIP, &id)
	p, ok := parseLockInfo(info)
	if !ok || p.ledger != "auth" || p.dim != dimUserIP || p.user != k.hash(&id, dimUser) || p.ip != k.hash(&id, dimIP) || p.device != "" {
		t.Errorf("parseLockInfo(%q) = %+v, %v; want ledger auth, user+ip, user and ip hashes", info, p, ok)
	}
	if len(info) > 512 {
		t.Errorf("lock info is %d bytes; the store allows 512", len(info))
	}
}

func BenchmarkKeyHash(b *testing.B) {
	k := newKeyer([]byte("0123456789abcdef-secret"), DefaultKeyPrefix)
	user := "alice@example.com"
	id, _ := normalizeSubject(Subject{User: &user}, DefaultIPv6Prefix)
	b.ReportAllocs()
	for b.Loop() {
		_ = k.sum(&id, dimUser)
	}
}

// TestCursorSeal: sealed cursors open; any change is refused.
func TestCursorSeal(t *testing.T) {
	k := newKeyer([]byte("0123456789abcdef-secret"), "guard:test:")
	other := newKeyer([]byte("0123456789abcdef-other"), "guard:test:")
	sealed := k.seal("s0:1234:5")
	if got, ok := k.open(sealed); !ok || got != "s0:1234:5" {
		t.Errorf("open(seal) = %q, %v", got, ok)
	}
	for _, bad := range []string{"", "x", sealed + "x", "A" + sealed, other.seal("s0:1234:5"), k.seal("s0:1234:5")[:10]} {
		if got, ok := k.open(bad); ok {
			t.Errorf("open(%q) = %q, true; want refused", bad, got)
		}
	}
}
