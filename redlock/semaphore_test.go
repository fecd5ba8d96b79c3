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

func TestSemaphore_holdsAtMostItsPermits(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	s := c.Semaphore("pool", 2)
	ctx := context.Background()
	// Each round is decided by a quorum: its command may still be on its
	// way to the other nodes, where the next round could overtake it
	// (these nodes take each call in a goroutine of its own), take the
	// slot it would have taken, and leave it a slot it then gives up. The
	// test waits for each round on every node.
	settled := func(slot int) {
		for _, n := range nodes {
			require.Eventually(t, func() bool {
				_, held := n.get(wire.PermitKey("pool", slot))
				return held
			}, 5*time.Second, time.Millisecond, "slot %d is held on %s", slot, n.addr)
		}
	}
	a, err := s.TryAcquire(ctx, ttl)
	require.NoError(t, err)
	settled(0)
	b, err := s.TryAcquire(ctx, ttl)
	require.NoError(t, err)
	settled(1)
	require.Equal(t, wire.PermitKey("pool", 0), a.Key(), "the first free slot, on every node")
	require.Equal(t, wire.PermitKey("pool", 1), b.Key())

	_, err = s.TryAcquire(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.True(t, quorumError(t, err).Busy(), "every permit is held: %v", err)

	require.NoError(t, a.Extend(ctx, 2*ttl))
	require.NoError(t, a.Unlock(ctx))
	for _, n := range nodes {
		require.Eventually(t, func() bool {
			_, held := n.get(wire.PermitKey("pool", 0))
			return !held
		}, 5*time.Second, time.Millisecond, "the released slot is free on %s", n.addr)
	}
	a2, err := s.TryAcquire(ctx, ttl)
	require.NoError(t, err)
	require.Equal(t, a.Key(), a2.Key(), "the freed slot is taken again")
	require.NoError(t, a2.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
}

// The nodes take different slots when they do not agree on which are
// free: the permit is the slot a quorum took, and the others give theirs
// up.
func TestSemaphore_takesTheSlotAQuorumTookAndReleasesTheRest(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	s := c.Semaphore("pool", 2)
	for _, n := range nodes[:3] {
		n.set(wire.PermitKey("pool", 0), "foreign") // nodes 0-2 take slot 1, nodes 3-4 slot 0
	}
	l, err := s.TryAcquire(context.Background(), ttl)
	require.NoError(t, err)
	require.Equal(t, wire.PermitKey("pool", 1), l.Key())
	for _, n := range nodes[3:] {
		require.Eventually(t, func() bool {
			_, held := n.get(wire.PermitKey("pool", 0))
			return !held
		}, 5*time.Second, time.Millisecond, "%s gives up the slot it took", n.addr)
	}
}

// No slot on a quorum: the call fails, and every node gives up what it
// took.
func TestSemaphore_aSplitTakesNothing(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	s := c.Semaphore("pool", 3)
	// Nodes 0-1 take slot 0, nodes 2-3 slot 1, node 4 slot 2.
	for _, n := range nodes[2:] {
		n.set(wire.PermitKey("pool", 0), "foreign")
	}
	nodes[4].set(wire.PermitKey("pool", 1), "foreign")
	_, err := s.TryAcquire(context.Background(), ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.False(t, quorumError(t, err).Busy(), "the nodes had permits free: %v", err)
	for i, n := range nodes {
		for slot := range 3 {
			require.Eventually(t, func() bool {
				v, _ := n.get(wire.PermitKey("pool", slot))
				return v == "" || v == "foreign"
			}, 5*time.Second, time.Millisecond, "node %d slot %d is given up", i, slot)
		}
	}
}

func TestSemaphore_clientsThatDisagreeOnPermitsFail(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	ctx := context.Background()
	l, err := c.Semaphore("pool", 2).TryAcquire(ctx, ttl)
	require.NoError(t, err)
	_, err = c.Semaphore("pool", 3).TryAcquire(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorContains(t, err, `semaphore "pool" has 2 permits on this node, but this Client gives it 3`)
	require.NoError(t, l.Unlock(ctx))
}

func TestSemaphore_badArguments(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	ctx := context.Background()
	for _, tc := range []struct {
		s    *Semaphore
		want string
	}{
		{c.Semaphore("pool", 0), "0 permits: a semaphore has from 1 to 64"},
		{c.Semaphore("pool", MaxPermits+1), "65 permits"},
		{c.Semaphore("", 1), "empty name"},
	} {
		_, err := tc.s.TryAcquire(ctx, ttl)
		require.ErrorContains(t, err, tc.want)
		_, err = tc.s.Acquire(ctx, ttl)
		require.ErrorContains(t, err, tc.want)
	}
	//lint:ignore SA1012 a nil context is what is tested
	_, err := c.Semaphore("pool", 1).TryAcquire(nil, ttl)
	require.ErrorIs(t, err, errNilContext)
}

// Acquire waits until a permit is released.
func TestSemaphore_acquireWaitsForAPermit(t *testing.T) {
	asked := make(signalRetry, 1)
	c, _, clk := newFakeClient(t, 5, withPacer(asked))
	s := c.Semaphore("pool", 1)
	ctx := context.Background()
	held, err := s.TryAcquire(ctx, ttl)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := s.Acquire(ctx, ttl)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	<-asked // refused twice: about to sleep
	require.True(t, clk.WaitTimers(1, nil))
	require.NoError(t, held.Unlock(ctx))
	clk.Advance(100 * time.Millisecond) // the back-off; the fake nodes announce nothing
	require.NoError(t, <-got)
}

// A fenced permit's fence is its slot's: each acquisition of a slot gets
// a larger one than the slot's previous holder. The slots share their
// hash slot's fence floor, so the other slot's first fence is larger
// than every fence before it too.
func TestSemaphore_fencedPermitsCountPerSlot(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	s := c.Semaphore("pool", 2)
	ctx := context.Background()
	first, err := s.TryAcquire(ctx, ttl, WithFencing())
	require.NoError(t, err)
	require.Equal(t, uint64(1), first.Fence())
	require.NoError(t, first.Unlock(ctx))
	again, err := s.TryAcquire(ctx, ttl, WithFencing())
	require.NoError(t, err)
	require.Equal(t, first.Key(), again.Key(), "the first free slot")
	require.Equal(t, uint64(2), again.Fence())
	other, err := s.TryAcquire(ctx, ttl, WithFencing())
	require.NoError(t, err)
	require.NotEqual(t, again.Key(), other.Key())
	require.Equal(t, uint64(3), other.Fence(), "the other slot's first fence: above the floor the first slot raised")
	plain, err := c.Semaphore("pool", 2).TryAcquire(ctx, ttl)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.Nil(t, plain)
}

// An Acquire that gives up leaves the queue on every node, but only once
// a node that has not answered its latest round has: a leave that
// overtook the round (pools with several connections a node) would let
// the round queue the call again.
func TestSemaphore_givingUpLeavesTheQueueAfterTheLatestRound(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5, WithRetry(time.Hour, time.Hour))
	for _, n := range nodes {
		n.set(wire.PermitKey("pool", 0), "someone-else")
	}
	open := nodes[0].hold(callSemAcquire) // node 0 answers no round until opened
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Semaphore("pool", 1).Acquire(ctx, time.Second)
		done <- err
	}()
	// Two rounds (the first, and the one asked once subscribed) wait on
	// node 0; the others refused them, and the call sleeps.
	require.Eventually(t, func() bool { return nodes[0].parkedCount() == 2 }, 10*time.Second, time.Millisecond)
	require.True(t, clk.WaitTimers(1, nil))
	cancel()
	require.Never(t, func() bool { return nodes[0].count(callSemRelease) > 0 || len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"the leave went to node 0 before its rounds were answered, or the call returned before node 0 answered the leave")

	open()
	require.ErrorIs(t, <-done, context.Canceled)
	for i, n := range nodes {
		// Done when returned: every node had answered.
		require.Equal(t, 1, n.count(callSemRelease), "node %d", i)
	}
	calls := nodes[0].callLog()
	require.Equal(t, callSemRelease, calls[len(calls)-1], "node 0: %v", calls)
	for i, n := range nodes {
		require.Zero(t, n.zcard(wire.PermitWaitersKey("pool")), "node %d still queues the call", i)
	}
}

// A permit won where a node took another slot: the node gives that slot
// up in the background, and should that release not have landed yet, the
// permit's Unlock gives up every slot the token holds there, so that none
// is left once it returns (done when returned).
func TestSemaphore_unlockOfAPermitWonWhereANodeTookAnotherSlotFreesThatSlotToo(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	odd := nodes[4]
	odd.set(wire.PermitKey("pool", 0), "someone-else") // node 4 takes slot 1
	odd.failWith(&pool.NodeError{Addr: odd.Addr(), Op: "dial", Err: errors.New("still connecting")}, callSemRelease)
	l, err := c.Semaphore("pool", 2).TryAcquire(context.Background(), time.Minute)
	require.NoError(t, err)
	require.Equal(t, wire.PermitKey("pool", 0), l.Key())
	require.Eventually(t, func() bool { return odd.count(callSemRelease) >= 1 }, 5*time.Second, time.Millisecond,
		"node 4 is sent the release of slot 1")
	v, _ := odd.get(wire.PermitKey("pool", 1))
	require.Equal(t, l.Token(), v, "the release of slot 1 failed: node 4 still holds it")
	odd.failWith(nil)
	require.NoError(t, l.Unlock(context.Background()))
	for i, n := range nodes {
		for s := range 2 {
			v, _ := n.get(wire.PermitKey("pool", s))
			require.NotEqual(t, l.Token(), v, "node %d slot %d holds the token after Unlock returned", i, s)
		}
	}
}
