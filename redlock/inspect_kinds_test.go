package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A foreign token of Client "zz9" (tokenClient reads it).
const foreignToken = "zz9:0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11"

// A semaphore's inspection names each held slot's holder on every node,
// the size and the queue; the permits in use are those a quorum holds.
func TestSemaphoreInspect_namesThePermitsInUseAndTheQueue(t *testing.T) {
	nodes := newTestNodes(t, 5)
	a, _ := newClientOn(t, nodes)
	b, _ := newClientOn(t, nodes)
	ctx := context.Background()
	pa, err := a.Semaphore("pool", 3).TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	// Every node took a's round before b asks: b's round must not find
	// slot 0 free on a node a's round has not reached yet.
	waitHeld(t, nodes, pa.Key(), pa.Token())
	pb, err := b.Semaphore("pool", 3).TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	waitHeld(t, nodes, pb.Key(), pb.Token())
	// Slot 2 held on two nodes only (a round under way), and a queue.
	for _, n := range nodes[:2] {
		n.set(wire.PermitKey("pool", 2), foreignToken)
	}
	nodes[0].server("ZADD", wire.PermitWaitersKey("pool"), 1, "zz9.1", 2, "zz9.2")

	in, err := b.Semaphore("pool", 3).Inspect(ctx)
	require.NoError(t, err)
	require.Equal(t, "pool", in.Name)
	require.Equal(t, 3, in.Permits)
	require.Equal(t, 3, in.Quorum)
	for i, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.Equal(t, nodes[i].Addr(), n.Addr)
		require.Equal(t, 3, n.Size)
		want := 2
		if i < 2 {
			want = 3
		}
		require.Len(t, n.Permits, want, n.Addr)
		require.Equal(t, a.ID(), n.Permits[0].Holder)
		require.Equal(t, time.Minute, n.Permits[0].TTL, "the test servers' clocks stand still")
		require.Equal(t, b.ID(), n.Permits[1].Holder)
		require.False(t, n.Permits[0].Reserved)
	}
	require.Equal(t, 2, in.Nodes[0].Queued)
	require.Zero(t, in.Nodes[1].Queued)
	require.Equal(t, "zz9", in.Nodes[0].Permits[2].Holder)

	used := in.Holders()
	require.Len(t, used, 2, "slot 2 is on too few nodes")
	require.Equal(t, []int{0, 1}, []int{used[0].Slot, used[1].Slot})
	require.Equal(t, []string{a.ID(), b.ID()}, []string{used[0].Holder, used[1].Holder})

	require.NoError(t, pa.Unlock(ctx))
	in, err = a.Semaphore("pool", 3).Inspect(ctx)
	require.NoError(t, err)
	used = in.Holders()
	require.Len(t, used, 1)
	require.Equal(t, b.ID(), used[0].Holder)
}

// Two holds of one slot by the same Client, each on too few nodes, are
// not a permit in use: holds are told apart by their tokens.
func TestSemaphoreInspect_tellsHoldsOfOneClientApart(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	one, two := "zz9:0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11", "zz9:1e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11"
	for i, n := range nodes[:4] {
		n.set(wire.PermitKey("pool", 0), []string{one, two}[i%2])
	}
	in, err := c.Semaphore("pool", 2).Inspect(context.Background())
	require.NoError(t, err)
	require.Empty(t, in.Holders())
	require.Equal(t, time.Duration(-1), in.Nodes[0].Permits[0].TTL, "a key without TTL")
	require.Zero(t, in.Nodes[0].Size, "no acquisition set the size")
}

func TestSemaphoreInspect_refusesBadCallsAndNamesASilentNode(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	for _, s := range []*Semaphore{c.Semaphore("", 2), c.Semaphore("s", 0), c.Semaphore("s", MaxPermits+1)} {
		_, err := s.Inspect(ctx)
		require.Error(t, err)
	}
	//lint:ignore SA1012 a nil context is what is tested
	_, err := c.Semaphore("s", 2).Inspect(nil)
	require.Error(t, err)
	nodes[1].failWith(errors.New("connection refused"))
	in, err := c.Semaphore("s", 2).Inspect(ctx)
	require.NoError(t, err)
	require.ErrorContains(t, in.Nodes[1].Err, "connection refused")
	require.NoError(t, in.Nodes[0].Err)
	require.NoError(t, c.Close())
	_, err = c.Semaphore("s", 2).Inspect(ctx)
	require.ErrorIs(t, err, pool.ErrClosed)
}

// A read-write lock's inspection: free, then readers of two Clients, a
// waiting writer's intent and a dead reader's entry, then the writer.
func TestRWLockInspect_namesTheModeTheHoldersAndTheIntent(t *testing.T) {
	nodes := newTestNodes(t, 3)
	a, _ := newClientOn(t, nodes)
	b, _ := newClientOn(t, nodes)
	ctx := context.Background()
	in, err := a.RWLock("doc").Inspect(ctx)
	require.NoError(t, err)
	mode, holds := in.Mode(), in.Holders()
	require.Equal(t, RWFree, mode)
	require.Empty(t, holds)

	ra, err := a.RWLock("doc").TryRLock(ctx, time.Minute)
	require.NoError(t, err)
	rb, err := b.RWLock("doc").TryRLock(ctx, time.Minute)
	require.NoError(t, err)
	keys := wire.RWKeys("doc")
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.server("HLEN", keys[1]) == int64(2) }, 5*time.Second, time.Millisecond)
		n.server("HSET", keys[1], "dead", 1)
		// A writer of Client zz9 waits, its place good for a minute.
		n.server("ZADD", keys[2], 1, "zz9.7")
		n.server("ZADD", keys[4], (time.Now().Add(time.Hour)).UnixMicro(), "zz9.7")
	}
	in, err = b.RWLock("doc").Inspect(ctx)
	require.NoError(t, err)
	for _, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.Equal(t, RWRead, n.Mode)
		require.Len(t, n.Readers, 2)
		require.Equal(t, 1, n.Expired)
		require.Nil(t, n.Writer)
		require.NotNil(t, n.Intent)
		require.Equal(t, "zz9", n.Intent.Holder)
		require.False(t, n.Mutex)
	}
	mode, holds = in.Mode(), in.Holders()
	require.Equal(t, RWRead, mode)
	require.ElementsMatch(t, []string{a.ID(), b.ID()}, []string{holds[0].Holder, holds[1].Holder})
	require.Positive(t, holds[0].TTL)

	require.NoError(t, ra.Unlock(ctx))
	require.NoError(t, rb.Unlock(ctx))
	for _, n := range nodes {
		n.del(keys[2])
		n.del(keys[4])
		// The Unlocks returned on a quorum: the writer below must not
		// meet a reader whose release has not landed yet (only the
		// dead entry may stay).
		require.Eventually(t, func() bool { return n.server("HLEN", keys[1]).(int64) <= 1 }, 5*time.Second, time.Millisecond)
	}
	w, err := b.RWLock("doc").TryLock(ctx, time.Minute)
	require.NoError(t, err)
	waitHeld(t, nodes, keys[0], w.Token())
	in, err = a.RWLock("doc").Inspect(ctx)
	require.NoError(t, err)
	mode, holds = in.Mode(), in.Holders()
	require.Equal(t, RWWrite, mode)
	require.Len(t, holds, 1)
	require.Equal(t, b.ID(), holds[0].Holder)
	require.Equal(t, time.Minute, holds[0].TTL)
	require.Equal(t, RWWrite, in.Nodes[0].Mode)
}

// A mutex on the name shows; bad calls fail.
func TestRWLockInspect_showsAMutexOnTheNameAndRefusesBadCalls(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	ctx := context.Background()
	_, err := c.TryLock(ctx, "doc", time.Minute)
	require.NoError(t, err)
	in, err := c.RWLock("doc").Inspect(ctx)
	require.NoError(t, err)
	held := 0
	for _, n := range in.Nodes {
		if n.Mutex {
			held++
		}
		require.Equal(t, RWFree, n.Mode)
	}
	require.GreaterOrEqual(t, held, 2)
	_, err = c.RWLock("").Inspect(ctx)
	require.Error(t, err)
	//lint:ignore SA1012 a nil context is what is tested
	_, err = c.RWLock("doc").Inspect(nil)
	require.Error(t, err)
}

// An election's inspection names the leader a quorum agrees on, with its
// term, TTL and the fence counter; a record that no longer names the
// holder is not current; after the resignation no one leads.
func TestElectionInspect_namesTheLeaderItsTermAndTTL(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	ctx := context.Background()
	e := c.Election("e")
	in, err := e.Inspect(ctx)
	require.NoError(t, err)
	_, _, ok := in.Leader()
	require.False(t, ok)
	require.Equal(t, wire.ElectionKey("e"), in.Key)

	l, err := e.Campaign(ctx, "me", time.Minute)
	require.NoError(t, err)
	for _, n := range nodes {
		require.Eventually(t, func() bool { return recordOf(n, "e")["token"] == l.Token() }, 5*time.Second, time.Millisecond)
	}
	// The term is written back to the nodes that did not mint it after
	// the campaign returned, apart from the record.
	require.Eventually(t, func() bool {
		in, err := e.Inspect(ctx)
		require.NoError(t, err)
		for _, n := range in.Nodes {
			if n.Fence < l.Fence() {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "the term is on every node")
	nodes[0].server("ZADD", wire.WaitersKey(wire.ElectionKey("e")), 1, "zz9.1")
	in, err = e.Inspect(ctx)
	require.NoError(t, err)
	got, ttl, ok := in.Leader()
	require.True(t, ok)
	require.Equal(t, Leader{Value: "me", Term: l.Fence(), ClientID: c.ID()}, got)
	require.Equal(t, time.Minute, ttl)
	for i, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.True(t, n.Current, n.Addr)
		require.Equal(t, c.ID(), n.Holder.Holder)
		require.Equal(t, got, *n.Record)
		require.GreaterOrEqual(t, n.Fence, l.Fence(), "the term was minted here")
		require.Equal(t, map[bool]int{true: 1, false: 0}[i == 0], n.Queued)
	}

	nodes[0].set(wire.ElectionKey("e"), foreignToken)
	in, err = e.Inspect(ctx)
	require.NoError(t, err)
	require.False(t, in.Nodes[0].Current, "the record names another token")
	require.NotNil(t, in.Nodes[0].Record)
	_, _, ok = in.Leader()
	require.True(t, ok, "two of three still agree")

	require.NoError(t, l.Unlock(ctx))
	in, err = e.Inspect(ctx)
	require.NoError(t, err)
	_, _, ok = in.Leader()
	require.False(t, ok, "the leader resigned")
	_, err = c.Election("").Inspect(ctx)
	require.Error(t, err)
}
