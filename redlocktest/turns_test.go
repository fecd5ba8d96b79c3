package redlocktest_test

import (
	"context"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/turns"
	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlocktest"
)

// turnsPerKind is how many turns each kind takes: REDLOCK_TURNS, or
// 2,000 (make turns runs 100,000).
func turnsPerKind(t *testing.T) int {
	if s := os.Getenv("REDLOCK_TURNS"); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, "REDLOCK_TURNS")
		return n
	}
	return 2000
}

// Two Clients take turns on one name, for each kind of lock: once the
// holder's Unlock has returned, and once the other's refused call has,
// nothing of theirs is left on a node that answered, so the next turn's
// call takes the name at once (internal/turns).
func TestTurns(t *testing.T) {
	n := turnsPerKind(t)
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
