package tests

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// A lock taken with a TTL of the maximum TTL (1s) and extended to 10s
// raises the Client's own wait for a node that restarted empty to 10s, as
// WithRestartSafety promises for a longer TTL the Client uses: after 3 of
// 5 nodes restart empty, the same Client must not grant the key again
// while the extended lock is still valid. Before the fix only an
// acquisition raised the wait, and the key was granted a second time
// about 1.3s after the Client saw the restart, with ~8s of the first
// lock's validity left.
func TestRestartSafety_anExtensionPastTheMaximumTTLRaisesTheWait(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	const maxTTL = time.Second
	key := newKey(t)
	c := e.client(redlock.WithRestartSafety(maxTTL))
	held, err := c.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	require.NoError(t, held.Extend(ctxT(t, 10*time.Second), longTTL))
	restartEmpty(t, e, 0, 1, 2)

	// The Client notices the restart at its next calls (on another key):
	// each restarted node is checked, and excluded for the wait.
	restarted := []int{0, 1, 2}
	excluded := map[int]bool{}
	var seen time.Time
	for deadline := time.Now().Add(maxTTL); len(excluded) < len(restarted); time.Sleep(10 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "the restarted nodes were not all excluded at once: %v", excluded)
		l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
		if err == nil {
			_ = l.Unlock(ctxT(t, 10*time.Second))
			continue
		}
		var qe *redlock.QuorumError
		if !errors.As(err, &qe) {
			continue
		}
		for _, i := range restarted {
			if errors.Is(qe.Nodes[i].Err, redlock.ErrNodeRestarted) {
				excluded[i] = true
			}
		}
		seen = time.Now()
	}

	// Past the wait the maximum TTL given alone sets, well within the
	// extended lock.
	time.Sleep(time.Until(seen.Add(maxTTL + 300*time.Millisecond)))
	second, err := c.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	if err == nil {
		_ = second.Unlock(ctxT(t, 10*time.Second))
	}
	require.ErrorIs(t, err, redlock.ErrNotAcquired,
		"the key was granted again while the extended lock holds it for another %v", held.Validity())
	require.Positive(t, held.Validity(), "the extended lock is still valid")
	// Refused because a restarted node is still excluded, not counted.
	qe := asQuorumError(t, err)
	named := 0
	for _, i := range restarted {
		if errors.Is(qe.Nodes[i].Err, redlock.ErrNodeRestarted) {
			named++
		}
	}
	require.Positive(t, named, "no restarted node is still excluded: %s", statuses(qe))
}
