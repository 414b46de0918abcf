package abuse

import (
	"net/netip"
	"strings"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/unicode/norm"
)

// Identifier bounds.
const (
	// MaxUserBytes bounds a user identifier after normalisation.
	MaxUserBytes = 256
	// MaxDeviceBytes bounds a device identifier.
	MaxDeviceBytes = 128
	// DefaultIPv6Prefix is the prefix length IPv6 addresses are aggregated
	// to for limiting: one host usually owns a whole /64.
	DefaultIPv6Prefix = 64
)

// maxRawBytes bounds identifier input before normalisation, surrounding
// white space aside (trimming is cheap and the contract's bound is on the
// normalised form), so a hostile caller cannot make NFKC expand megabytes
// (the API bounds bodies too).
const maxRawBytes = 4096

// NormalizeUser returns the canonical form of a user identifier: surrounding
// white space trimmed, Unicode NFKC, full case folding (so "ß" and "ss" are
// one user), NFKC again and trimmed again, so "Alice@Example.COM",
// " alice@example.com" and the full-width "ＡＬＩＣＥ@example.com" are the
// same user. The input must be valid UTF-8 without NUL and the result 1 to
// MaxUserBytes bytes; otherwise the error is an *InputError with field "user".
func NormalizeUser(raw string) (string, error) {
	if err := checkText("user", raw); err != nil {
		return "", err
	}
	s := strings.TrimSpace(raw)
	if isASCIILowerOrDigit(s) {
		// The common case (already-canonical e-mail addresses) needs none
		// of the Unicode machinery; it is its own fixed point.
		return lengthCheckedUser(s)
	}
	// Folding can change what NFKC produces and vice versa; two rounds reach
	// the fixed point for everything the fuzz target has found, and a third
	// guards the rest so equal users always yield equal keys.
	for range 3 {
		next := foldOnce(s)
		if next == s {
			break
		}
		s = next
	}
	return lengthCheckedUser(s)
}

func foldOnce(s string) string {
	s = norm.NFKC.String(s)
	s = strings.Map(foldCherokee, cases.Fold().String(s))
	s = norm.NFKC.String(s)
	return strings.TrimSpace(s)
}

// foldCherokee corrects what cases.Fold makes of Cherokee
// (golang/go#46101): CaseFolding.txt folds the small letters (U+AB70 to
// U+ABBF, U+13F8 to U+13FD) to the capitals, which were encoded first and
// fold to themselves, but cases.Fold maps each form to the other, so "Ꭰ"
// and "ꭰ" were two users and neither a fixed point. Every other code
// point folds as CaseFolding.txt says.
func foldCherokee(r rune) rune {
	switch {
	case 0xAB70 <= r && r <= 0xABBF:
		return r - 0xAB70 + 0x13A0
	case 0x13F8 <= r && r <= 0x13FD:
		return r - 8
	}
	return r
}

func lengthCheckedUser(s string) (string, error) {
	switch {
	case s == "":
		return "", &InputError{Code: CodeInvalidRequest, Field: "user", Message: "user is empty after normalisation"}
	case len(s) > MaxUserBytes:
		return "", &InputError{Code: CodeInvalidRequest, Field: "user", Message: "user is longer than 256 bytes after normalisation"}
	case strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s):
		// Unreachable for valid input, but keys must never see it.
		return "", &InputError{Code: CodeInvalidRequest, Field: "user", Message: "user normalises to invalid text"}
	}
	return s, nil
}

// isASCIILowerOrDigit reports whether s holds only ASCII bytes that NFKC and
// case folding leave unchanged and that are not white space.
func isASCIILowerOrDigit(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 || ('A' <= c && c <= 'Z') || c <= ' ' || c == 0x7f {
			return false
		}
	}
	return true
}

// NormalizeDevice validates a device identifier. Devices are opaque and
// case-sensitive, so the value is returned unchanged; it must be 1 to
// MaxDeviceBytes bytes of valid UTF-8 without NUL, else the error is an
// *InputError with field "device".
func NormalizeDevice(raw string) (string, error) {
	if err := checkText("device", raw); err != nil {
		return "", err
	}
	switch {
	case raw == "":
		return "", &InputError{Code: CodeInvalidRequest, Field: "device", Message: "device is empty"}
	case len(raw) > MaxDeviceBytes:
		return "", &InputError{Code: CodeInvalidRequest, Field: "device", Message: "device is longer than 128 bytes"}
	}
	return raw, nil
}

// ParseIP parses an IPv4 or IPv6 address as sent by a caller. IPv4-mapped
// IPv6 addresses become IPv4. Zones ("fe80::1%eth0"), IPv4 octets with
// leading zeros, surrounding white space and anything else that is not an
// address are rejected with an *InputError with field "ip". The canonical
// text of the result (what the audit trail keeps) is its String().
func ParseIP(raw string) (netip.Addr, error) {
	if err := checkText("ip", raw); err != nil {
		return netip.Addr{}, err
	}
	if raw == "" {
		return netip.Addr{}, &InputError{Code: CodeInvalidRequest, Field: "ip", Message: "ip is empty"}
	}
	addr, err := netip.ParseAddr(raw)
	if err != nil {
		return netip.Addr{}, &InputError{Code: CodeInvalidRequest, Field: "ip", Message: "ip is not a valid IPv4 or IPv6 address"}
	}
	if addr.Zone() != "" {
		return netip.Addr{}, &InputError{Code: CodeInvalidRequest, Field: "ip", Message: "ip must not carry an IPv6 zone"}
	}
	return addr.Unmap(), nil
}

// AggregateIP returns the network an address is limited as: the address
// itself (a /32) for IPv4, its /ipv6Prefix network for IPv6.
func AggregateIP(addr netip.Addr, ipv6Prefix int) netip.Prefix {
	if addr.Is4() {
		return netip.PrefixFrom(addr, 32)
	}
	p, err := addr.Prefix(ipv6Prefix)
	if err != nil {
		// Only an invalid addr or length gets here; New validates the
		// length and ParseIP the address.
		return netip.PrefixFrom(addr, 128)
	}
	return p
}

func checkText(field, raw string) error {
	switch {
	case len(raw) > maxRawBytes && len(strings.TrimSpace(raw)) > maxRawBytes:
		return &InputError{Code: CodeInvalidRequest, Field: field, Message: field + " is too long"}
	case !utf8.ValidString(raw):
		return &InputError{Code: CodeInvalidRequest, Field: field, Message: field + " is not valid UTF-8"}
	case strings.IndexByte(raw, 0) >= 0:
		return &InputError{Code: CodeInvalidRequest, Field: field, Message: field + " must not contain NUL"}
	}
	return nil
}

// identity is a request's normalised subject plus its lazily computed keyed
// hashes, one per dimension, so each is computed at most once per request.
type identity struct {
	user, device       string
	hasUser, hasDevice bool
	hasIP              bool
	ip                 netip.Addr   // canonical, as sent (audit)
	ipNet              netip.Prefix // aggregated (limiting)
	phone              phoneID
	hasPhone           bool
	hashes             [numDims]string
}

// normalizeSubject normalises the identifiers that are present. It does not
// require any of them.
func normalizeSubject(s Subject, ipv6Prefix int) (identity, error) {
	var id identity
	if s.User != nil {
		u, err := NormalizeUser(*s.User)
		if err != nil {
			return id, err
		}
		id.user, id.hasUser = u, true
	}
	if s.IP != nil {
		a, err := ParseIP(*s.IP)
		if err != nil {
			return id, err
		}
		id.ip, id.ipNet, id.hasIP = a, AggregateIP(a, ipv6Prefix), true
	}
	if s.Device != nil {
		d, err := NormalizeDevice(*s.Device)
		if err != nil {
			return id, err
		}
		id.device, id.hasDevice = d, true
	}
	return id, nil
}

func (id *identity) empty() bool { return !id.hasUser && !id.hasIP && !id.hasDevice && !id.hasPhone }

// has reports whether every component of dimension d is present.
func (id *identity) has(d dimIndex) bool {
	switch d {
	case dimUser:
		return id.hasUser
	case dimIP:
		return id.hasIP
	case dimDevice:
		return id.hasDevice
	case dimUserIP:
		return id.hasUser && id.hasIP
	case dimUserDevice:
		return id.hasUser && id.hasDevice
	case dimPhone, dimPhoneCountry, dimPhonePrefix:
		return id.hasPhone
	}
	return false
}
