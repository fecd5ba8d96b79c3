package keyslot

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Every helper key is in its lock key's hash slot, whatever the key: with
// a hash tag, without one, with braces that make no tag.
func TestSameSlot_keepsEveryHelperKeyInTheLockKeysSlot(t *testing.T) {
	keys := []string{"k", "", "lock:orders:42", "{user1}:lock", "a{b", "a}b", "{}", "{}a", "a{}{b}", "{a}{b}", "x{", "}{", "{a", "\x00\xff{\x01}", "ünïcode"}
	for _, k := range keys {
		for _, name := range []string{Helper(k, "waiters"), Helper(k, "waiters:until"), Helper(k, "fence")} {
			require.Equal(t, Slot(k), Slot(name), "%q -> %q", k, name)
		}
		if !strings.Contains(k, "{") {
			require.True(t, strings.HasPrefix(Helper(k, "fence"), k+":"), "a key without braces starts its helpers: %q", Helper(k, "fence"))
		}
		require.Equal(t, Slot(k), Slot("redlock:epoch:{"+Tag(Slot(k))+"}"))
	}
}

// Values Redis gives for CLUSTER KEYSLOT (and the CRC16 test vector).
func TestKeySlot_isRedisClusters(t *testing.T) {
	require.Equal(t, uint16(0x31c3), crc16("123456789"))
	for k, want := range map[string]uint16{
		"foo": 12182, "bar": 5061, "{user1000}.following": 3443, "{user1000}.followers": 3443,
		"foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0,
	} {
		require.Equal(t, want, Slot(k), "%q", k)
	}
}

func TestSlotTag_coversEverySlotWithAShortTag(t *testing.T) {
	for s := range uint16(16384) {
		tag := Tag(s)
		require.NotEmpty(t, tag, "slot %d", s)
		require.LessOrEqual(t, len(tag), 4)
		require.Equal(t, s, crc16(tag)%16384)
	}
}
