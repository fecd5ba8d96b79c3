package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// On real nodes: Inspect sees a lock, its holder, its TTL and its queue;
// ForceRelease hands the key to the waiting Lock call, and the holder
// learns of the loss at its next extension.
func TestForceRelease_handsTheKeyToTheWaiterAndInspectSeesIt(t *testing.T) {
	e := newEnv(t, 5)
	key := newKey(t)
	holder, waiter, operator := e.client(), e.client(), e.client()
	held, err := holder.TryLock(ctxT(t, quickly), key, longTTL, redlock.WithFencing())
	require.NoError(t, err)

	got := make(chan *redlock.Lock, 1)
	go func() {
		l, err := waiter.Lock(ctxT(t, 10*time.Second), key, longTTL)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	var in *redlock.Inspection
	require.Eventually(t, func() bool {
		in, err = operator.Inspect(ctxT(t, quickly), key)
		require.NoError(t, err)
		queued, settled := 0, 0
		for _, n := range in.Nodes {
			queued += n.Queued
			if n.Held && n.Fence == held.Fence() {
				settled++ // the acquisition and its fence reached this node too
			}
		}
		return queued >= 5 && settled == 5
	}, 5*time.Second, 5*time.Millisecond, "the waiter is queued on every node, and the holder's round settled")
	who, ok := in.HeldBy()
	require.True(t, ok)
	require.Equal(t, holder.ID(), who)
	for _, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.True(t, n.Held, n.Addr)
		require.NotEqual(t, operator.ID(), n.Holder, "the operator's Client is not the holder")
		require.Greater(t, n.TTL, longTTL-5*time.Second)
		require.LessOrEqual(t, n.TTL, longTTL)
		require.Equal(t, held.Fence(), n.Fence)
	}

	require.NoError(t, operator.ForceRelease(ctxT(t, quickly), key))
	l := <-got
	require.NotNil(t, l, "the waiter got the key")
	in, err = waiter.Inspect(ctxT(t, quickly), key)
	require.NoError(t, err)
	who, ok = in.HeldBy()
	require.True(t, ok)
	require.Equal(t, waiter.ID(), who)
	mine := 0
	for _, n := range in.Nodes {
		if n.Holder == waiter.ID() {
			mine++
		}
	}
	require.GreaterOrEqual(t, mine, 3)

	require.ErrorIs(t, held.Extend(ctxT(t, quickly), longTTL), redlock.ErrLockLost)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
}
