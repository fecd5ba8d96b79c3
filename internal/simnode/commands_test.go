package simnode

import (
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
)

// Every command the library's scripts call is one the simulated node
// runs: a script that calls another fails on it, and the simulation then
// tests a lock that does not work (a read-write lock's release called
// HVALS, which failed on every simulated node).
func TestNode_runsEveryCommandTheScriptsCall(t *testing.T) {
	called := regexp.MustCompile(`redis\.p?call\("([A-Za-z]+)"`)
	for _, s := range wire.Scripts {
		for _, m := range called.FindAllStringSubmatch(s.Source, -1) {
			name := strings.ToUpper(m[1])
			_, engine := arities[name]
			_, store := commands[name]
			require.True(t, engine || store, "script %s calls %s, which the simulated node does not run", s.Name, name)
		}
	}
}
