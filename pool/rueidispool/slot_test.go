package rueidispool

import (
	"strconv"
	"testing"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// A cluster client's builder panics on keys of different slots: Eval
// answers CROSSSLOT itself instead, when oneSlot says so.
func TestOneSlot(t *testing.T) {
	for keys, want := range map[*[]string]bool{
		{}:                                  true,
		{"a"}:                               true,
		{"{acct}:7", "{acct}:3"}:            true,
		{"lock:acct:7", "lock:acct:3"}:      false,
		{"k", "k:{k}waiters", "k:{k}fence"}: true,
	} {
		if got := oneSlot(*keys); got != want {
			t.Errorf("oneSlot(%q) = %v, want %v", *keys, got, want)
		}
	}
}

// slot gives the slots Redis gives for CLUSTER KEYSLOT (and crc16 the
// CRC16 test vector).
func TestSlot_isRedisClusters(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Errorf("crc16(123456789) = %#x, want 0x31c3", got)
	}
	for k, want := range map[string]uint16{
		"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0,
	} {
		if got := slot(k); got != want {
			t.Errorf("slot(%q) = %d, want %d", k, got, want)
		}
	}
}

// slot agrees with the core's keyslot.Slot, which names the lock's keys,
// on keys with and without hash tags and on the core's own helper keys.
func TestSlot_agreesWithTheCore(t *testing.T) {
	keys := []string{"k", "", "lock:orders:42", "{user1}:lock", "a{b", "a}b", "{}", "{}a", "a{}{b}",
		"{a}{b}", "x{", "}{", "{a", "\x00\xff{\x01}", "ünïcode"}
	for _, k := range keys[:len(keys):len(keys)] {
		keys = append(keys, keyslot.Helper(k, "waiters"), keyslot.Helper(k, "fence"))
	}
	for i := range 2000 {
		keys = append(keys, "lock:"+strconv.Itoa(i), "{"+strconv.Itoa(i)+"}x", strconv.Itoa(i*7919))
	}
	for _, k := range keys {
		if got, want := slot(k), keyslot.Slot(k); got != want {
			t.Errorf("slot(%q) = %d, the core's keyslot.Slot: %d", k, got, want)
		}
	}
}
