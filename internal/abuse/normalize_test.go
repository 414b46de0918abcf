package abuse

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestNormalizeUser(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		err  bool
	}{
		{name: "canonical ascii", in: "alice@example.com", want: "alice@example.com"},
		{name: "upper case", in: "Alice@Example.COM", want: "alice@example.com"},
		{name: "surrounding white space", in: " \t alice@example.com \n", want: "alice@example.com"},
		{name: "ideographic space", in: "\u3000alice\u3000", want: "alice"},
		{name: "full width", in: "ＡＬＩＣＥ@example.com", want: "alice@example.com"},
		{name: "sharp s folds to ss", in: "Straße", want: "strasse"},
		{name: "ss stays ss", in: "STRASSE", want: "strasse"},
		{name: "capital sharp s", in: "STRAẞE", want: "strasse"},
		{name: "ligature", in: "ﬁle", want: "file"},
		{name: "final sigma folds", in: "ΟΔΟΣ", want: "οδοσ"},
		{name: "composed and decomposed e acute", in: "Jose\u0301", want: "josé"},
		{name: "kelvin sign", in: "\u212a", want: "k"},
		// CaseFolding.txt folds Cherokee small letters to the capitals,
		// which fold to themselves (the capitals were encoded first).
		{name: "cherokee capital a", in: "\u13a0", want: "\u13a0"},
		{name: "cherokee small a", in: "\uab70", want: "\u13a0"},
		{name: "cherokee capital ye", in: "\u13f0", want: "\u13f0"},
		{name: "cherokee small ye", in: "\u13f8", want: "\u13f0"},
		{name: "cherokee word mixed case", in: "\u13a3\uab8f\uab7f", want: "\u13a3\u13bf\u13af"},
		{name: "inner space kept", in: "Alice Smith", want: "alice smith"},
		{name: "phone", in: " +44 7700 900123 ", want: "+44 7700 900123"},
		{name: "empty", in: "", err: true},
		{name: "only white space", in: " \t\u3000 ", err: true},
		{name: "nul", in: "ali\x00ce", err: true},
		{name: "invalid utf-8", in: "ali\xffce", err: true},
		{name: "256 bytes", in: strings.Repeat("a", 256), want: strings.Repeat("a", 256)},
		{name: "257 bytes", in: strings.Repeat("a", 257), err: true},
		{name: "257 bytes before trim", in: " " + strings.Repeat("A", 256), want: strings.Repeat("a", 256)},
		// The bound is on the normalised form: padding beyond the raw
		// bound is trimmed, not refused.
		{name: "4100 spaces of padding", in: strings.Repeat(" ", 4100) + "Zed", want: "zed"},
		{name: "over the raw bound without padding", in: strings.Repeat("a", 4097), err: true},
		{name: "expands past 256 bytes", in: strings.Repeat("ﷺ", 20), err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeUser(tt.in)
			if tt.err {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != "user" || ie.Code != CodeInvalidRequest {
					t.Fatalf("NormalizeUser(%q) = %q, %v; want an invalid_request InputError on field user", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeUser(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestNormalizeDevice(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
		err  bool
	}{
		{name: "opaque", in: "d-4f1c", want: "d-4f1c"},
		{name: "case kept", in: "D-4F1C", want: "D-4F1C"},
		{name: "spaces kept", in: " d ", want: " d "},
		{name: "128 bytes", in: strings.Repeat("x", 128), want: strings.Repeat("x", 128)},
		{name: "129 bytes", in: strings.Repeat("x", 129), err: true},
		{name: "empty", in: "", err: true},
		{name: "nul", in: "d\x00", err: true},
		{name: "invalid utf-8", in: "\xc3(", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NormalizeDevice(tt.in)
			if tt.err {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != "device" {
					t.Fatalf("NormalizeDevice(%q) = %q, %v; want an InputError on field device", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("NormalizeDevice(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseIP(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		canonical string
		aggregate string
		err       bool
	}{
		{name: "ipv4", in: "203.0.113.7", canonical: "203.0.113.7", aggregate: "203.0.113.7/32"},
		{name: "ipv4-mapped", in: "::ffff:203.0.113.7", canonical: "203.0.113.7", aggregate: "203.0.113.7/32"},
		{name: "ipv4-mapped hex", in: "::ffff:cb00:7107", canonical: "203.0.113.7", aggregate: "203.0.113.7/32"},
		{name: "ipv6 to /64", in: "2001:db8:1:2:3:4:5:6", canonical: "2001:db8:1:2:3:4:5:6", aggregate: "2001:db8:1:2::/64"},
		{name: "ipv6 canonical text", in: "2001:0DB8:0000::0001", canonical: "2001:db8::1", aggregate: "2001:db8::/64"},
		{name: "zone", in: "fe80::1%eth0", err: true},
		{name: "leading zero", in: "192.168.01.1", err: true},
		{name: "octal-looking", in: "010.0.0.1", err: true},
		{name: "white space", in: " 203.0.113.7", err: true},
		{name: "cidr", in: "203.0.113.0/24", err: true},
		{name: "hostname", in: "localhost", err: true},
		{name: "empty", in: "", err: true},
		{name: "nul", in: "1.2.3.4\x00", err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIP(tt.in)
			if tt.err {
				var ie *InputError
				if !errors.As(err, &ie) || ie.Field != "ip" {
					t.Fatalf("ParseIP(%q) = %v, %v; want an InputError on field ip", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseIP(%q): %v", tt.in, err)
			}
			if got.String() != tt.canonical {
				t.Errorf("ParseIP(%q) = %s; want %s", tt.in, got, tt.canonical)
			}
			if agg := AggregateIP(got, DefaultIPv6Prefix).String(); agg != tt.aggregate {
				t.Errorf("AggregateIP(%s, 64) = %s; want %s", got, agg, tt.aggregate)
			}
		})
	}
}

func TestAggregateIPPrefixes(t *testing.T) {
	a := netip.MustParseAddr("2001:db8:aaaa:bbbb:cccc::1")
	for _, tt := range []struct {
		bits int
		want string
	}{{48, "2001:db8:aaaa::/48"}, {56, "2001:db8:aaaa:bb00::/56"}, {128, "2001:db8:aaaa:bbbb:cccc::1/128"}} {
		if got := AggregateIP(a, tt.bits).String(); got != tt.want {
			t.Errorf("AggregateIP(%s, %d) = %s; want %s", a, tt.bits, got, tt.want)
		}
	}
}

// FuzzNormalize checks the invariants keys depend on: a normalised user is
// a fixed point (so equal users always hash alike), bounded and clean; a
// parsed IP round-trips through its canonical text.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"alice@example.com", "Alice@Example.COM ", "ＡＬＩＣＥ", "Straße", "STRAẞE", "ﬁ", "\u0390",
		"ΟΔΟΣ", "\u00a8", "\u1e9e", "\u212b", "ǅ", "ﷺ", "\u3000x", "a\u0345\u0307", "İstanbul",
		"::ffff:1.2.3.4", "fe80::1%eth0", "192.168.01.1", "2001:db8::1", "", "\x00", "\xff",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if u, err := NormalizeUser(s); err == nil {
			if len(u) == 0 || len(u) > MaxUserBytes || !utf8.ValidString(u) || strings.IndexByte(u, 0) >= 0 {
				t.Fatalf("NormalizeUser(%q) = %q: out of bounds", s, u)
			}
			again, err := NormalizeUser(u)
			if err != nil || again != u {
				t.Fatalf("NormalizeUser not idempotent: %q -> %q -> %q, %v", s, u, again, err)
			}
		}
		if d, err := NormalizeDevice(s); err == nil && d != s {
			t.Fatalf("NormalizeDevice(%q) = %q; devices are opaque", s, d)
		}
		if a, err := ParseIP(s); err == nil {
			if a.Zone() != "" || a.Is4In6() {
				t.Fatalf("ParseIP(%q) = %v: zone or mapped address kept", s, a)
			}
			back, err := ParseIP(a.String())
			if err != nil || back != a {
				t.Fatalf("ParseIP(%q) = %v does not round-trip: %v, %v", s, a, back, err)
			}
		}
	})
}
