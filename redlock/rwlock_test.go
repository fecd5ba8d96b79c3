package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
)

func TestRWLock_readersShareAndWritersExclude(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	rw := c.RWLock("doc")
	ctx := context.Background()
	r1, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	r2, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err, "readers share")
	_, err = rw.TryLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "no writer while readers are in")
	require.True(t, quorumError(t, err).Busy())

	require.NoError(t, r1.Extend(ctx, 2*ttl))
	require.NoError(t, r1.Unlock(ctx))
	_, err = rw.TryLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "one reader is still in")
	require.NoError(t, r2.Unlock(ctx))

	w, err := rw.TryLock(ctx, ttl)
	require.NoError(t, err)
	_, err = rw.TryRLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "no reader while the writer holds it")
	_, err = rw.TryLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "one writer at a time")
	require.NoError(t, w.Extend(ctx, 2*ttl))
	require.NoError(t, w.Unlock(ctx))
	r3, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	require.NoError(t, r3.Unlock(ctx))
}

// A reader whose hold ran out on the nodes' clocks does not keep the
// writer out, and its extension does not bring it back.
func TestRWLock_aDeadReaderNeitherBlocksNorReturns(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	rw := c.RWLock("doc")
	ctx := context.Background()
	r, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	for _, n := range nodes {
		n.server("HSET", wire.RWKeys("doc")[1], r.Token(), 1) // ran out long ago
	}
	w, err := rw.TryLock(ctx, ttl)
	require.NoError(t, err, "the dead reader does not count")
	require.ErrorIs(t, r.Extend(ctx, ttl), ErrLockLost, "the dead reader is not extended")
	require.NoError(t, w.Unlock(ctx))
}

// A writer that waits leaves its intent: new readers wait behind it.
func TestRWLock_aWaitingWriterHoldsNewReadersBack(t *testing.T) {
	asked := make(signalRetry, 1)
	c, _, clk := newFakeClient(t, 5, withPacer(asked))
	rw := c.RWLock("doc")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		w, err := rw.Lock(ctx, ttl)
		if err == nil {
			err = w.Unlock(context.Background())
		}
		got <- err
	}()
	<-asked // the writer was refused twice: its intent is on the nodes
	_, err = rw.TryRLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "a new reader waits behind the writer")
	require.NoError(t, r.Unlock(ctx))
	require.True(t, clk.WaitTimers(1, nil))
	clk.Advance(100 * time.Millisecond) // the back-off; the fake nodes announce nothing
	require.NoError(t, <-got, "the writer got in once the reader left")
	r2, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err, "readers come back once the writer is done")
	require.NoError(t, r2.Unlock(ctx))
}

// A name is one kind of lock.
func TestRWLock_aMutexOnTheNameIsAClearError(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	m, err := c.TryLock(ctx, "doc", ttl)
	require.NoError(t, err)
	_, err = c.RWLock("doc").TryRLock(ctx, ttl)
	require.ErrorContains(t, err, `"doc" is held as a mutex`)
	_, err = c.RWLock("doc").TryLock(ctx, ttl)
	require.ErrorContains(t, err, `"doc" is held as a mutex`)
	require.NoError(t, m.Unlock(ctx))
	// Done when returned: the refused calls undid what they took before
	// they returned, and Unlock released every node before it did.
	for i, n := range nodes {
		keys, _ := redis.Strings(n.server("KEYS", "*doc*"), nil)
		require.Empty(t, keys, "node %d", i)
	}

	// And the other way round: while the read-write lock is held, by a
	// reader or the writer, a mutex call on its name fails, the plain
	// round as the script's; once it is free, the name is free.
	for _, take := range []func(context.Context, time.Duration, ...LockOption) (*Lock, error){
		c.RWLock("doc").TryRLock, c.RWLock("doc").TryLock} {
		h, err := take(ctx, ttl)
		require.NoError(t, err)
		for _, opts := range [][]LockOption{nil, {WithFencing()}} {
			_, err = c.TryLock(ctx, "doc", ttl, opts...)
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorContains(t, err, "held as a read-write lock")
			require.False(t, quorumError(t, err).Busy())
		}
		require.NoError(t, h.Unlock(ctx))
		for i, n := range nodes { // done when returned
			require.Equal(t, int64(0), n.server("EXISTS", "doc"), "node %d", i)
		}
		m, err := c.TryLock(ctx, "doc", ttl)
		require.NoError(t, err, "the last holder out frees the name")
		require.NoError(t, m.Unlock(ctx))
	}

	_, err = c.RWLock("").TryRLock(ctx, ttl)
	require.ErrorContains(t, err, "empty name")
	_, err = c.RWLock("doc").TryLock(ctx, ttl, WithFencing())
	require.ErrorContains(t, err, "WithFencing is not supported")
}

// A writer that gives up waiting takes its intent away: readers are not
// held back by a writer that is gone.
func TestRWLock_aWriterThatGivesUpTakesItsIntentAway(t *testing.T) {
	asked := make(signalRetry, 1)
	c, nodes, _ := newFakeClient(t, 5, withPacer(asked))
	rw := c.RWLock("doc")
	ctx := context.Background()
	r, err := rw.TryRLock(ctx, ttl)
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(ctx)
	got := make(chan error, 1)
	go func() {
		_, err := rw.Lock(wctx, ttl)
		got <- err
	}()
	<-asked // the writer was refused twice: its intent is on the nodes
	_, err = rw.TryRLock(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired, "a new reader waits behind the writer")
	cancel()
	require.ErrorIs(t, <-got, context.Canceled)
	require.NoError(t, r.Unlock(ctx))
	require.NoError(t, c.Close()) // it waits for the background work: the intent's removal
	other, _ := newClientOn(t, nodes)
	r2, err := other.RWLock("doc").TryRLock(ctx, ttl)
	require.NoError(t, err, "the intent of a writer that left holds readers back")
	require.NoError(t, r2.Unlock(ctx))
}

// A waiting writer that gives up takes its place away on each node only
// after its rounds there were answered: sent before, the leave could land
// first (pools without per-key order) and a late round put the writer
// back in the queue, where it kept readers out until its place lapsed.
func TestRWLock_givingUpLeavesTheQueueAfterTheLatestRound(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5, WithRetry(time.Hour, time.Hour))
	keys := wire.RWKeys("doc")
	for _, n := range nodes {
		n.set(keys[0], "someone-else")
	}
	open := nodes[0].hold(callRWWrite) // node 0 answers no round until opened
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.RWLock("doc").Lock(ctx, time.Second)
		done <- err
	}()
	require.Eventually(t, func() bool { return nodes[0].parkedCount() >= 1 }, 10*time.Second, time.Millisecond)
	require.True(t, clk.WaitTimers(1, nil))
	cancel()
	require.Never(t, func() bool { return nodes[0].count(callRWRelease) > 0 || len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"the leave went to node 0 before its rounds were answered, or the call returned before node 0 answered the leave")

	open()
	require.ErrorIs(t, <-done, context.Canceled)
	for i, n := range nodes {
		// Done when returned: every node had answered.
		require.Equal(t, 1, n.count(callRWRelease), "node %d", i)
	}
	calls := nodes[0].callLog()
	require.Equal(t, callRWRelease, calls[len(calls)-1], "node 0: %v", calls)
	for i, n := range nodes {
		require.Zero(t, n.zcard(keys[2]), "node %d still queues the writer", i)
	}
}

// A waiting reader that took the lock keeps its place until its release,
// which takes both away in one call on each node: no message of its own
// for the place, which cost every node a script call per acquisition.
func TestRWLock_aWaitingReaderThatTookTheLockLeavesWithItsRelease(t *testing.T) {
	nodes := newRedisNodes(t, 5)
	// Refused, the call asks again at once (it was not yet subscribed),
	// then sleeps a second: meanwhile the key is freed on every node, and
	// its next round takes the lock everywhere and undoes nothing.
	c, err := New(poolsOf(nodes), WithRestartSafety(0), WithNodeTimeout(time.Minute),
		WithRetry(time.Second, time.Second))
	require.NoError(t, err)
	keys := wire.RWKeys("doc")
	for _, n := range nodes {
		n.set(keys[0], "someone-else")
	}
	ctx := context.Background()
	got := make(chan *Lock, 1)
	go func() {
		l, err := c.RWLock("doc").RLock(ctx, 10*time.Second)
		assert.NoError(t, err)
		got <- l
	}()
	const round, places = "script", 5 // rw_read.lua; keys[5], the readers' places
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.count(round) >= 2 }, 10*time.Second, time.Millisecond)
	}
	for _, n := range nodes {
		require.Equal(t, 1, n.zcard(keys[places]))
		n.del(keys[0])
	}
	l := <-got
	require.NotNil(t, l)
	require.Never(t, func() bool { return nodes[0].count(callRWRelease) > 0 }, 50*time.Millisecond, time.Millisecond,
		"a message took the place away before the release: %v", nodes[0].callLog())
	for i, n := range nodes {
		require.Equal(t, 1, n.zcard(keys[places]), "node %d: the place went before the release", i)
	}
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, c.Close()) // it waits for the background work
	for i, n := range nodes {
		require.Equal(t, 1, n.count(callRWRelease), "node %d: %v", i, n.callLog())
		require.Zero(t, n.zcard(keys[places]), "node %d keeps the call's place after its release", i)
	}
}
