package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// An Unlock whose release one node never got (its pool had no connection
// to send it on) still owes that node the release: it is sent again in
// the background until the node answers, so the key does not stay there
// for its TTL. Whether the failure came before the round was decided or
// after (the node was not awaited), it is the same.
func TestUnlock_aReleaseANodeNeverGotIsSentAgain(t *testing.T) {
	for _, late := range []bool{false, true} {
		c, nodes, clk := newFakeClient(t, 5)
		ctx := context.Background()
		l, err := c.TryLock(ctx, "k", ttl)
		require.NoError(t, err)
		waitHeld(t, nodes, "k", l.Token())
		slow := nodes[4]
		open := func() {}
		if late {
			open = slow.hold(callRelease) // not awaited: the others decide
		}
		slow.failWith(&pool.NodeError{Addr: slow.Addr(), Op: "dial", Err: errors.New("still connecting")}, callRelease)
		unlocked := make(chan error, 1)
		go func() { unlocked <- l.Unlock(ctx) }()
		if late {
			// Unlock waits for the held node until the node timeout. (What
			// it returns depends on whether the other nodes' answers were
			// in when the clock moved: a node not in yet is released again
			// too.)
			require.Eventually(t, func() bool {
				return nodes[0].count(callRelease)+nodes[1].count(callRelease)+nodes[2].count(callRelease)+nodes[3].count(callRelease) == 4
			}, 5*time.Second, time.Millisecond)
			clk.Advance(c.cfg.nodeTimeout)
			<-unlocked
		} else {
			require.NoError(t, <-unlocked)
		}
		open()
		require.Eventually(t, func() bool { return slow.count(callRelease) >= 2 }, 5*time.Second, time.Millisecond,
			"the release was not sent again")
		_, held := slow.get("k")
		require.True(t, held, "late %v: the node never got a release", late)
		slow.failWith(nil)
		require.Eventually(t, func() bool {
			clk.Advance(owedPauseMin)
			_, held := slow.get("k")
			return !held
		}, 5*time.Second, time.Millisecond, "late %v: the key stayed on the node that missed the release", late)
	}
}
