package limits

import "strings"

// Redis Cluster places a key by CRC16 (XMODEM) of its hash tag (the part
// between the first '{' and the next '}', when not empty) or of the whole
// key, modulo 16384. go-redis computes the same internally but does not
// export it; the store needs it to group one decision's keys by slot.

const clusterSlots = 16384

var crc16Table = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crc16Table[byte(c>>8)^s[i]]
	}
	return c
}

// keySlot is the Redis Cluster slot of key.
func keySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % clusterSlots)
}
