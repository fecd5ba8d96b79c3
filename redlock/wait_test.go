package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/redlock/internal/wire"
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
	require.ErrorIs(t, <-done, context.Canceled)
	require.Never(t, func() bool { return nodes[0].parkedCount() > 1 }, 50*time.Millisecond, time.Millisecond,
		"the release went to node 0 before its round was answered")

	open()
	for i, n := range nodes {
		require.Eventually(t, func() bool { return n.count("release") == 1 }, 10*time.Second, time.Millisecond, "node %d", i)
	}
	calls := nodes[0].callLog()
	require.Equal(t, callRelease, calls[len(calls)-1], "node 0: %v", calls)
	for i, n := range nodes {
		require.Zero(t, n.zcard(wire.WaitersKey("k")), "node %d still queues the call", i)
	}
}
