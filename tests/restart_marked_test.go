package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// A Client that extended a lock past the maximum TTL waits that longer
// TTL out on a node that restarted empty, even once another Client, whose
// bound is the shorter maximum TTL, has waited its own bound and marked
// the node: the mark made the node count at once, and the same key was
// granted again while the extended lock was valid (found by the
// simulator, seed 38: three nodes restarted empty under a lock extended to
// 12s, granted again 7s later).
func TestRestartSafety_anotherClientsMarkDoesNotShortenALongerWait(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	const maxTTL = time.Second
	key := newKey(t)
	a := e.client(redlock.WithRestartSafety(maxTTL))
	b := e.client(redlock.WithRestartSafety(maxTTL))
	held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	require.NoError(t, held.Extend(ctxT(t, 10*time.Second), longTTL))
	restartEmpty(t, e, 0, 1, 2)

	// b waits out its bound and marks the restarted nodes: its TryLocks
	// on other keys succeed once they count again.
	deadline := time.Now().Add(10 * maxTTL)
	for {
		l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
		if err == nil {
			_ = l.Unlock(ctxT(t, 10*time.Second))
			break
		}
		require.True(t, time.Now().Before(deadline), "b never counted the restarted nodes: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	for _, i := range []int{0, 1, 2} {
		require.Eventually(t, func() bool {
			v, ok := get(t, e.nodes[i], "redlock:node")
			if !ok || v == "" {
				// b marks a node once a call of its counts it.
				if l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL); err == nil {
					_ = l.Unlock(ctxT(t, 10*time.Second))
				}
				return false
			}
			return true
		}, 5*time.Second, 20*time.Millisecond, "node %d is not marked", i)
	}

	second, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	if err == nil {
		_ = second.Unlock(ctxT(t, 10*time.Second))
	}
	require.ErrorIs(t, err, redlock.ErrNotAcquired,
		"the key was granted again while the extended lock holds it for another %v", held.Validity())
	require.Positive(t, held.Validity())
	qe := asQuorumError(t, err)
	excluded := 0
	for _, i := range []int{0, 1, 2} {
		if errors.Is(qe.Nodes[i].Err, redlock.ErrNodeRestarted) {
			excluded++
		}
	}
	require.Positive(t, excluded, "no restarted node is excluded: %s", statuses(qe))
}
