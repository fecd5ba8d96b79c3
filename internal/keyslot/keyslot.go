// Package keyslot names keys by Redis Cluster's hash slots: the slot of a
// key, a short hash tag for every slot, and the names of a lock key's
// helper keys in the lock key's slot. The redlock package names its keys
// with it (redlock/keys.go); tests use it to find those keys.
package keyslot

import (
	"strings"
	"sync"
)

// Helper returns the name of key's helper key name: in key's Redis
// Cluster hash slot, and starting with key where it can (so that ACL key
// patterns written for the lock keys cover it):
//   - a key with a hash tag ("{user1}:lock") keeps it: key + ":" + name;
//   - a key without '{' gets a tag of its slot (Tag) after it:
//     key + ":{" + tag + "}" + name ("lock:7:{2qq}waiters");
//   - any other key ("a{b", "{}x": a '{' but no tag) is hashed whole, and
//     a tag placed after it would pair with its own '{': the tag goes
//     first, "{" + tag + "}" + key + ":" + name.
func Helper(key, name string) string {
	if _, ok := HashTag(key); ok {
		return key + ":" + name
	}
	tag := Tag(Slot(key))
	if !strings.Contains(key, "{") {
		return key + ":{" + tag + "}" + name
	}
	return "{" + tag + "}" + key + ":" + name
}

// HashTag returns the part of key that Redis Cluster hashes when it is
// not the whole key: what lies between the first '{' and the first '}'
// after it, when that is not empty.
func HashTag(key string) (string, bool) {
	open := strings.IndexByte(key, '{')
	if open < 0 {
		return "", false
	}
	n := strings.IndexByte(key[open+1:], '}')
	if n <= 0 {
		return "", false
	}
	return key[open+1 : open+1+n], true
}

// Slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of its
// hash tag, or of the whole key, modulo 16384.
func Slot(key string) uint16 {
	if tag, ok := HashTag(key); ok {
		key = tag
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with, a byte at a time.
func crc16[T string | []byte](s T) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^s[i]]
	}
	return crc
}

// crcTable holds the CRC of each byte value, shifted in bit by bit.
var crcTable = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

// Tag returns a short string whose hash slot is slot: the first, by
// length then by value, of the strings of base-36 digits ("0".."z",
// "00"..."zz", ...). The table of all 16384 is built on first use, from
// about 170,000 checksums.
func Tag(slot uint16) string {
	slotTags.once.Do(buildSlotTags)
	return slotTags.tags[slot%16384]
}

var slotTags struct {
	once sync.Once
	tags [16384]string
}

func buildSlotTags() {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyz"
	found := 0
	var buf [8]byte
	for n := 1; found < len(slotTags.tags); n++ {
		idx := make([]int, n) // the digits of the candidate, most significant first
		for {
			for k, d := range idx {
				buf[k] = digits[d]
			}
			if t := &slotTags.tags[crc16(buf[:n])%16384]; *t == "" {
				*t = string(buf[:n])
				found++
			}
			k := n - 1
			for ; k >= 0 && idx[k] == len(digits)-1; k-- {
				idx[k] = 0
			}
			if k < 0 {
				break // every string of length n was tried
			}
			idx[k]++
		}
	}
}
