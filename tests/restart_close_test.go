package tests

import (
	"regexp"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// A Client closed right after its first lock on a new deployment, while
// one node had not answered the restart check yet, cancelled that check:
// the node was never marked, and every other Client then took it for a
// node that restarted empty and left it out of every quorum for the
// maximum TTL (a CLI run that takes one lock and exits did it; so did a
// test's short-lived Clients on Valkey). Close now gives a check under
// way up to the node timeout to land its mark.
func TestRestartSafety_aClientClosedRightAfterItsFirstLockLeavesEveryNodeMarked(t *testing.T) {
	e := newEnv(t, 5)
	require.NoError(t, e.nodes[4].Pause())
	t.Cleanup(func() { _ = e.nodes[4].Resume() })

	a := e.client(redlock.WithRestartSafety(time.Minute))
	l, err := a.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second)
	require.NoError(t, err)
	require.NotNil(t, l)
	resumed := make(chan error, 1)
	go func() {
		time.Sleep(150 * time.Millisecond) // Close has begun
		resumed <- e.nodes[4].Resume()
	}()
	require.NoError(t, a.Close())
	require.NoError(t, <-resumed)

	info, err := redis.String(e.nodes[4].Do("INFO", "server"))
	require.NoError(t, err)
	runID := regexp.MustCompile(`run_id:(\w+)`).FindStringSubmatch(info)
	require.Len(t, runID, 2)
	require.Equal(t, runID[1], wire.ParseMarker(marker(t, e.nodes[4])).RunID, "node 4 was left unmarked")

	// Another Client counts node 4: with the key held on nodes 0 and 1,
	// it needs nodes 2, 3 and 4.
	key := newKey(t)
	holdForeign(t, e.nodes, key, 0, 1)
	b := e.client(redlock.WithRestartSafety(time.Minute))
	l, err = b.TryLock(ctxT(t, 10*time.Second), key, time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}
