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
const DefaultKeyPrefix = "guard:v1:"

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
	// cursorKey signs lockout listing cursors; derived from the secret so
	// a cursor is valid on every instance sharing it.
	cursorKey []byte
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
	cm := hmac.New(sha256.New, key)
	cm.Write([]byte("guard lockout cursor v1"))
	k.cursorKey = cm.Sum(nil)
	k.macs.New = func() any {
		return &macState{
			mac: hmac.New(sha256.New, key),
			buf: make([]byte, 0, 2+4+MaxUserBytes+17+4+MaxDeviceBytes),
			out: make([]byte, 0, sha256.Size),
		}
	}
	return k
}

// sum hashes one dimension's identity. The input is unambiguous: a tag byte
// for the dimension, then each component either length-prefixed (user,
// device) or at a fixed width (an address as 16 bytes plus its prefix
// length), so no two (dimension, components) pairs share an input.
func (k *keyer) sum(id *identity, d dimIndex) string {
	st := k.macs.Get().(*macState)
	defer k.macs.Put(st)
	b := append(st.buf[:0], 'g', byte(d))
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

// logKeyPrefix is "<prefix>log:<rule>:"; the hash is appended per request.
func (k *keyer) logKeyPrefix(rule string) string { return k.prefix + "log:" + rule + ":" }

// failKeyPrefix is "<prefix>fail:<rule>:".
func (k *keyer) failKeyPrefix(rule string) string { return k.prefix + "fail:" + rule + ":" }

// lockKeyPrefix is "<prefix>lock:<ledger>:<dimension>:".
func (k *keyer) lockKeyPrefix(ledger string, d dimIndex) string {
	return k.prefix + "lock:" + ledger + ":" + d.String() + ":"
}

// manualLockKeyPrefix is "<prefix>mlock:<ledger>:<dimension>:": the
// record of a manual lockout, beside the struck record of the same key.
func (k *keyer) manualLockKeyPrefix(ledger string, d dimIndex) string {
	return k.prefix + "mlock:" + ledger + ":" + d.String() + ":"
}

// trustKey is "<prefix>trust:<hash of user+device>".
func (k *keyer) trustKey(id *identity) string {
	return k.prefix + "trust:" + k.hash(id, dimUserDevice)
}

// lockInfo is what a lock record carries so listings can filter by
// identifier without raw identifiers in Redis:
// "<ledger>|<dimension>|<user hash>|<ip hash>|<device hash>", a hash empty
// when the dimension lacks that component.
func (k *keyer) lockInfo(ledger string, d dimIndex, id *identity) string {
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
	// user, ip and device are the component hashes, "" when absent.
	user, ip, device string
}

func parseLockInfo(info string) (parsedInfo, bool) {
	parts := strings.Split(info, "|")
	if len(parts) != 5 {
		return parsedInfo{}, false
	}
	d, ok := parseDim(parts[1])
	if !ok || parts[0] == "" {
		return parsedInfo{}, false
	}
	return parsedInfo{ledger: parts[0], dim: d, user: parts[2], ip: parts[3], device: parts[4]}, true
}
