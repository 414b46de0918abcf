package abuse

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"hash"
	"strings"
	"sync"
)

// DefaultKeyPrefix is the versioned prefix of every Redis key Guard writes.
// v2 is the data model of compact logs and hash tags (docs/operations.md,
// "Upgrading"): keys under guard:v1: are no longer read and expire.
const DefaultKeyPrefix = "guard:v2:"

// hashBytes is how much of the HMAC-SHA256 a key keeps: 144 bits is far
// beyond any collision concern under a secret key and encodes to exactly
// 24 base64url characters (no padding), so keys stay short.
const hashBytes = 18

// hashLen is the length of an encoded hash in a key.
const hashLen = 24

// dimIndex numbers the dimensions in canonical order (policy.Dimensions).
type dimIndex uint8

const (
	dimUser dimIndex = iota
	dimIP
	dimDevice
	dimUserIP
	dimUserDevice
	dimPhone
	dimPhoneCountry
	dimPhonePrefix
	numDims
	// dimAddr tags the pseudonym of a full (not aggregated) IP address in
	// the audit trail; it never names a Redis key.
	dimAddr
)

func parseDim(s string) (dimIndex, bool) {
	for i, d := range Dimensions {
		if d == s {
			return dimIndex(i), true
		}
	}
	return 0, false
}

func (d dimIndex) String() string {
	if d < numDims {
		return Dimensions[d]
	}
	return "addr"
}

// keyer turns identities into keyed hashes and hashes into Redis keys.
// Raw identifiers never reach Redis: every key ends in an HMAC-SHA256 of the
// dimension and its components under the configured secret.
type keyer struct {
	prefix string
	macs   sync.Pool // of *macState; HMAC state is costly to rebuild
}

// macState is a reusable HMAC with its scratch space, so hashing an
// identity allocates only the resulting string.
type macState struct {
	mac hash.Hash
	buf []byte
	out []byte
}

func newKeyer(secret []byte, prefix string) *keyer {
	k := &keyer{prefix: prefix}
	key := append([]byte(nil), secret...)
	k.macs.New = func() any {
		return &macState{
			mac: hmac.New(sha256.New, key),
			buf: make([]byte, 0, 2+4+MaxUserBytes+17+4+MaxDeviceBytes),
			out: make([]byte, 0, sha256.Size),
		}
	}
	return k
}

// hashTag is the byte that names dimension d in a hash input. The values
// are frozen: changing one would change every key and pseudonym of d
// (dimAddr keeps 6, its value before the phone dimensions were numbered).
func hashTag(d dimIndex) byte {
	switch d {
	case dimAddr:
		return 6
	case dimPhone:
		return 'p'
	case dimPhoneCountry:
		return 'c'
	case dimPhonePrefix:
		return 'x'
	}
	return byte(d)
}

// sum hashes one dimension's identity. The input is unambiguous: a tag byte
// for the dimension, then each component either length-prefixed (user,
// device, the phone dimensions' values) or at a fixed width (an address as
// 16 bytes plus its prefix length), so no two (dimension, components)
// pairs share an input.
func (k *keyer) sum(id *identity, d dimIndex) string {
	st := k.macs.Get().(*macState)
	defer k.macs.Put(st)
	b := append(st.buf[:0], 'g', hashTag(d))
	if d == dimUser || d == dimUserIP || d == dimUserDevice {
		b = binary.BigEndian.AppendUint32(b, uint32(len(id.user)))
		b = append(b, id.user...)
	}
	if d == dimIP || d == dimUserIP {
		a := id.ipNet.Addr().As16()
		b = append(b, a[:]...)
		b = append(b, byte(id.ipNet.Bits()+ipv4Offset(id)))
	}
	if d == dimAddr {
		a := id.ip.As16()
		b = append(b, a[:]...)
		b = append(b, 255)
	}
	if d == dimDevice || d == dimUserDevice {
		b = binary.BigEndian.AppendUint32(b, uint32(len(id.device)))
		b = append(b, id.device...)
	}
	if isPhoneDim(d) {
		v := id.phoneValue(d)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	st.buf = b[:0]
	st.mac.Reset()
	st.mac.Write(b)
	sum := st.mac.Sum(st.out[:0])
	var enc [hashLen]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:hashBytes])
	return string(enc[:])
}

// ipv4Offset keeps an IPv4 /32 and the IPv6 network ::ffff:a.b.c.d/32 apart.
func ipv4Offset(id *identity) int {
	if id.ipNet.Addr().Is4() {
		return 128
	}
	return 0
}

// hash returns the identity's hash for dimension d, computing it once.
// The caller makes sure the dimension's components are present.
func (k *keyer) hash(id *identity, d dimIndex) string {
	if id.hashes[d] == "" {
		id.hashes[d] = k.sum(id, d)
	}
	return id.hashes[d]
}

// Redis keys. Every key of an identity starts "<prefix>{<tag>}" with the
// tag the hash of its first component: the user for user, user+ip and
// user+device keys, else the IP or the device. So on Redis Cluster the
// keys of one user (its logs, locks, failure logs and trusted devices) share
// a slot and are decided by one script, a user's lock and the trust record
// that spares it are always together, and load spreads over slots by
// identity, never onto one hot key. Composite keys end in their own hash.
// The phone dimensions tag their keys with their own hash: a phone_country
// key is one key per country, by design shared by every request from that
// country (docs/redis.md, "Hot keys").
//
//	log          <prefix>{<tag>}l:<rule>[:<hash>]
//	failure log  <prefix>{<tag>}f:<rule>[:<hash>]
//	lock record  <prefix>{<tag>}k:<ledger>:<dimension>[:<hash>]
//	trust record <prefix>{<user>}t:<hash of user+device>
//	reservation  <prefix>{<tag>}r:<action>:<decision_id> (reserve_failures; the
//	             tag of the failure logs it remembers, see recordKeys)
//	lock index   <prefix>{<hash>}x (the locks that involve one identity)
//	sign-ins     <prefix>{<hash>}s (a client address's refused review
//	             sign-ins, see signInKey)

// tagDim is the dimension whose hash tags d's keys.
func tagDim(d dimIndex) dimIndex {
	switch d {
	case dimUserIP, dimUserDevice:
		return dimUser
	}
	return d
}

// key builds the key of kind (e.g. "l:login/ip") for id's dimension d.
func (k *keyer) key(kind string, id *identity, d dimIndex) string {
	tag := k.hash(id, tagDim(d))
	if tagDim(d) == d {
		return k.prefix + "{" + tag + "}" + kind
	}
	return k.prefix + "{" + tag + "}" + kind + ":" + k.hash(id, d)
}

// logKind is "l:<rule>"; failKind "f:<rule>"; lockKind
// "k:<ledger>:<dimension>".
func logKind(rule string) string                { return "l:" + rule }
func failKind(rule string) string               { return "f:" + rule }
func pendingKind(rule string) string            { return "q:" + rule }
func lockKind(ledger string, d dimIndex) string { return "k:" + ledger + ":" + d.String() }

// manualKind is lockKind with "!m": a manual lockout's record, beside (and
// in the slot of) the struck record of the same key, and matched by the
// same listing patterns.
func manualKind(ledger string, d dimIndex) string { return lockKind(ledger, d) + "!m" }
func (k *keyer) indexKey(hash string) string      { return k.prefix + "{" + hash + "}x" }
func (k *keyer) trustKey(id *identity) string     { return k.key("t", id, dimUserDevice) }

// lockPattern matches every lock record key of ledger and dimension ("" for
// any), for listings without an identifier.
func (k *keyer) lockPattern(ledger string, d dimIndex, anyDim bool) string {
	p := k.prefix + "{*}k:"
	switch {
	case ledger == "":
		p += "*"
		if !anyDim {
			p += ":" + d.String() + "*"
		}
	case anyDim:
		p += ledger + ":*"
	default:
		p += ledger + ":" + d.String() + "*"
	}
	return p
}

// seal makes a store cursor opaque and tamper-evident for clients:
// base64url(cursor) "." base64url(first 12 bytes of an HMAC of it), the
// HMAC input tagged 'c' so it never equals an identity's hash input.
func (k *keyer) seal(cursor string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(cursor)) + "." + k.cursorMAC(cursor)
}

// open returns the cursor seal made, or false for any other string.
func (k *keyer) open(sealed string) (string, bool) {
	enc, mac, ok := strings.Cut(sealed, ".")
	if !ok {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !hmac.Equal([]byte(mac), []byte(k.cursorMAC(string(raw)))) {
		return "", false
	}
	return string(raw), true
}

func (k *keyer) cursorMAC(cursor string) string { return k.tagged('c', cursor, 12) }

// signInKey is the log of a client address's refused review sign-ins
// (abuse.SignInBlocked): "<prefix>{<hash>}s", the hash's input tagged 's'
// so it equals no identity's or cursor's, and the key shares no slot with
// any identity's.
func (k *keyer) signInKey(client string) string {
	return k.prefix + "{" + k.tagged('s', client, hashBytes) + "}s"
}

// tagged is base64url of the first n bytes of an HMAC of tag and s.
func (k *keyer) tagged(tag byte, s string, n int) string {
	st := k.macs.Get().(*macState)
	defer k.macs.Put(st)
	st.mac.Reset()
	st.mac.Write([]byte{tag})
	st.mac.Write([]byte(s))
	sum := st.mac.Sum(st.out[:0])
	return base64.RawURLEncoding.EncodeToString(sum[:n])
}

// lockIndexes are the lockout index keys of a lock of dimension d: one per
// component identity present.
func (k *keyer) lockIndexes(id *identity, d dimIndex) []string {
	var out []string
	if id.hasUser && (d == dimUser || d == dimUserIP || d == dimUserDevice) {
		out = append(out, k.indexKey(k.hash(id, dimUser)))
	}
	if id.hasIP && (d == dimIP || d == dimUserIP) {
		out = append(out, k.indexKey(k.hash(id, dimIP)))
	}
	if id.hasDevice && (d == dimDevice || d == dimUserDevice) {
		out = append(out, k.indexKey(k.hash(id, dimDevice)))
	}
	if id.hasPhone && isPhoneDim(d) {
		out = append(out, k.indexKey(k.hash(id, d)))
	}
	return out
}

// lockInfo is what a lock record carries so listings can filter by
// identifier without raw identifiers in Redis:
// "<ledger>|<dimension>|<user hash>|<ip hash>|<device hash>", a hash empty
// when the dimension lacks that component; a phone dimension's lock adds
// "|<hash of the phone, country or prefix>" (records of the other
// dimensions keep the five fields they always had).
func (k *keyer) lockInfo(ledger string, d dimIndex, id *identity) string {
	if isPhoneDim(d) {
		var ph string
		if id.hasPhone {
			ph = k.hash(id, d)
		}
		return ledger + "|" + d.String() + "||||" + ph
	}
	var uh, ih, dh string
	if id.hasUser && (d == dimUser || d == dimUserIP || d == dimUserDevice) {
		uh = k.hash(id, dimUser)
	}
	if id.hasIP && (d == dimIP || d == dimUserIP) {
		ih = k.hash(id, dimIP)
	}
	if id.hasDevice && (d == dimDevice || d == dimUserDevice) {
		dh = k.hash(id, dimDevice)
	}
	return ledger + "|" + d.String() + "|" + uh + "|" + ih + "|" + dh
}

// parsedInfo is a decoded lockInfo.
type parsedInfo struct {
	ledger string
	dim    dimIndex
	// user, ip and device are the component hashes, "" when absent;
	// phone is the hash of a phone dimension's value.
	user, ip, device, phone string
}

func parseLockInfo(info string) (parsedInfo, bool) {
	parts := strings.Split(info, "|")
	if len(parts) != 5 && len(parts) != 6 {
		return parsedInfo{}, false
	}
	d, ok := parseDim(parts[1])
	if !ok || parts[0] == "" || (len(parts) == 6) != isPhoneDim(d) {
		return parsedInfo{}, false
	}
	p := parsedInfo{ledger: parts[0], dim: d, user: parts[2], ip: parts[3], device: parts[4]}
	if len(parts) == 6 {
		p.phone = parts[5]
	}
	return p, true
}
