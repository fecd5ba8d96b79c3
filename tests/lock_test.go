package tests

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/faults"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestExtend_movesUntilLaterAndSetsTheNewTTLOnEveryNode(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, 2*time.Second)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())
	before := l.Until()
	require.LessOrEqual(t, l.Validity(), 2*time.Second)

	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
	require.Greater(t, l.Until().Sub(before), longTTL-2*time.Second-quickly, "Until did not move by about the new ttl")
	require.Greater(t, l.Validity(), longTTL-quickly)
	require.LessOrEqual(t, l.Validity(), longTTL)

	// Close waits for the nodes that answered after the quorum.
	require.NoError(t, c.Close())
	for i, s := range e.nodes {
		requireValue(t, e.nodes, i, key, l.Token())
		d := pttl(t, s, key)
		require.Greater(t, d, longTTL-quickly, "node %d", i)
		require.LessOrEqual(t, d, longTTL, "node %d", i)
	}
}

// Extend recomputes the validity from its own round, so a shorter ttl
// shortens it: Until must not promise more than the nodes will keep the key.
func TestExtend_withAShorterTTLShortensTheValidity(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())

	const short = time.Second
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), short))
	require.NoError(t, c.Close())
	for i, s := range e.nodes {
		require.LessOrEqual(t, pttl(t, s, key), short, "node %d", i)
	}
	require.LessOrEqual(t, l.Validity(), short,
		"the nodes drop the key within %v, but the lock claims %v of validity", short, l.Validity())
	require.False(t, l.Until().After(time.Now().Add(short)))
}

func TestExtendAndUnlock_afterTheKeyIsGoneOnAQuorumReportLockLostAndRecreateNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.Positive(t, l.Validity())
	awaitToken(t, e.nodes, key, l.Token())

	// The key expires on three nodes.
	gone := []int{0, 2, 4}
	for _, i := range gone {
		_, err := e.nodes[i].Do("DEL", key)
		require.NoError(t, err)
	}

	err = l.Extend(ctxT(t, 10*time.Second), longTTL)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.NotErrorIs(t, err, redlock.ErrNotAcquired)
	qe := asQuorumError(t, err)
	require.Equal(t, redlock.Op("extend"), qe.Op)
	require.GreaterOrEqual(t, qe.Count(redlock.NodeRefused), 3, statuses(qe))
	for _, i := range []int{1, 3} {
		require.NotEqual(t, redlock.NodeRefused, qe.Nodes[i].Status, "node %d still holds our token: %s", i, statuses(qe))
	}
	require.Zero(t, l.Validity(), "a lock lost on a quorum has no validity left")
	require.False(t, l.Until().After(time.Now()))

	err = l.Unlock(ctxT(t, 10*time.Second))
	require.ErrorIs(t, err, redlock.ErrLockLost)
	qe = asQuorumError(t, err)
	require.Equal(t, redlock.Op("unlock"), qe.Op)
	require.Zero(t, l.Validity())

	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestExtendAndUnlock_afterAForeignOwnerTookAQuorumLeaveItsKeysAlone(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)

	// Our key expired on nodes 1, 2, 3 and another owner took them.
	taken := []int{1, 2, 3}
	holdForeign(t, e.nodes, key, taken...)

	err = l.Extend(ctxT(t, 10*time.Second), 5*time.Second)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	qe := asQuorumError(t, err)
	require.GreaterOrEqual(t, qe.Count(redlock.NodeRefused), 3, statuses(qe))
	require.Zero(t, l.Validity())
	require.NoError(t, c.Close()) // wait for every node's extend
	for _, i := range taken {
		// Still the foreign owner's, with its own TTL, not ours.
		requireForeignIntact(t, e.nodes, i, key)
	}

	c2 := newClient(t, e.pools)
	l2 := c2.Restore(key, l.Token())
	err = l2.Unlock(ctxT(t, 10*time.Second))
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.NoError(t, c2.Close())
	for _, i := range taken {
		requireForeignIntact(t, e.nodes, i, key)
	}
	// Our own leftovers on the other nodes are released.
	requireAbsent(t, e.nodes, 0, key)
	requireAbsent(t, e.nodes, 4, key)
}

func TestUnlock_neverDeletesAForeignKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	holdForeign(t, e.nodes, key, 0, 1, 2, 3, 4)

	// A handle with the wrong token, as after an expiry and a takeover.
	l := c.Restore(key, "not-the-owner-token")
	err := l.Unlock(ctxT(t, 10*time.Second))
	require.ErrorIs(t, err, redlock.ErrLockLost)
	qe := asQuorumError(t, err)
	require.Zero(t, qe.Count(redlock.NodeOK), statuses(qe))

	// A prefix of the token is not the token.
	l = c.Restore(key, foreignToken[:len(foreignToken)-1])
	require.ErrorIs(t, l.Unlock(ctxT(t, 10*time.Second)), redlock.ErrLockLost)
	require.ErrorIs(t, l.Extend(ctxT(t, 10*time.Second), time.Second), redlock.ErrReleased)
	l = c.Restore(key, foreignToken+"x")
	require.ErrorIs(t, l.Extend(ctxT(t, 10*time.Second), time.Second), redlock.ErrLockLost)

	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireForeignIntact(t, e.nodes, i, key)
	}
}

// Unlock's contract: "A ctx that ends first adds ctx.Err(); the release
// still runs on every node". The common `defer l.Unlock(ctx)` runs with a
// ctx that has often ended by then.
func TestUnlock_withAnAlreadyCancelledContextStillReleasesEveryNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, context.Canceled)

	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestRestore_letsAnotherClientReleaseTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	a := e.client()
	b := newClient(t, newPools(t, e.addrs)) // another process: its own connections
	key := newKey(t)

	la, err := a.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, la.Token())

	lb := b.Restore(key, la.Token())
	require.Equal(t, key, lb.Key())
	require.Equal(t, la.Token(), lb.Token())
	require.True(t, lb.Until().IsZero(), "a restored lock's validity is unknown")
	require.Zero(t, lb.Validity())

	// Nobody else can take it meanwhile.
	_, err = b.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	require.NoError(t, lb.Extend(ctxT(t, 10*time.Second), longTTL))
	require.Greater(t, lb.Validity(), longTTL-quickly)
	require.NoError(t, lb.Unlock(ctxT(t, 10*time.Second)))
	require.NoError(t, b.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}

	// The original handle now finds the lock gone, and the key is free.
	require.ErrorIs(t, la.Extend(ctxT(t, 10*time.Second), longTTL), redlock.ErrLockLost)
	l, err := a.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// Keys and tokens are passed as KEYS and ARGV, never spliced into a script
// or a command line.
func TestLock_withOddKeysAndTokensWorks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	// A canary that a script injection like FLUSHALL would remove.
	for _, s := range e.nodes {
		_, err := s.Do("SET", "canary", "alive")
		require.NoError(t, err)
	}
	odd := []string{
		`quote"d'key`,
		`{braces}[brackets](parens)`,
		"with spaces  and\ttabs",
		"new\nline\r\nand CR",
		"ünïcødé ✓ 锁 🔒",
		"binary\x00nul\x01\x7f\xff\xfe",
		`"); redis.call("FLUSHALL") --`,
		`]] redis.call("FLUSHALL") --[[`,
		"KEYS[1]",
		"*",
	}
	for _, key := range odd {
		l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
		require.NoError(t, err, "key %q", key)
		require.Equal(t, key, l.Key())
		// The exact bytes of the key hold our token on a quorum.
		held := 0
		for i, s := range e.nodes {
			if v, ok := get(t, s, key); ok {
				require.Equal(t, l.Token(), v, "node %d, key %q", i, key)
				held++
			}
		}
		require.GreaterOrEqual(t, held, 3, "key %q", key)
		awaitToken(t, e.nodes, key, l.Token())
		require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL), "key %q", key)
		require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)), "key %q", key)

		// A token with the same odd bytes, planted as another process
		// would have, is extended and released through Restore.
		token := "tok:" + key
		for _, s := range e.nodes {
			_, err := s.Do("SET", key, token, "PX", 2000)
			require.NoError(t, err)
		}
		r := c.Restore(key, token)
		require.NoError(t, r.Extend(ctxT(t, 10*time.Second), longTTL), "token %q", token)
		require.Positive(t, r.Validity())
		// Close-free check: every node that answered has the new TTL; the
		// quorum at least.
		extended := 0
		for _, s := range e.nodes {
			if pttl(t, s, key) > 5*time.Second {
				extended++
			}
		}
		require.GreaterOrEqual(t, extended, 3, "token %q", token)
		require.NoError(t, r.Unlock(ctxT(t, 10*time.Second)), "token %q", token)
	}
	require.NoError(t, c.Close())
	for i, s := range e.nodes {
		v, err := redis.String(s.Do("GET", "canary"))
		require.NoError(t, err, "node %d: canary gone", i)
		require.Equal(t, "alive", v)
		for _, key := range odd {
			requireAbsent(t, e.nodes, i, key)
		}
	}
}

func TestFromRedigo_poolsRunAFullLockExtendUnlockCycle(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	var pools []pool.Pool
	for _, addr := range c.Addrs() {
		rp := &redis.Pool{
			MaxIdle: 4,
			Dial: func() (redis.Conn, error) {
				return redis.Dial("tcp", addr, redis.DialConnectTimeout(time.Second))
			},
		}
		p := pool.FromRedigo(rp, addr)
		require.Equal(t, addr, p.Addr())
		t.Cleanup(func() { _ = rp.Close() })
		pools = append(pools, p)
	}
	cl := newClient(t, pools)
	key := newKey(t)

	l, err := cl.TryLock(ctxT(t, 10*time.Second), key, 2*time.Second)
	require.NoError(t, err)
	awaitToken(t, c.Nodes(), key, l.Token())
	_, err = cl.TryLock(ctxT(t, 10*time.Second), key, 2*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL))
	require.Greater(t, l.Validity(), longTTL-quickly)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	l, err = cl.Lock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, cl.Close())
	// Unlock returned once a quorum released; a node it released later
	// may have refused the new lock's SET.
	held := 0
	for i, s := range c.Nodes() {
		if v, ok := get(t, s, key); ok {
			require.Equal(t, l.Token(), v, "node %d", i)
			held++
		}
	}
	require.GreaterOrEqual(t, held, 3)
}

// A successful TryLock returns once a quorum said OK; the SETs to the other
// nodes are still on their way. An Unlock right after must not leave our
// key on a node whose SET lands after the release reached it.
func TestUnlock_releasesANodeWhoseSETLandsAfterTheUnlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	// Node 4 is reached through a proxy that holds back its first
	// connection (the one that carries the SET) for a while; the release
	// goes over a second connection, at once.
	const delay = time.Second
	slow := startProxy(t, e.addrs[4], delay)
	addrs := append(append([]string(nil), e.addrs[:4]...), slow.Addr())
	c := newClient(t, newPools(t, addrs), redlock.WithNodeTimeout(3*time.Second))
	key := newKey(t)

	start := time.Now()
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	_, held := get(t, e.nodes[4], key)
	if time.Since(start) < delay {
		// The proxy accepted the SET's connection after start, so the
		// SET has not reached node 4 yet, while Unlock is done with it:
		// the case under test.
		require.False(t, held, "the SET to node 4 was not held back: the test would prove nothing")
	}

	require.NoError(t, c.Close()) // the SET to node 4 has landed
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

// A holder that locks the same key again and again, with one node slow to
// reply: the release of each lock goes to that node right behind the
// lock's SET on the same connection, so every SET there finds the key
// free and every release deletes it. A release that waited for the SET's
// reply let the holder's next SET reach the node first, which found the
// previous token and refused; the node then sat out every other round.
func TestUnlock_aSlowNodeKeepsGrantingWhenTheHolderLocksAgainAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	p, err := faults.NewProxy(e.addrs[4], 1)
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	p.Set(faults.Fault{Mode: faults.DelayReplies, Delay: 20 * time.Millisecond})
	addrs := append(append([]string(nil), e.addrs[:4]...), p.Addr())
	c := newClient(t, newPools(t, addrs), redlock.WithRestartSafety(0))
	key := newKey(t)
	// One round first, so that node 4 has the release script by the time
	// the others are sent (a release sent again after NOSCRIPT goes behind
	// later commands; see round.unsettled).
	l, err := c.Lock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.Eventually(t, func() bool {
		ok, err := redis.Ints(e.nodes[4].Do("SCRIPT", "EXISTS", releaseFreeHash(t)))
		return err == nil && ok[0] == 1
	}, quickly, time.Millisecond)
	awaitAbsent(t, e.nodes, key)
	_, err = e.nodes[4].Do("CONFIG", "RESETSTAT")
	require.NoError(t, err)

	const rounds = 20
	for range rounds {
		l, err := c.Lock(ctxT(t, 10*time.Second), key, longTTL)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	}
	require.NoError(t, c.Close()) // every reply of node 4 is in
	require.Equal(t, rounds, calls(t, e.nodes[4], "del"), "every release deleted its own token on the slow node")
	requireAbsent(t, e.nodes, 4, key)
}

// releaseFreeHash returns the SHA1 of the short release script, read from
// the node's script cache after a release: the one EVAL'd script there
// whose source deletes the key and announces it.
func releaseFreeHash(t *testing.T) string {
	t.Helper()
	return wire.ReleaseFree.Hash()
}

// A lock that Lock got after waiting, extending itself: the extender
// starts only once the lock has what the waiting call knows of it (under
// -race this failed: the extender read the lock's rounds while the call
// still wrote them).
func TestLock_aLockWaitedForExtendsItselfSafelyFromTheStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	a, b := e.client(), e.client()
	ctx := ctxT(t, 10*time.Second)
	held, err := a.Lock(ctx, key, time.Second)
	require.NoError(t, err)
	time.AfterFunc(100*time.Millisecond, func() { _ = held.Unlock(ctx) })
	l, err := b.Lock(ctx, key, 600*time.Millisecond, redlock.WithAutoExtend(time.Millisecond))
	require.NoError(t, err)
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, l.Context().Err(), "the lock extended itself")
	require.NoError(t, l.Unlock(ctx))
}
