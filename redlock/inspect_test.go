package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

func TestInspect_aFreeKey(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	in, err := c.Inspect(context.Background(), "k")
	require.NoError(t, err)
	require.Equal(t, "k", in.Key)
	require.Equal(t, 2, in.Quorum)
	require.Len(t, in.Nodes, 3)
	for _, n := range in.Nodes {
		require.NoError(t, n.Err)
		require.False(t, n.Held)
		require.Zero(t, n.TTL)
		require.Empty(t, n.Holder)
		require.Zero(t, n.Fence)
	}
	require.Empty(t, in.Holders())
}

// The holder is named by its Client's ID, on every node it holds, and
// seen as such by another Client on the same nodes.
func TestInspect_namesTheHoldingClient(t *testing.T) {
	nodes := newTestNodes(t, 3)
	holder, _ := newClientOn(t, nodes)
	other, _ := newClientOn(t, nodes)
	_, err := holder.TryLock(context.Background(), "k", time.Minute, WithFencing())
	require.NoError(t, err)

	for _, c := range []*Client{holder, other} {
		in, err := c.Inspect(context.Background(), "k")
		require.NoError(t, err)
		who := in.Holders()
		require.Len(t, who, 1)
		require.Equal(t, holder.ID(), who[0].Holder)
		require.Equal(t, time.Minute, who[0].TTL)
		heldOn, fenced := 0, 0
		for _, n := range in.Nodes {
			if n.Fence > 0 {
				fenced++ // the write-back reached a quorum; the rest may be on its way
			}
			if !n.Held {
				continue
			}
			heldOn++
			require.Equal(t, holder.ID(), n.Holder)
			require.Equal(t, time.Minute, n.TTL, "the test servers' clocks stand still")
		}
		require.GreaterOrEqual(t, heldOn, 2)
		require.GreaterOrEqual(t, fenced, 2)
	}
	require.NotEqual(t, holder.ID(), other.ID())
}

func TestInspect_aSilentNodeHasItsErrorAndTheOthersAnswer(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	nodes[2].failWith(errors.New("connection refused"))
	in, err := c.Inspect(context.Background(), "k")
	require.NoError(t, err)
	require.NoError(t, in.Nodes[0].Err)
	require.ErrorContains(t, in.Nodes[2].Err, "connection refused")
	require.Equal(t, nodes[2].Addr(), in.Nodes[2].Addr)
}

func TestInspect_andForceRelease_refuseBadCallsAndAClosedClient(t *testing.T) {
	c, _, _ := newFakeClient(t, 3)
	_, err := c.Inspect(context.Background(), "")
	require.Error(t, err)
	require.Error(t, c.ForceRelease(context.Background(), ""))
	//lint:ignore SA1012 a nil context is what is tested
	_, err = c.Inspect(nil, "k")
	require.Error(t, err)
	require.NoError(t, c.Close())
	_, err = c.Inspect(context.Background(), "k")
	require.ErrorIs(t, err, pool.ErrClosed)
	require.ErrorIs(t, c.ForceRelease(context.Background(), "k"), pool.ErrClosed)
}

// A forced release frees the key whatever token it holds; the holder
// learns of it at its next extension.
func TestForceRelease_freesAHeldKeyAndTheHolderLosesItAtItsNextExtension(t *testing.T) {
	nodes := newTestNodes(t, 3)
	holder, _ := newClientOn(t, nodes)
	operator, _ := newClientOn(t, nodes)
	ctx := context.Background()
	l, err := holder.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err)
	lctx := l.Context()
	// The round was decided at the quorum: a SET still on its way would
	// take the key again after the forced release.
	waitHeld(t, nodes, "k", l.Token())

	require.NoError(t, operator.ForceRelease(ctx, "k"))
	for _, n := range nodes {
		_, ok := n.get("k")
		require.False(t, ok, "%s still holds the key", n.Addr())
	}
	l2, err := operator.TryLock(ctx, "k", time.Minute)
	require.NoError(t, err, "the key is free for anyone")
	require.NoError(t, l2.Unlock(ctx))

	require.ErrorIs(t, l.Extend(ctx, time.Minute), ErrLockLost)
	require.ErrorIs(t, context.Cause(lctx), ErrLockLost)
	require.NoError(t, operator.ForceRelease(ctx, "k"), "a free key is nothing to release")
}

func TestForceRelease_namesTheNodesThatDidNotAnswer(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 3)
	nodes[1].failWith(errors.New("i/o timeout"))
	err := c.ForceRelease(context.Background(), "k")
	require.ErrorContains(t, err, nodes[1].Addr())
	require.ErrorContains(t, err, "i/o timeout")
	var ne *pool.NodeError
	require.ErrorAs(t, err, &ne)
}

func TestTokenClient_readsTheClientOfEveryTokenKind(t *testing.T) {
	for token, want := range map[string]string{
		"abc12:0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11":       "abc12",
		"abc12.xy9/0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11":   "abc12",
		"abc12.xy9/0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11/3": "abc12",
		"0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11":             "",
		"ABC:0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11":         "",
		"abc12:short":                "",
		"redlock:reserved:abc12.xy9": "",
		"":                           "",
		"abc12.xy9/0e7f1c9a-5b7e-4f1e-9b0a-2c7d0f6e8a11/zero": "",
	} {
		require.Equal(t, want, tokenClient(token), "%q", token)
	}
}
