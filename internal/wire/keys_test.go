package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// The names are shared with every process that locks the same keys:
// they must not change (docs/operations.md has the table).
func TestKeys_namesAreTheWireNames(t *testing.T) {
	require.Equal(t, "k:{k}queue", WaitersKey("k"), "the shortest tag of k's slot is k")
	require.Equal(t, "k:{k}queue:c.1", EntryKey("k", "c.1"))
	require.Equal(t, "k:{k}fence", FenceKey("k"))
	require.Equal(t, "{user1}:lock:queue", WaitersKey("{user1}:lock"), "a key's own hash tag is kept")
	require.Equal(t, "{user1}:lock:queue:c.1", EntryKey("{user1}:lock", "c.1"))
	require.Equal(t, "{user1}:lock:fence", FenceKey("{user1}:lock"))
	require.Equal(t, "redlock:epoch:{k}", EpochKey(keyslot.Slot("k")))
	require.Equal(t, "redlock:epoch:{k}:fence", FloorKey(keyslot.Slot("k")), "fence_read.lua builds it from the epoch key")
	require.Equal(t, "redlock:node", MarkerKey)
	require.Equal(t, "redlock:released:k", ReleaseChannel("k"))
	require.Equal(t, "redlock:handoff:c:k", HandoffChannel("c", "k"))
	require.Equal(t, "redlock:reserved:c.1", Reservation("c.1"))
	require.Equal(t, "e:{e}election", ElectionKey("e"))
	require.Equal(t, "e:{e}leader", LeaderKey("e"))
	require.Equal(t, "redlock:released:e:{e}leader", LeaderChannel("e"))
	require.Equal(t, "{g}:e:election:fence", FenceKey(ElectionKey("{g}:e")), "the election key's helpers share its slot")
}

// The scripts build no name of their own, except the queue's and the
// fence floor: every name comes from keys.go, and the constants and the
// names they build are those of keys.go.
func TestKeys_scriptsHoldNoNames(t *testing.T) {
	built := map[string]bool{ // the only lines that may build a name
		`local reservedPrefix = "` + ReservedPrefix + `"`:                                  true,
		`local handoffPrefix = "` + HandoffPrefix + `"`:                                    true,
		`local releasedPrefix = "` + ReleasedPrefix + `"`:                                  true,
		`local rwMarker = "` + RWMarker + `"`:                                              true,
		`local entry = queue .. ":" .. id`:                                                 true, // EntryKey
		`local ch = handoffPrefix .. (string.match(id, "^([^.]*)%.") or "") .. ":" .. key`: true, // HandoffChannel
		`local f = redis.call("GET", epochKey .. ":fence") or "0"`:                         true, // FloorKey
	}
	seen := map[string]bool{}
	for _, s := range Scripts {
		for _, line := range strings.Split(s.Source, "\n") {
			code, _, _ := strings.Cut(line, "--")
			code = strings.TrimSpace(code)
			if built[code] {
				seen[code] = true
				continue
			}
			require.NotRegexp(t, `"redlock:\S`, code, "%s: a name built in a script: %s", s.Name, line)
			require.NotContains(t, code, `":`, "%s: a name built in a script: %s", s.Name, line)
			require.NotContains(t, code, "KEYS[1] ..", "%s: a name built in a script: %s", s.Name, line)
		}
	}
	require.Len(t, seen, len(built), "the queue's scripts name keys.go's constants as they are")
	require.Contains(t, giveUpSource, "releasedPrefix .. key", "ReleaseChannel")
	require.Equal(t, ReleasedPrefix+"k", ReleaseChannel("k"))
	require.Equal(t, HandoffPrefix+"c"+":"+"k", HandoffChannel("c", "k"))
}
