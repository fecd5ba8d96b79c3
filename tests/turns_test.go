package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/turns"
)

// Two Clients, each with its own pools, take turns on one name on five
// redis-server nodes, for each kind of lock: once the holder's Unlock
// has returned, and once the other's refused call has, nothing of
// theirs is left on a node that answered, so the next turn's call takes
// the name at once (internal/turns). 300 turns per kind; make turns
// runs 5,000.
func TestTurns(t *testing.T) {
	n, err := turns.Count(300)
	require.NoError(t, err)
	e := newEnv(t, 5)
	for _, k := range turns.Kinds {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			a := newClient(t, newPools(t, e.addrs))
			b := newClient(t, newPools(t, e.addrs))
			require.NoError(t, turns.Run(ctxT(t, time.Hour), k, a, b, newKey(t), n))
		})
	}
}
