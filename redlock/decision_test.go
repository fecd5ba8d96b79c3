package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/clock"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// lateReader is the real clock, except that every timer has fired by the
// time it is read: the coordinating goroutine was descheduled past the
// node timeout while the replies came in.
type lateReader struct{ clock.Clock }

func (l lateReader) NewTimer(time.Duration) clock.Timer { return firedTimer{l.Clock.NewTimer(0)} }

type firedTimer struct{ clock.Timer }

func (f firedTimer) C() <-chan time.Time {
	time.Sleep(time.Millisecond) // the zero timer has fired
	return f.Timer.C()
}

func TestTryLock_repliesThatArrivedBeforeTheTimerWasReadCount(t *testing.T) {
	pools := make([]pool.Pool, 5)
	for i, n := range newTestNodes(t, 5) {
		pools[i] = syncStarter{n}
	}
	for attempt := range 20 {
		c, err := New(pools, WithClock(lateReader{clock.Real()}), WithRestartSafety(0))
		require.NoError(t, err)
		l, err := c.TryLock(context.Background(), fmt.Sprintf("k%d", attempt), ttl)
		require.NoError(t, err, "attempt %d: five OK replies were in when the timer was read", attempt)
		require.NoError(t, l.Unlock(context.Background()))
		require.NoError(t, c.Close())
	}
}

func TestQuorumError_tellsNodesNotAwaitedFromNodesThatTimedOut(t *testing.T) {
	// Decided early: three refusals make a quorum impossible, and the
	// held nodes were simply not waited for.
	c, nodes, _ := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.set("k", "foreign")
	}
	open3, open4 := nodes[3].hold(), nodes[4].hold()
	// The round as it is decided (a refused TryLock goes on to wait for
	// every node: TestTryLock_waitsForTheStragglersAtMostANodeTimeout).
	r, err := c.run(context.Background(), request{cmd: "SET", args: wire.SetArgs("k", "tok", ttl.Milliseconds()), status: setStatus})
	require.NoError(t, err)
	err = c.quorumError(OpAcquire, "k", r, ErrNotAcquired, 0)
	open3()
	open4()
	require.Contains(t, err.Error(), "node4:6379 not awaited")
	require.NotContains(t, err.Error(), "node timeout")

	// Timed out: the round needed them and they did not answer.
	c2, nodes2, clk2 := newFakeClient(t, 5)
	nodes2[0].set("k", "foreign")
	for _, n := range nodes2[2:] {
		n.hold()
	}
	done := make(chan error, 1)
	go func() {
		_, err := c2.TryLock(context.Background(), "k", ttl)
		done <- err
	}()
	require.True(t, clk2.WaitTimers(1, nil))
	clk2.Advance(time.Minute)
	err = <-done
	qe := quorumError(t, err)
	for i := 2; i < 5; i++ {
		require.Equal(t, NodePending, qe.Nodes[i].Status)
		require.ErrorIs(t, qe.Nodes[i].Err, errNoReply)
	}
	require.Contains(t, err.Error(), "node5:6379 no reply within the node timeout")
}

func TestTryLock_failureWaitsForTheReleasesItOwesAtMostANodeTimeout(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	for _, n := range nodes[:3] {
		n.failWith(errors.New("connection reset"), callSet) // the SET may have landed
		n.hold("release")                                   // and the node is slow to answer the release
	}
	done := tryLockAsync(c, "k")
	require.Eventually(t, func() bool { return nodes[0].parkedCount() == 1 }, 5*time.Second, time.Millisecond,
		"the release owed to a failed node is sent")
	require.Never(t, func() bool { return len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"TryLock returned before the releases it owes were answered or timed out")
	clk.Advance(c.cfg.nodeTimeout)
	r := <-done
	require.ErrorIs(t, r.err, ErrNotAcquired)
	require.Equal(t, 3, quorumError(t, r.err).Count(NodeFailed))
}
