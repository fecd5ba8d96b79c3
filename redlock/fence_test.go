package redlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/stretchr/testify/require"
)

func TestFence_startsAtOneAndGrowsWithEachAcquisition(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	for want := uint64(1); want <= 5; want++ {
		l, err := c.TryLock(ctx, "k", ttl, WithFencing())
		require.NoError(t, err)
		require.Equal(t, want, l.Fence())
		require.NoError(t, l.Unlock(ctx))
	}
	c.Close()
	for _, n := range nodes {
		v, _ := n.get(wire.FenceKey("k"))
		require.Equal(t, "5", v, "%s: the fence is stored on every node that answers", n.addr)
	}
}

func TestFence_unfencedLockHasNoFenceAndOneRound(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.Zero(t, l.Fence())
	require.NoError(t, c.Close())
	for _, n := range nodes {
		require.Zero(t, n.count("fence-store"))
		_, ok := n.get(wire.FenceKey("k"))
		require.False(t, ok)
	}
}

// The [10,0,0,0,0] example: node 1's counter is 10, the others have none.
// A lock granted by nodes {1,2,3} gets 11 and stores it on that quorum; a
// later lock granted by {3,4,5} reads 11 on node 3 and gets 12. A naive
// max over the granting nodes without the store round would give 2.
func TestFence_writeBackMakesAQuorumHoldTheFence(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx := context.Background()
	nodes[0].set(wire.FenceKey("k"), "10")
	failOn(nodes[3:], errors.New("down"))
	l, err := c.TryLock(ctx, "k", ttl, WithFencing())
	require.NoError(t, err)
	require.Equal(t, uint64(11), l.Fence())
	for _, n := range nodes[:3] {
		v, _ := n.get(wire.FenceKey("k"))
		require.Equal(t, "11", v)
	}
	require.NoError(t, l.Unlock(ctx))

	failOn(nodes[3:], nil)
	nodes[0].set("k", "foreign")
	nodes[1].set("k", "foreign")
	l2, err := c.TryLock(ctx, "k", ttl, WithFencing())
	require.NoError(t, err)
	require.Equal(t, uint64(12), l2.Fence(), "a lock on {3,4,5} after the one fenced 11")
}

// A round can be granted by some nodes before an earlier holder wrote its
// fence back, and read stale counters there. Here lock A (played on the
// nodes) held {0,1,2} with fence 1, wrote it back on {1,2,3,4} (not on
// node 0) and released node 0. Lock B's round was granted by nodes 3 and
// 4 before that write-back and by node 0 after the release: every counter
// it read is 0, so it proposes 1, A's fence. Nodes 1-4 refuse it, and B
// writes back 2.
func TestFence_aRoundGrantedBeforeAnEarlierWriteBackStillGetsALargerFence(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.set("k", "lock-A")
	}
	open := nodes[0].hold("SET")
	done := tryLockAsync(c, "k", WithFencing())
	require.Eventually(t, func() bool {
		for _, n := range nodes[1:] {
			if n.count("SET") == 0 {
				return false
			}
		}
		return nodes[0].parkedCount() == 1
	}, 5*time.Second, time.Millisecond, "granted by nodes 3 and 4, refused by 1 and 2, waiting for node 0")
	for _, n := range nodes[1:] {
		n.set(wire.FenceKey("k"), "1")
	}
	loseOn(nodes[:1], "k")
	open()
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, uint64(2), r.l.Fence(), "1 is lock A's fence")
	// The write-backs go to every node; the round returns on a quorum.
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if v, _ := n.get(wire.FenceKey("k")); v != "2" || n.count("fence-store") != 2 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "two write-back rounds, and every node holds 2")
}

// Write-backs refused round after round (other write-backs keep landing
// above them) end the acquisition after fenceRounds rounds.
func TestFence_writeBackRefusedEveryRoundFailsAndReleases(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes {
		n.setFenceAhead(true)
	}
	_, err := c.TryLock(context.Background(), "k", ttl, WithFencing())
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.Equal(t, OpFence, qe.Op)
	require.GreaterOrEqual(t, qe.Count(NodeRefused), 3, "a quorum is out of reach")
	requireFree(t, c, nodes, "k")
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.count("fence-store") != fenceRounds {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond, "every round reached every node, and no round followed")
}

func TestFence_storeRoundWithoutQuorumFailsAndReleases(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.failWith(errors.New("read only"), callFenceStore)
	}
	_, err := c.TryLock(context.Background(), "k", ttl, WithFencing())
	require.ErrorIs(t, err, ErrNotAcquired)
	qe := quorumError(t, err)
	require.Equal(t, OpFence, qe.Op)
	require.Equal(t, 3, qe.Count(NodeFailed), "the nodes that could not store the fence")
	requireFree(t, c, nodes, "k")
}

// A waiting Lock learns from the acquisition round whether the script
// queued it, so take returns that round even when the write-back
// failed.
func TestFence_failedWriteBackStillReturnsTheAcquisitionRound(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.failWith(errors.New("read only"), callFenceStore)
	}
	cfg, err := c.lockConfig("k", ttl, []LockOption{WithFencing()})
	require.NoError(t, err)
	g, err := c.mutexGrab(mutex{}, "k", ttl, cfg, nil)
	require.NoError(t, err)
	_, r, err := c.take(context.Background(), &g)
	require.ErrorIs(t, err, ErrNotAcquired)
	require.NotNil(t, r)
	require.True(t, r.ok, "the acquisition round itself had a quorum")
}

func TestFence_validityCountsTheStoreRound(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	var open []func()
	for _, n := range nodes {
		open = append(open, n.hold("fence-store"))
	}
	done := tryLockAsync(c, "k", WithFencing())
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if n.parkedCount() == 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	require.True(t, clk.WaitTimers(1, nil)) // the store round's timer
	clk.Advance(300 * time.Millisecond)
	for _, o := range open {
		o()
	}
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, epoch.Add(ttl-wantDrift), r.l.Until(), "until counts from the first round's start")
	require.Equal(t, ttl-300*time.Millisecond-wantDrift, r.l.Validity())
}

// A write-back round that leaves too little validity fails the
// acquisition; refused, it is not repeated either.
func TestFence_storeRoundEatingTheValidityFails(t *testing.T) {
	for _, refused := range []bool{false, true} {
		t.Run(fmt.Sprintf("refused=%v", refused), func(t *testing.T) {
			c, nodes, clk := newFakeClient(t, 5)
			var open []func()
			for _, n := range nodes {
				n.setFenceAhead(refused)
				open = append(open, n.hold("fence-store"))
			}
			done := make(chan error, 1)
			go func() {
				_, err := c.TryLock(context.Background(), "k", ttl, WithFencing(), WithMinValidity(time.Second))
				done <- err
			}()
			require.Eventually(t, func() bool { return nodes[0].parkedCount() > 0 }, 5*time.Second, time.Millisecond)
			require.True(t, clk.WaitTimers(1, nil))
			clk.Advance(ttl - wantDrift - time.Second) // exactly the minimum left: too little
			for _, o := range open {
				o()
			}
			err := <-done
			require.ErrorIs(t, err, ErrNotAcquired)
			requireFree(t, c, nodes, "k")
			for _, n := range nodes {
				require.LessOrEqual(t, n.count("fence-store"), 1, n.addr)
			}
		})
	}
}

func TestFence_extendKeepsTheFence(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl, WithFencing())
	require.NoError(t, err)
	require.NoError(t, l.Extend(context.Background(), ttl))
	require.Equal(t, uint64(1), l.Fence())
}

func TestFence_nodeThatLostItsDataIsReported(t *testing.T) {
	var log syncBuffer
	c, nodes, _ := newFakeClient(t, 5, WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	resets := func() uint64 {
		c.epochMu.Lock()
		defer c.epochMu.Unlock()
		return c.resets
	}
	ctx := context.Background()
	var last uint64
	acquire := func() {
		t.Helper()
		l, err := c.TryLock(ctx, "k", ttl, WithFencing())
		require.NoError(t, err)
		require.Equal(t, last+1, l.Fence(), "the other nodes still hold the counter")
		last = l.Fence()
		require.NoError(t, l.Unlock(ctx))
		waitHeldNone(t, nodes, "k")
	}
	seen := func() bool { // the client knows node 2's epoch
		c.epochMu.Lock()
		defer c.epochMu.Unlock()
		return c.epochs != nil && len(c.epochs[1]) > 0
	}
	for i := 0; i < 1000 && !seen(); i++ { // node 2 may answer after the decisions
		acquire()
	}
	require.True(t, seen())
	require.Zero(t, resets())

	// Node 2 restarts empty: its epoch and counters are gone.
	nodes[1].flush()
	for i := 0; i < 1000 && resets() == 0; i++ {
		acquire()
	}
	require.Equal(t, uint64(1), resets())
	out := log.String()
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Contains(t, out, "node lost its data")
	require.Contains(t, out, "its fence epoch changed")
	require.Contains(t, out, "node="+nodes[1].addr)
}

// waitHeldNone waits until no node holds key.
func waitHeldNone(t *testing.T, nodes []*testNode, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, n := range nodes {
			if _, ok := n.get(key); ok {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
}

func TestFence_concurrentAcquisitionsGetUniqueIncreasingFences(t *testing.T) {
	// Many rounds of scripts: on redis-server when there is one.
	c, _ := newClientOn(t, newRedisNodes(t, 5))
	ctx := context.Background()
	var mu sync.Mutex
	var order []uint64 // fences in the order the holders held the lock
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				l, err := c.TryLock(ctx, "k", ttl, WithFencing())
				// The fake clock never ends a retry delay: back off here,
				// a random time up to a ceiling that doubles with each
				// failure in a row, as Lock does.
				for ceiling := 100 * time.Microsecond; errors.Is(err, ErrNotAcquired); ceiling = min(2*ceiling, 20*time.Millisecond) {
					time.Sleep(rand.N(ceiling))
					l, err = c.TryLock(ctx, "k", ttl, WithFencing())
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				order = append(order, l.Fence())
				mu.Unlock()
				if err := l.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, order, 200)
	for i := 1; i < len(order); i++ {
		require.Greater(t, order[i], order[i-1], "fence %d follows %d", order[i], order[i-1])
	}
}
