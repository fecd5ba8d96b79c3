package redlock

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The names are shared with every process that locks the same keys,
// older versions included: they must not change.
func TestKeys_namesAreTheWireNames(t *testing.T) {
	require.Equal(t, "k:waiters", waitersKey("k"))
	require.Equal(t, "k:waiters:until", entriesKey("k"))
	require.Equal(t, "k:fence", fenceKey("k"))
	require.Equal(t, "redlock:epoch", epochKey)
	require.Equal(t, "redlock:node", markerKey)
	require.Equal(t, "redlock:released:k", releaseChannel("k"))
	require.Equal(t, "redlock:handoff:c:k", handoffChannel("c", "k"))
	require.Equal(t, "redlock:reserved:c.1", reservation("c.1"))
}

// The scripts build no name of their own: every name comes from keys.go.
func TestKeys_scriptsHoldNoNames(t *testing.T) {
	for _, src := range []string{queueSource, acquireSource, releaseSource, releaseFreeSource,
		extendSource, fenceStoreSource, nodeSource} {
		for _, line := range strings.Split(src, "\n") {
			code, _, _ := strings.Cut(line, "--")
			require.NotRegexp(t, `"redlock:\S`, code, "a name built in a script: %s", line)
			require.NotContains(t, code, `":`, "a name built in a script: %s", line)
			require.NotContains(t, code, "KEYS[1] ..", "a name built in a script: %s", line)
		}
	}
}
