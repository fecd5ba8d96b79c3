package rueidispool

import "strings"

// slot returns key's Redis Cluster hash slot: CRC16 (XMODEM) of its hash
// tag (what lies between the first '{' and the first '}' after it, when
// that is not empty), or of the whole key, modulo 16384. The pool needs
// nothing else of the core's key naming, so it keeps its own copy rather
// than depend on the core's internals.
func slot(key string) uint16 {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if n := strings.IndexByte(key[open+1:], '}'); n > 0 {
			key = key[open+1 : open+1+n]
		}
	}
	return crc16(key) % 16384
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0).
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
