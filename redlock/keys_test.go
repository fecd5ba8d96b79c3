package redlock

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// The names are shared with every process that locks the same keys:
// they must not change (docs/operations.md has the table).
func TestKeys_namesAreTheWireNames(t *testing.T) {
	require.Equal(t, "k:{k}waiters", waitersKey("k"), "the shortest tag of k's slot is k")
	require.Equal(t, "k:{k}waiters:until", entriesKey("k"))
	require.Equal(t, "k:{k}fence", fenceKey("k"))
	require.Equal(t, "{user1}:lock:waiters", waitersKey("{user1}:lock"), "a key's own hash tag is kept")
	require.Equal(t, "{user1}:lock:fence", fenceKey("{user1}:lock"))
	require.Equal(t, "redlock:epoch:{k}", epochKey(keyslot.Slot("k")))
	require.Equal(t, "redlock:node", markerKey)
	require.Equal(t, "redlock:released:k", releaseChannel("k"))
	require.Equal(t, "redlock:handoff:c:k", handoffChannel("c", "k"))
	require.Equal(t, "redlock:reserved:c.1", reservation("c.1"))
}

// The scripts build no name of their own: every name comes from keys.go.
func TestKeys_scriptsHoldNoNames(t *testing.T) {
	for _, src := range []string{queueSource, acquireSource, releaseSource, releaseFreeSource,
		extendSource, fenceStoreSource, nodeSource, inspectSource, forceReleaseSource,
		multiAcquireSource, multiExtendSource, multiReleaseSource} {
		for _, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			require.NotRegexp(t, `"redlock:\S`, code, "a name built in a script: %s", line)
			require.NotContains(t, code, `":`, "a name built in a script: %s", line)
			require.NotContains(t, code, "KEYS[1] ..", "a name built in a script: %s", line)
		}
	}
}
