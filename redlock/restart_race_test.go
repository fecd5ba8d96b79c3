package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// markedPool answers the restart check at once, as a node marked with its
// own run id: it counts.
type markedPool struct{ brokenOncePool }

func (p *markedPool) Eval(context.Context, *pool.Script, ...any) (any, error) {
	p.calls.Add(1)
	return markedReply, nil
}

// A grant from an unchecked node starts a check and waits for it. When
// that check ended before the grant looked whether one was under way (a
// fast node, a busy machine), the grant was refused as unchecked although
// the check had just counted the node: a fresh Client's first lock failed
// now and then with "node not checked for a restart yet". It looks at the
// node's view again instead.
func TestCountAt_aCheckThatEndsAtOnceCounts(t *testing.T) {
	c, err := New([]pool.Pool{&markedPool{}}, WithRestartSafety(time.Minute))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	c.rs.settled.Store(true) // one node's check, not every node's
	for n := range 3000 {
		c.rs.views[0].Store(nil)
		wait, err := c.countAt(0, 0, true)
		require.True(t, wait || err == nil, "try %d: not waiting, and %v", n, err)
		for deadline := time.Now().Add(5 * time.Second); c.checkUnderWay(0); {
			require.True(t, time.Now().Before(deadline), "try %d: the check did not end", n)
			time.Sleep(10 * time.Microsecond)
		}
		_, err = c.countAt(0, 0, false)
		require.NoError(t, err, "try %d", n)
	}
}

// WithVerifiedGrants verifies grants by restart safety's check: without
// restart safety it is refused, naming both options.
func TestWithVerifiedGrants_needsRestartSafety(t *testing.T) {
	_, err := New([]pool.Pool{&markedPool{}}, WithVerifiedGrants(), WithRestartSafety(0))
	require.ErrorContains(t, err, "WithVerifiedGrants needs restart safety")
	require.ErrorContains(t, err, "WithRestartSafety(0)")
	c, err := New([]pool.Pool{&markedPool{}}, WithVerifiedGrants())
	require.NoError(t, err)
	require.NoError(t, c.Close())
}
