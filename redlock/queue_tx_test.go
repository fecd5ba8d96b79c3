package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A waiting call's first round is a transaction on pool.New's nodes
// (wire.QueueTx), with the acquisition script's clock check made by the
// Client from the node's TIME.

// txClient returns a Client on one real node through pool.New, without
// restart safety, and a redigo connection to the node.
func txClient(t *testing.T) (*Client, redis.Conn) {
	t.Helper()
	addr := redistest.StartT(t, 1).Addrs()[0]
	n, err := pool.New(addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = n.Close() })
	c, err := New([]pool.Pool{n}, WithRestartSafety(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	conn, err := redis.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return c, conn
}

// queueRound runs the first round of the waiter w on key by transaction.
func queueRound(t *testing.T, c *Client, key string, w wire.Waiter) *round {
	t.Helper()
	require.True(t, c.txReady(), "pool.New's nodes send transactions")
	g := c.queueGrab(mutex{}, key, 10*time.Second, lockConfig{}, w)
	r, err := c.run(context.Background(), g.req)
	require.NoError(t, err)
	return r
}

func TestQueueTx_aClientClockASecondOffIsPlacedByTheNodesClock(t *testing.T) {
	c, conn := txClient(t)
	key := "txclock"
	_, err := conn.Do("SET", key, "other", "PX", 60_000)
	require.NoError(t, err)
	score := func(id string) float64 {
		v, err := redis.Float64(conn.Do("ZSCORE", wire.WaitersKey(key), id))
		require.NoError(t, err)
		return v
	}

	// An honest clock keeps the priority it sent.
	since := time.Now().Add(-300 * time.Millisecond)
	honest := wire.Waiter{ID: c.id + ".1", Since: since.UnixMicro(), Waited: 300_000, Round: 1, Handoff: c.id + ".1/h"}
	r := queueRound(t, c, key, honest)
	require.Equal(t, NodeRefused, r.nodes[0].Status)
	require.Equal(t, float64(since.UnixMicro()), score(honest.ID))

	// A clock 10s behind, that waited 20ms: placed 20ms before now on
	// the node's clock, behind the honest waiter, once the correction
	// (not waited for) has landed.
	now := float64(time.Now().UnixMicro())
	behind := wire.Waiter{ID: c.id + ".2", Since: time.Now().Add(-10 * time.Second).UnixMicro(), Waited: 20_000, Round: 1, Handoff: c.id + ".2/h"}
	queueRound(t, c, key, behind)
	require.Eventually(t, func() bool { return score(behind.ID) > score(honest.ID) }, 5*time.Second, time.Millisecond,
		"the waiter whose clock is behind is placed by the node's clock")
	require.InDelta(t, now-20_000, score(behind.ID), 500_000)
}

// The transaction reports the key as the script does: held with its TTL,
// reserved for another waiter, held as a read-write lock (a failure that
// says so), or free (held for no more time: the waiter asks again).
func TestQueueTx_readsTheKeyAsTheScriptDoes(t *testing.T) {
	c, conn := txClient(t)
	key := "txread"
	w := func(n string) wire.Waiter {
		return wire.Waiter{ID: c.id + "." + n, Since: time.Now().UnixMicro(), Round: 1, Handoff: c.id + "." + n + "/h"}
	}
	r := queueRound(t, c, key, w("free"))
	require.Equal(t, NodeRefused, r.nodes[0].Status)
	a, ok := wire.ParseAcquire(r.replies[0])
	require.True(t, ok)
	require.Equal(t, wire.Acquisition{Code: wire.CodeHeld, PTTL: 0}, a)

	_, err := conn.Do("SET", key, "other", "PX", 60_000)
	require.NoError(t, err)
	r = queueRound(t, c, key, w("held"))
	require.Equal(t, NodeRefused, r.nodes[0].Status)
	a, _ = wire.ParseAcquire(r.replies[0])
	require.Equal(t, int64(wire.CodeHeld), a.Code)
	require.InDelta(t, 60_000, a.PTTL, 5_000)

	_, err = conn.Do("SET", key, wire.Reservation("c.9"), "PX", 40)
	require.NoError(t, err)
	r = queueRound(t, c, key, w("reserved"))
	require.Equal(t, NodeRefused, r.nodes[0].Status)
	a, _ = wire.ParseAcquire(r.replies[0])
	require.Equal(t, int64(wire.CodeReserved), a.Code)

	_, err = conn.Do("SET", key, wire.RWMarker, "PX", 60_000)
	require.NoError(t, err)
	r = queueRound(t, c, key, w("rw"))
	require.Equal(t, NodeFailed, r.nodes[0].Status)
	require.ErrorIs(t, r.nodes[0].Err, errHeldAsRW)
}

// txFake is a pool that takes transactions and answers them with reply.
type txFake struct {
	syncStarter
	reply any
}

func (f txFake) StartTx(rcv async.Receiver, _ string, _ [][]any) { rcv.Receive(f.reply, nil) }

// A node that answers the transaction with something else fails the round
// with an error that names it and says what it sent; it grants nothing.
func TestQueueTx_aHostileReplyFailsTheNodeNamingIt(t *testing.T) {
	nodes := newTestNodes(t, 3)
	now := []any{[]byte("1700000000"), []byte("1")}
	replies := []any{"OK", []any{"OK", int64(1), int64(1), now, int64(5), int64(9)}, []any{"OK", int64(1), int64(1), now, []byte("x"), int64(9)}} // the third is well formed
	pools := make([]pool.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = txFake{syncStarter{n}, replies[i]}
	}
	c, err := New(pools, WithRestartSafety(0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.True(t, c.txReady())
	w := wire.Waiter{ID: c.id + ".1", Since: time.Now().UnixMicro(), Round: 1, Handoff: c.id + ".1/h"}
	g := c.queueGrab(mutex{}, "k", 10*time.Second, lockConfig{}, w)
	r, err := c.run(context.Background(), g.req)
	require.NoError(t, err)
	require.False(t, r.ok)
	for i := range 2 {
		require.Equal(t, NodeFailed, r.nodes[i].Status, "node %d", i)
		var ne *pool.NodeError
		require.ErrorAs(t, r.nodes[i].Err, &ne, "node %d", i)
		require.Equal(t, nodes[i].Addr(), ne.Addr)
		require.ErrorContains(t, r.nodes[i].Err, "unexpected reply", "node %d", i)
	}
}

// The transaction takes no key, so a failed first round owes no release,
// even to nodes whose reply was lost: a release of the round's token
// could only ever find what a node handed over after that round.
func TestQueueTx_aFailedTransactionOwesNoRelease(t *testing.T) {
	nodes := newTestNodes(t, 3)
	lost := &pool.NodeError{Addr: "x", Op: "MULTI", Err: errors.New("connection reset")}
	pools := make([]pool.Pool, len(nodes))
	for i, n := range nodes {
		pools[i] = txFailer{syncStarter{n}, lost}
	}
	c, err := New(pools, WithRestartSafety(0))
	require.NoError(t, err)
	w := wire.Waiter{ID: c.id + ".1", Since: time.Now().UnixMicro(), Round: 1, Handoff: c.id + ".1/h"}
	g := c.queueGrab(mutex{}, "k", 10*time.Second, lockConfig{}, w)
	_, _, err = c.take(context.Background(), &g)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NoError(t, c.Close()) // waits for whatever was owed
	for i, n := range nodes {
		require.Zero(t, n.count(callRelease), "node %d", i)
	}
}

// txFailer is a pool whose transactions fail with err, as on a connection
// that broke before the reply.
type txFailer struct {
	syncStarter
	err error
}

func (f txFailer) StartTx(rcv async.Receiver, _ string, _ [][]any) { rcv.Receive(nil, f.err) }
