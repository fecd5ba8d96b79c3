package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/stretchr/testify/require"
)

func refused(ttl time.Duration) NodeResult { return NodeResult{Status: NodeRefused, TTL: ttl} }

func TestRetryAfter(t *testing.T) {
	ok := NodeResult{Status: NodeOK}
	failed := NodeResult{Status: NodeFailed}
	pending := NodeResult{Status: NodePending}
	for _, tc := range []struct {
		name  string
		nodes []NodeResult
		want  time.Duration
		known bool
	}{
		{"all refused: the third shortest", []NodeResult{refused(5), refused(1), refused(4), refused(2), refused(3)}, 3, true},
		{"two free nodes: the shortest", []NodeResult{ok, failed, refused(7), refused(9), refused(8)}, 7, true},
		{"silent nodes count as free", []NodeResult{pending, pending, refused(7), refused(9), refused(8)}, 7, true},
		{"a key without TTL", []NodeResult{refused(-1), refused(1), refused(4), refused(2), refused(3)}, 0, false},
		{"refusals do not rule out a quorum", []NodeResult{failed, failed, failed, refused(9), refused(8)}, 0, false},
		{"a reservation about to lapse", []NodeResult{refused(0), refused(0), refused(0), ok, ok}, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, known := retryAfter(tc.nodes, 3)
			require.Equal(t, tc.known, known)
			require.Equal(t, tc.want, d)
		})
	}
}

// A Lock that gives up leaves the queue on every node, but on a node that
// has not answered its latest round only once it has: a release that
// overtook the round (pools with several connections a node) would let
// the round queue the caller again.
func TestLock_givingUpLeavesTheQueueAfterTheLatestRound(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5, WithRetry(time.Hour, time.Hour))
	for _, n := range nodes {
		n.set("k", "someone-else")
	}
	open := nodes[0].hold() // node 0 answers nothing until opened
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Fenced: its first round is the script round, its only one here.
		_, err := c.Lock(ctx, "k", time.Second, WithFencing())
		done <- err
	}()
	// The round waits on node 0; the others refused it.
	require.Eventually(t, func() bool { return nodes[0].parkedCount() == 1 }, 10*time.Second, time.Millisecond)
	cancel()
	require.Never(t, func() bool { return nodes[0].parkedCount() > 1 || len(done) > 0 }, 50*time.Millisecond, time.Millisecond,
		"the release went to node 0 before its round was answered, or the call returned before node 0 answered the release")

	open()
	require.ErrorIs(t, <-done, context.Canceled)
	for i, n := range nodes {
		// Done when returned: every node had answered.
		require.Equal(t, 1, n.count("release"), "node %d", i)
	}
	calls := nodes[0].callLog()
	require.Equal(t, callRelease, calls[len(calls)-1], "node 0: %v", calls)
	for i, n := range nodes {
		require.Zero(t, n.zcard(wire.WaitersKey("k")), "node %d still queues the call", i)
	}
}

// A waiting call whose context ends while its latest round has no answer
// yet reports the round before, which the nodes answered with an error
// reply that names the command the user may not run: the context cut
// only the round, not what the nodes said before it.
func TestWaiting_aRoundCutByTheContextKeepsWhatTheNodesLastAnswered(t *testing.T) {
	const denied = "NOPERM this user has no permissions to run the 'hget' command"
	for _, tc := range []struct {
		name string
		kind string // the acquisition's call kind
		lock func(c *Client, ctx context.Context) error
	}{
		{"Lock", callSet, func(c *Client, ctx context.Context) error {
			_, err := c.Lock(ctx, "k", ttl)
			return err
		}},
		{"LockMulti", callMulti, func(c *Client, ctx context.Context) error {
			_, err := c.LockMulti(ctx, []string{"k1", "k2"}, ttl)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := make(signalRetry, 1) // 100ms between rounds
			c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
			for _, n := range nodes {
				n.failWith(pool.ReplyError(denied), tc.kind)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- tc.lock(c, ctx) }()
			require.Equal(t, 1, <-asked)            // two rounds answered with the error
			require.True(t, clk.WaitTimers(1, nil)) // the call sleeps
			for i, n := range nodes {
				// Every node has answered both rounds (some after their
				// round was decided), and answers no later one.
				require.Eventually(t, func() bool { return n.count(tc.kind) == 2 }, 10*time.Second, time.Millisecond, "node %d", i)
				n.hold(tc.kind)
			}
			clk.Advance(100 * time.Millisecond)
			for i, n := range nodes {
				require.Eventually(t, func() bool { return n.parkedCount() == 1 }, 10*time.Second, time.Millisecond, "node %d", i)
			}
			cancel()
			// The call's end waits for the held nodes until the node
			// timeout (done when returned).
			err := advanceUntil(t, clk, c.cfg.nodeTimeout, done)
			require.ErrorIs(t, err, ErrNotAcquired)
			require.ErrorIs(t, err, context.Canceled)
			// The round before was decided by its first three errors.
			qe := quorumError(t, err)
			require.Greater(t, qe.Count(NodeFailed), len(nodes)-qe.Quorum, "%v", err)
			for i, n := range qe.Nodes {
				require.Equal(t, nodes[i].addr, n.Addr)
				if n.Status == NodeFailed {
					require.ErrorContains(t, n.Err, "'hget'", "node %d", i)
				}
			}
		})
	}
}

// A Lock that gives up leaves the queue of a node whose pool could not
// send the leave at once (no connection): the leave is owed, sent again
// until the node answers, instead of leaving the call queued there (and
// a key handed to it held) until its entry or the key runs out.
func TestLock_givingUpLeavesTheQueueOfANodeThatMissedTheLeave(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5, WithRetry(time.Hour, time.Hour))
	for _, n := range nodes {
		n.set("k", "someone-else")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Lock(ctx, "k", time.Second, WithFencing()) // fenced: its first round queues it
		done <- err
	}()
	for _, n := range nodes {
		require.Eventually(t, func() bool { return n.zcard(wire.WaitersKey("k")) == 1 }, 10*time.Second, time.Millisecond)
	}
	lost := nodes[4]
	lost.failWith(&pool.NodeError{Addr: lost.Addr(), Op: "dial", Err: errors.New("still connecting")}, callRelease)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.Eventually(t, func() bool { return lost.count(callRelease) >= 1 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 1, lost.zcard(wire.WaitersKey("k")))
	lost.failWith(nil)
	require.Eventually(t, func() bool {
		clk.Advance(owedPauseMin)
		return lost.zcard(wire.WaitersKey("k")) == 0
	}, 10*time.Second, time.Millisecond, "the call stayed queued on the node that missed its leave")
}
