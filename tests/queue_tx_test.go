package tests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// A waiting Lock's first round on pool.New's nodes is a transaction, not
// a script: MULTI, the entry (SET PX), ZADD NX, the queue's PEXPIRE,
// TIME, GET and PTTL of the key, EXEC.

// calls returns how many times s ran cmd since its stats were reset.
func calls(t testing.TB, s *redistest.Server, cmd string) int {
	t.Helper()
	stats, err := redis.String(s.Do("INFO", "commandstats"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^cmdstat_` + cmd + `:calls=(\d+),`).FindStringSubmatch(stats)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return n
}

func resetStats(t testing.TB, nodes []*redistest.Server) {
	t.Helper()
	for i, s := range nodes {
		_, err := s.Do("CONFIG", "RESETSTAT")
		require.NoError(t, err, "node %d", i)
	}
}

// The first round queues the waiter on every node with a transaction and
// no script: its entry holds the round, the TTL and its hand-off token
// and expires, so does the queue; a release hands the key to it.
func TestLock_aWaitersFirstRoundQueuesItWithATransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	holder := e.client()
	held := takeEverywhere(t, e, holder, key, hourTTL)
	resetStats(t, e.nodes)

	c := newClient(t, newPools(t, e.addrs), noRefresh, redlock.WithRestartSafety(0)) // no node checks: every script counted is the lock's
	got := lockAsync(ctxT(t, time.Minute), c, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)
	for i, s := range e.nodes {
		require.Equal(t, 1, calls(t, s, "exec"), "node %d: one transaction", i)
		require.Equal(t, 0, calls(t, s, "evalsha")+calls(t, s, "eval"), "node %d: no script", i)
		ids, err := redis.Strings(s.Do("ZRANGE", wire.WaitersKey(key), 0, -1))
		require.NoError(t, err)
		require.Len(t, ids, 1)
		entry, ok := get(t, s, wire.EntryKey(key, ids[0]))
		require.True(t, ok, "node %d: the entry", i)
		require.True(t, strings.HasPrefix(entry, fmt.Sprintf("1 %d %s/", longTTL.Milliseconds(), ids[0])),
			"node %d: round 1, the TTL, the hand-off token: %q", i, entry)
		require.Greater(t, pttl(t, s, wire.EntryKey(key, ids[0])), time.Duration(0), "node %d: the entry expires", i)
		require.Greater(t, pttl(t, s, wire.WaitersKey(key)), time.Duration(0), "node %d: the queue expires", i)
	}

	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	r := <-got
	require.NoError(t, r.err)
	// A quorum holds the waiter's token. Not every node need: the holder's
	// Unlock returns once a quorum released, and a node whose release had
	// not landed when the waiter's round came refused it, then left the key
	// free.
	require.Eventually(t, func() bool {
		n := 0
		for _, s := range e.nodes {
			if v, ok := get(t, s, key); ok && ofLock(r.l.Token(), v) {
				n++
			}
		}
		return n >= 3
	}, 5*time.Second, 2*time.Millisecond, "a quorum holds the waiter's token")
	require.NoError(t, r.l.Unlock(ctxT(t, quickly)))
	awaitAbsent(t, e.nodes, key)
	for i, s := range e.nodes {
		require.Zero(t, queued(t, s, key), "node %d: nobody queued", i)
	}
}

// A Client that waits for a key (or waited for it a moment ago) sends a
// new Lock's first round as the transaction. When that round finds the
// key free, the script's round follows at once and takes it.
func TestLock_aFirstRoundThatFindsTheKeyFreeTakesItAtOnce(t *testing.T) {
	e := newEnv(t, 5)
	key := newKey(t)
	c := newClient(t, newPools(t, e.addrs), noRefresh, redlock.WithRestartSafety(0)) // no node checks: every script counted is the lock's
	a := takeEverywhere(t, e, c, key, hourTTL)
	b := lockAsync(ctxT(t, time.Minute), c, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 1)
	resetStats(t, e.nodes)

	// The third call waits too, for as long as b holds the key: its
	// first round is the transaction.
	third := lockAsync(ctxT(t, time.Minute), c, key, longTTL, neverRetry)
	awaitWaiting(t, e.nodes, key, 2)
	require.NoError(t, a.Unlock(ctxT(t, quickly)))
	rb := <-b
	require.NoError(t, rb.err)
	require.NoError(t, rb.l.Unlock(ctxT(t, quickly)))
	rc := <-third
	require.NoError(t, rc.err)
	require.NoError(t, rc.l.Unlock(ctxT(t, quickly)))
	awaitAbsent(t, e.nodes, key)

	// The Client still listens to the key: the next Lock's first round is
	// the transaction, which finds the key free; the script takes it.
	resetStats(t, e.nodes)
	start := time.Now()
	l, err := c.Lock(ctxT(t, quickly), key, longTTL, neverRetry)
	require.NoError(t, err)
	took := time.Since(start)
	awaitToken(t, e.nodes, key, l.Token())
	require.Less(t, took, longTTL/10, "no back-off, no wait for a TTL")
	for i, s := range e.nodes {
		require.LessOrEqual(t, calls(t, s, "exec"), 1, "node %d", i)
		require.LessOrEqual(t, calls(t, s, "evalsha"), 1, "node %d: one script round (EVAL follows a NOSCRIPT)", i)
	}
	execs := 0
	for _, s := range e.nodes {
		execs += calls(t, s, "exec")
	}
	require.GreaterOrEqual(t, execs, 3, "a quorum of nodes got the transaction first")
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
	awaitAbsent(t, e.nodes, key)
	for i, s := range e.nodes {
		require.Zero(t, queued(t, s, key), "node %d: nobody queued", i)
	}
}
