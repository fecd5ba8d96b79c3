package tests

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestTryLock_withTwoNodesKilledStillAcquiresExtendsAndUnlocks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	killed := []int{1, 3}
	for _, i := range killed {
		require.NoError(t, e.nodes[i].Kill())
	}

	l, err := c.TryLock(ctxT(t, 10*time.Second), key, 2*time.Second)
	require.NoError(t, err)
	for _, i := range []int{0, 2, 4} {
		requireValue(t, e.nodes, i, key, l.Token())
	}

	before := l.Until()
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
	require.True(t, l.Until().After(before), "Extend did not move Until")
	for _, i := range []int{0, 2, 4} {
		require.Greater(t, pttl(t, e.nodes[i], key), longTTL/2)
	}

	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.NoError(t, c.Close())
	for _, i := range []int{0, 2, 4} {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestTryLock_withThreeNodesKilledFailsQuicklyNamingTheDeadNodes(t *testing.T) {
	e := newEnv(t, 5)
	// Restart safety off: with three nodes down, the two live nodes of this
	// new deployment cannot be told from nodes that restarted empty, and it
	// would name them too.
	c := e.client(redlock.WithNodeTimeout(500*time.Millisecond), redlock.WithRestartSafety(0))
	key := newKey(t)
	killed := []int{0, 2, 4}
	live := []int{1, 3}
	for _, i := range killed {
		require.NoError(t, e.nodes[i].Kill())
	}

	start := time.Now()
	l, err := c.TryLock(ctxT(t, 30*time.Second), key, longTTL)
	elapsed := time.Since(start)

	require.Nil(t, l)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Less(t, elapsed, quickly, "failure must not wait for the TTL")
	qe := asQuorumError(t, err)
	require.False(t, qe.Busy(), statuses(qe))
	require.Nil(t, qe.Cause)
	// The round needs all three failures to be decided.
	for _, i := range killed {
		requireNodeFailed(t, qe, i, e.addrs[i])
	}
	for _, i := range live {
		require.Contains(t, []redlock.NodeStatus{redlock.NodeOK, redlock.NodePending}, qe.Nodes[i].Status, statuses(qe))
	}
	require.Zero(t, qe.Count(redlock.NodeRefused))

	require.NoError(t, c.Close())
	for _, i := range live {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestTryLock_withTwoNodesPausedDoesNotWaitForThem(t *testing.T) {
	e := newEnv(t, 5)
	// Neither the pools' read timeout nor the node timeout ends the calls
	// to the paused nodes before the "quickly" bound: only the early
	// decision can make the calls return in time.
	const nodeTimeout = 5 * time.Second
	c := newClient(t, newPools(t, e.addrs, pool.WithIOTimeout(10*time.Second)), redlock.WithNodeTimeout(nodeTimeout))
	key := newKey(t)
	for _, i := range []int{0, 3} {
		require.NoError(t, e.nodes[i].Pause())
		// Resume before the client's Close (cleanups run last-in first-out)
		// so that Close does not wait out the node timeout.
		t.Cleanup(func() { _ = e.nodes[i].Resume() })
	}

	start := time.Now()
	l, err := c.TryLock(ctxT(t, 30*time.Second), key, longTTL)
	elapsed := time.Since(start)
	require.NoError(t, err)
	require.Less(t, elapsed, quickly, "TryLock waited for a paused node")
	require.Greater(t, l.Validity(), longTTL-quickly)
	for _, i := range []int{1, 2, 4} {
		requireValue(t, e.nodes, i, key, l.Token())
	}

	start = time.Now()
	require.NoError(t, l.Extend(ctxT(t, 30*time.Second), longTTL))
	require.Less(t, time.Since(start), quickly, "Extend waited for a paused node")

	// Unlock waits for every node until the node timeout (done when
	// returned), not for the pools' I/O timeout.
	start = time.Now()
	require.NoError(t, l.Unlock(ctxT(t, 30*time.Second)))
	require.Less(t, time.Since(start), nodeTimeout+quickly, "Unlock waited for a paused node past the node timeout")
	for _, i := range []int{1, 2, 4} {
		requireAbsent(t, e.nodes, i, key)
	}
}

// releaseSHA is the SHA1 of the release script, as EVALSHA names it.
func releaseSHA(t *testing.T) string {
	// The script Unlock runs for a lock taken without waiting.
	return wire.ReleaseFree.Hash()
}

func TestUnlock_worksAfterTheScriptCacheWasFlushed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	sha := releaseSHA(t)

	// A first client loads the scripts on every node; Close waits until
	// all its commands are done.
	warm := e.client()
	l, err := warm.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.NoError(t, warm.Close())
	for i, s := range e.nodes {
		ok, err := redis.Ints(s.Do("SCRIPT", "EXISTS", sha))
		require.NoError(t, err)
		require.Equal(t, []int{1}, ok, "node %d: the release script was never loaded: the test would prove nothing", i)
	}

	c := e.client()
	key := newKey(t)
	l, err = c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())
	for i, s := range e.nodes {
		_, err := s.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		ok, err := redis.Ints(s.Do("SCRIPT", "EXISTS", sha))
		require.NoError(t, err)
		require.Equal(t, []int{0}, ok, "node %d", i)
	}

	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestExtend_worksAfterTheScriptCacheWasFlushed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, time.Second)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), 2*time.Second))
	for _, s := range e.nodes {
		_, err := s.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
	}
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
	require.NoError(t, c.Close())
	for i, s := range e.nodes {
		requireValue(t, e.nodes, i, key, l.Token())
		require.Greater(t, pttl(t, s, key), longTTL/2)
	}
}

// A node set where the last node is not a Redis server at all.
func TestTryLock_withANodeThatIsNotRedisReportsItAndWorksWithTheOthers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		handle func(net.Conn)
		want   []string // one of them in the node's error
	}{
		{"silent", blackHole, []string{"timeout"}},
		// The garbage breaks the connection: the next command fails
		// reading the garbage, or, when the reader closed the connection
		// first, writing to it.
		{"garbage", garbage, []string{"unexpected response line", "use of closed network connection", "malformed or oversized reply"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newEnv(t, 4)
			fake := startFakeServer(t, tc.handle)
			nodes := c.nodes
			addrs := append(append([]string(nil), c.addrs...), fake.Addr())
			// The fake node's own read timeout, shorter than the client's
			// node timeout, makes it fail (rather than be left pending
			// when the round's timer fires).
			pools := append(append([]pool.Pool(nil), c.pools...),
				newPools(t, []string{fake.Addr()}, pool.WithIOTimeout(200*time.Millisecond))...)
			cl := newClient(t, pools, redlock.WithNodeTimeout(3*time.Second))

			// The four real nodes make a quorum.
			key := newKey(t)
			start := time.Now()
			l, err := cl.TryLock(ctxT(t, 10*time.Second), key, longTTL)
			require.NoError(t, err)
			require.Less(t, time.Since(start), quickly)
			require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
			require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))

			// Two held real nodes and the fake make the round fail; the
			// error names the fake node.
			key = newKey(t)
			holdForeign(t, nodes, key, 0, 1)
			start = time.Now()
			l, err = cl.TryLock(ctxT(t, 10*time.Second), key, longTTL)
			require.Nil(t, l)
			require.Less(t, time.Since(start), quickly)
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			qe := asQuorumError(t, err)
			require.False(t, qe.Busy(), statuses(qe))
			requireNodeFailed(t, qe, 4, addrs[4])
			msg := qe.Nodes[4].Err.Error()
			require.True(t, slices.ContainsFunc(tc.want, func(w string) bool { return strings.Contains(msg, w) }),
				"%q names none of %q", msg, tc.want)

			require.NoError(t, cl.Close())
			requireOnlyForeignOrNothing(t, nodes, key, 0, 1, 2, 3)
			requireAbsent(t, nodes, 2, key)
			requireAbsent(t, nodes, 3, key)
		})
	}
}

func TestTryLock_withAWrongPasswordNamesTheNodeAndHidesThePassword(t *testing.T) {
	const (
		password = "s3cret-real-password"
		wrong    = "wr0ng-guessed-password"
	)
	e := newEnv(t, 5, redistest.Options{Password: password})
	// Node 0 has the wrong password, the others the right one.
	pools := append(newPools(t, e.addrs[:1], pool.WithPassword(wrong)),
		newPools(t, e.addrs[1:], pool.WithPassword(password))...)
	c := newClient(t, pools)

	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err, "four good nodes make a quorum")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))

	key = newKey(t)
	holdForeign(t, e.nodes, key, 1, 2)
	start := time.Now()
	_, err = c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.Less(t, time.Since(start), quickly)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	requireNodeFailed(t, qe, 0, e.addrs[0], "WRONGPASS")
	require.NotContains(t, err.Error(), wrong)
	require.NotContains(t, err.Error(), password)
	require.NotContains(t, qe.Nodes[0].Err.Error(), wrong)

	// With no password at all the node says so.
	noAuth := newClient(t, newPools(t, e.addrs))
	_, err = noAuth.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe = asQuorumError(t, err)
	require.GreaterOrEqual(t, qe.Count(redlock.NodeFailed), 3, statuses(qe))
	require.Contains(t, err.Error(), "NOAUTH")
	require.NotContains(t, err.Error(), password)

	require.NoError(t, c.Close())
	require.NoError(t, noAuth.Close())
	requireOnlyForeignOrNothing(t, e.nodes, key, 0, 1, 2, 3, 4)
	requireAbsent(t, e.nodes, 3, key)
	requireAbsent(t, e.nodes, 4, key)
}

func TestTryLock_onAReadOnlyReplicaReportsREADONLY(t *testing.T) {
	t.Parallel()
	// Six nodes: 0-4 are the lock nodes, 5 is the master that node 0
	// replicates.
	all := newEnv(t, 6)
	nodes, addrs, pools := all.nodes[:5], all.addrs[:5], all.pools[:5]
	master := all.nodes[5]
	_, err := nodes[0].Do("REPLICAOF", "127.0.0.1", master.Port())
	require.NoError(t, err)
	_, err = nodes[0].Do("SET", "probe", "x")
	require.ErrorContains(t, err, "READONLY", "node 0 is not a read-only replica: the test would prove nothing")
	c := newClient(t, pools)

	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err, "four writable nodes make a quorum")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))

	key = newKey(t)
	holdForeign(t, nodes, key, 1, 2)
	_, err = c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	requireNodeFailed(t, qe, 0, addrs[0], "READONLY")
	require.True(t, nodeErr(t, qe, 0).Replied(), "READONLY is a reply from the node")

	require.NoError(t, c.Close())
	requireOnlyForeignOrNothing(t, nodes, key, 1, 2, 3, 4)
	requireAbsent(t, nodes, 3, key)
	requireAbsent(t, nodes, 4, key)
}

func TestTryLock_onAnOutOfMemoryNodeReportsOOM(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	_, err := e.nodes[0].Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	require.NoError(t, err)
	_, err = e.nodes[0].Do("CONFIG", "SET", "maxmemory", "1")
	require.NoError(t, err)
	_, err = e.nodes[0].Do("SET", "probe", "x")
	require.ErrorContains(t, err, "OOM", "node 0 is not out of memory: the test would prove nothing")
	c := e.client()

	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err, "four healthy nodes make a quorum")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))

	key = newKey(t)
	holdForeign(t, e.nodes, key, 1, 2)
	_, err = c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	requireNodeFailed(t, qe, 0, e.addrs[0], "OOM")
	require.True(t, nodeErr(t, qe, 0).Replied(), "OOM is a reply from the node")

	require.NoError(t, c.Close())
	requireOnlyForeignOrNothing(t, e.nodes, key, 0, 1, 2, 3, 4)
	requireAbsent(t, e.nodes, 3, key)
	requireAbsent(t, e.nodes, 4, key)
}

// nodeErr returns node i's error as a *pool.NodeError.
func nodeErr(t *testing.T, qe *redlock.QuorumError, i int) *pool.NodeError {
	t.Helper()
	var ne *pool.NodeError
	require.ErrorAs(t, qe.Nodes[i].Err, &ne)
	return ne
}

// Lock uses one token for all its rounds. The release of a node that timed
// out in a failed round comes after the decision, in the background; it
// must not delete the key that a later, successful round of the same call
// put on that node.
func TestLock_aLateReleaseFromAFailedRoundKeepsTheQuorumOfTheRoundThatSucceeded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	// Node 4 is reached through a proxy that drops everything sent on its
	// first connection (the first round's SET) and forwards later ones.
	lost := startProxy(t, e.addrs[4], -1)
	addrs := append(append([]string(nil), e.addrs[:4]...), lost.Addr())
	const nodeTimeout = time.Second
	// Restart safety off: its first check would be the call the proxy drops.
	c := newClient(t, newPools(t, addrs), redlock.WithNodeTimeout(nodeTimeout), redlock.WithRestartSafety(0),
		redlock.WithRetry(10*time.Millisecond, 40*time.Millisecond))
	key := newKey(t)

	// Node 3 is down and node 2 held for long; nodes 0 and 1 are held for
	// a short while. The rounds fail until 0 and 1 expire, then one
	// succeeds with exactly 0, 1 and 4 — while the first round's call to
	// node 4 still waits for its node timeout.
	require.NoError(t, e.nodes[3].Kill())
	holdForeign(t, e.nodes, key, 2)
	for _, i := range []int{0, 1} {
		_, err := e.nodes[i].Do("SET", key, foreignToken, "PX", 300)
		require.NoError(t, err)
	}
	start := time.Now()
	l, err := c.Lock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	if time.Since(start) >= nodeTimeout/2 {
		t.Skip("Lock took too long for the first round's call to node 4 to still be pending")
	}
	for _, i := range []int{0, 1, 4} {
		requireValue(t, e.nodes, i, key, l.Token())
	}

	// Close waits for the first round's call to node 4 to time out and for
	// what the client does about it.
	require.NoError(t, c.Close())
	require.Greater(t, l.Validity(), longTTL/2, "the lock claims to be valid")
	held := 0
	for _, i := range []int{0, 1, 2, 4} {
		if v, ok := get(t, e.nodes[i], key); ok && v == l.Token() {
			held++
		}
	}
	require.GreaterOrEqual(t, held, 3,
		"a valid lock is held on fewer than a quorum of nodes: the failed first round's late release deleted node 4's key")
}
