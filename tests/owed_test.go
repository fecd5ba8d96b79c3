package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestTryLock_failedWhileNodesStalledLeavesNoKeyBlockingOthers(t *testing.T) {
	// Serial: its nodes must answer within tens of milliseconds (main_test.go).
	e := newEnv(t, 5)
	// The pools give up on a stalled node after 200ms and drop the
	// connection; the node still runs the SET it had read when it comes
	// back, long after every first release attempt timed out.
	pools := newPools(t, e.addrs, pool.WithIOTimeout(200*time.Millisecond))
	c := newClient(t, pools, redlock.WithNodeTimeout(50*time.Millisecond))
	key := newKey(t)
	stalled := []int{0, 2, 4}
	for _, i := range stalled {
		require.NoError(t, e.nodes[i].Pause())
		t.Cleanup(func() { _ = e.nodes[i].Resume() })
	}
	_, err := c.TryLock(ctxT(t, 10*time.Second), key, 30*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	time.Sleep(600 * time.Millisecond) // past the read timeout and the first releases
	for _, i := range stalled {
		require.NoError(t, e.nodes[i].Resume())
	}

	// Well before the 30s TTL, the token is gone from every node and
	// another client takes the key.
	other := newClient(t, newPools(t, e.addrs))
	require.Eventually(t, func() bool {
		for i := range e.nodes {
			if _, held := get(t, e.nodes[i], key); held {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "a failed acquisition's token stayed on the nodes that had stalled")
	l, err := other.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// countingNode is a pool.New node that counts the commands the Client
// starts on it: a paused node cannot be asked for its own counts. It
// starts them with the node's starter (async.StarterOf), and is a starter
// itself.
type countingNode struct {
	*pool.Node
	s starter
	n atomic.Int64
}

func (p *countingNode) Start(rcv async.Receiver, cmd string, args ...any) {
	p.n.Add(1)
	p.s.Start(rcv, cmd, args...)
}

func (p *countingNode) StartEval(rcv async.Receiver, s *pool.Script, args ...any) {
	p.n.Add(1)
	p.s.StartEval(rcv, s, args...)
}

func (p *countingNode) StartTx(rcv async.Receiver, key string, cmds [][]any) {
	p.n.Add(1)
	p.s.(async.TxStarter).StartTx(rcv, key, cmds)
}

func (p *countingNode) Do(ctx context.Context, cmd string, args ...any) (any, error) {
	p.n.Add(1)
	return p.Node.Do(ctx, cmd, args...)
}

func (p *countingNode) Eval(ctx context.Context, s *pool.Script, args ...any) (any, error) {
	p.n.Add(1)
	return p.Node.Eval(ctx, s, args...)
}

// countingPools returns pools over addrs that count their commands.
func countingPools(t *testing.T, addrs []string) ([]pool.Pool, []*countingNode) {
	t.Helper()
	ps := newPools(t, addrs)
	pools, nodes := make([]pool.Pool, len(ps)), make([]*countingNode, len(ps))
	for i, p := range ps {
		nodes[i] = &countingNode{Node: p.(*pool.Node), s: async.StarterOf[*pool.Script](p)}
		pools[i] = nodes[i]
	}
	return pools, nodes
}

// commandCounts reads each node's count.
func commandCounts(nodes []*countingNode) []int64 {
	out := make([]int64, len(nodes))
	for i, n := range nodes {
		out[i] = n.n.Load()
	}
	return out
}

// An owed release is tried again until the node answers, but no attempt
// starts once Close was called. An Unlock whose release timed out on
// three paused nodes started a new attempt on each when its first failed,
// after Close, and Close waited for those too: 4s, two I/O timeouts.
func TestClose_startsNoOwedReleaseAttemptOnceCalled(t *testing.T) {
	e := newEnv(t, 5)
	pools, nodes := countingPools(t, e.addrs)
	// Restart safety off: its checks are not what this test is about.
	c, err := redlock.New(pools, redlock.WithNodeTimeout(testNodeTimeout), redlock.WithRestartSafety(0))
	require.NoError(t, err)
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)
	for _, s := range e.nodes[:3] {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	}
	_ = l.Unlock(context.Background()) // times out on nodes 0-2: owed there
	time.Sleep(50 * time.Millisecond)
	requireCloseStartsNothing(t, c, nodes)
}

// requireCloseStartsNothing closes c and requires that no command started
// on nodes meanwhile, and that Close waited no longer than the commands
// under way (an I/O timeout) and some slack.
func requireCloseStartsNothing(t *testing.T, c *redlock.Client, nodes []*countingNode) {
	t.Helper()
	before := commandCounts(nodes)
	start := time.Now()
	require.NoError(t, c.Close())
	took := time.Since(start)
	after := commandCounts(nodes)
	for i := range after {
		after[i] -= before[i]
	}
	t.Logf("Close took %v (I/O timeout %v); commands started meanwhile: %v", took.Round(time.Millisecond), testReadTimeout, after)
	require.Equal(t, make([]int64, len(nodes)), after, "commands started after Close was called")
	require.Less(t, took, testReadTimeout+testReadTimeout/2, "Close waited past the commands under way")
}

// The same when the acquisition failed: a TryLock refused for three
// paused nodes owes them a release once their commands time out, after
// the call returned. Close waited for that time-out, then for a release
// attempt it started on each (4s, two I/O timeouts).
func TestClose_startsNoReleaseOfAFailedAcquisitionThatTimedOut(t *testing.T) {
	e := newEnv(t, 5)
	pools, nodes := countingPools(t, e.addrs)
	c, err := redlock.New(pools, redlock.WithNodeTimeout(testNodeTimeout), redlock.WithRestartSafety(0))
	require.NoError(t, err)
	for _, s := range e.nodes[:3] {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	}
	_, err = c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	requireCloseStartsNothing(t, c, nodes)
}

// Each failed round of a waiting Lock owes a release to the nodes that
// may have granted it, and on a stalled node every round may have. A
// later round of the same call undoes what an earlier one left there, so
// only the call's latest debt on a node goes on trying. Each round's debt
// used to retry on its own for the whole TTL: with three of five nodes
// paused, the traffic to them grew with every round the call made, and
// went on after it returned (75-113 commands per paused node in the 2s
// after an 8s wait, against the call's 23 rounds per 2s; 438 releases run
// by each node once it resumed).
func TestLock_aWaiterKeepsOneOwedReleaseGoingToAStalledNode(t *testing.T) {
	// Serial: its nodes must answer within tens of milliseconds (main_test.go).
	e := newEnv(t, 5)
	pools, nodes := countingPools(t, e.addrs)
	// Restart safety off: its checks are not what this test is about, and
	// with a 10ms node timeout a loaded machine can fail them.
	c := newClient(t, pools, redlock.WithNodeTimeout(10*time.Millisecond), redlock.WithRestartSafety(0))
	key := newKey(t)
	for _, s := range e.nodes[:3] {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	s0 := commandCounts(nodes)
	_, err := c.Lock(ctx, key, 30*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	s1 := commandCounts(nodes)
	time.Sleep(2 * time.Second)
	s2 := commandCounts(nodes)
	pace := (s1[3] - s0[3]) / 4 // the call's commands per 2s on a live node: a round, a release
	for i := range 3 {
		after := s2[i] - s1[i]
		t.Logf("node %d: %d commands in the 2s after Lock returned (the call's own pace: %d per 2s)", i, after, pace)
		require.LessOrEqual(t, after, 2*pace, "node %d: owed releases per 2s after the call ended", i)
	}
}
