package redlocktest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/turns"
	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlocktest"
)

// Two Clients take turns on one name, for each kind of lock: once the
// holder's Unlock has returned, and once the other's refused call has,
// nothing of theirs is left on a node that answered, so the next turn's
// call takes the name at once (internal/turns). 2,000 turns per kind;
// make turns runs 100,000.
func TestTurns(t *testing.T) {
	n, err := turns.Count(2000)
	require.NoError(t, err)
	for _, k := range turns.Kinds {
		t.Run(k.Name, func(t *testing.T) {
			t.Parallel()
			nodes := redlocktest.New(5)
			defer nodes.Close()
			a, err := redlock.New(nodes.Pools(), slack)
			require.NoError(t, err)
			defer a.Close()
			b, err := redlock.New(nodes.Pools(), slack)
			require.NoError(t, err)
			defer b.Close()
			require.NoError(t, turns.Run(context.Background(), k, a, b, "turns", n))
		})
	}
}
