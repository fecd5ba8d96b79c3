package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestTryLock_failedWhileNodesStalledLeavesNoKeyBlockingOthers(t *testing.T) {
	e := newEnv(t, 5)
	// The pools give up on a stalled node after 200ms and drop the
	// connection; the node still runs the SET it had read when it comes
	// back, long after every first release attempt timed out.
	pools := newPools(t, e.addrs, pool.WithIOTimeout(200*time.Millisecond))
	c := newClient(t, pools, redlock.WithNodeTimeout(50*time.Millisecond))
	key := newKey(t)
	stalled := []int{0, 2, 4}
	for _, i := range stalled {
		require.NoError(t, e.nodes[i].Pause())
		t.Cleanup(func() { _ = e.nodes[i].Resume() })
	}
	_, err := c.TryLock(ctxT(t, 10*time.Second), key, 30*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	time.Sleep(600 * time.Millisecond) // past the read timeout and the first releases
	for _, i := range stalled {
		require.NoError(t, e.nodes[i].Resume())
	}

	// Well before the 30s TTL, the token is gone from every node and
	// another client takes the key.
	other := newClient(t, newPools(t, e.addrs))
	require.Eventually(t, func() bool {
		for i := range e.nodes {
			if _, held := get(t, e.nodes[i], key); held {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "a failed acquisition's token stayed on the nodes that had stalled")
	l, err := other.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}
