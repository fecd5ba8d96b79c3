package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ended waits for ctx to end and returns its cause. The wait is bounded
// (real time) because a fake-clock timer ends the context from its own
// goroutine; nothing here sleeps.
func ended(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(5 * time.Second):
		t.Fatal("the lock's context did not end")
		return nil
	}
}

// loseOn deletes key on the nodes' servers, as if it had expired there.
func loseOn(nodes []*testNode, key string) {
	for _, n := range nodes {
		n.del(key)
	}
}

// failOn makes the nodes fail every call with err (nil: work again).
func failOn(nodes []*testNode, err error) {
	for _, n := range nodes {
		n.failWith(err)
	}
}

func TestLock_Context_deadlineIsTheValidityEndAndTheContextExpiresThen(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	ctx := l.Context()
	require.True(t, ctx == l.Context(), "every call returns the same context")

	dl, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, epoch.Add(ttl-wantDrift), dl)
	require.Equal(t, l.Until(), dl)

	clk.Set(dl.Add(-time.Nanosecond))
	require.NoError(t, ctx.Err(), "ended before the validity end")
	clk.Set(dl)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
	require.ErrorIs(t, ctx.Err(), context.Canceled)
}

func TestLock_Context_safetyMarginEndsItThatMuchEarlier(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl, WithSafetyMargin(2*time.Second))
	require.NoError(t, err)
	ctx := l.Context()
	dl, _ := ctx.Deadline()
	require.Equal(t, l.Until().Add(-2*time.Second), dl)

	clk.Set(dl.Add(-time.Nanosecond))
	require.NoError(t, ctx.Err())
	clk.Set(dl)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
	require.Equal(t, 2*time.Second, l.Validity(), "the lock itself is still valid for the margin")
}

func TestLock_Context_maxHoldEndsItBeforeTheValidity(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl, WithMaxHold(2*time.Second))
	require.NoError(t, err)
	ctx := l.Context()
	dl, _ := ctx.Deadline()
	require.Equal(t, epoch.Add(2*time.Second), dl)
	clk.Set(dl)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
}

func TestLock_Context_extendMovesTheDeadline(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	ctx := l.Context()
	old, _ := ctx.Deadline()

	clk.Advance(5 * time.Second)
	require.NoError(t, l.Extend(context.Background(), 20*time.Second))
	moved, _ := ctx.Deadline()
	require.Equal(t, epoch.Add(5*time.Second+20*time.Second-202*time.Millisecond), moved)
	require.Equal(t, l.Until(), moved)

	clk.Set(old)
	require.NoError(t, ctx.Err(), "ended at the deadline before the extension")
	clk.Set(moved.Add(-time.Nanosecond))
	require.NoError(t, ctx.Err())
	clk.Set(moved)
	require.ErrorIs(t, ended(t, ctx), ErrExpired)
}

func TestLock_Context_unlockEndsItWithErrReleased(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	ctx := l.Context()
	child, cancel := context.WithCancel(ctx)
	defer cancel()

	require.NoError(t, l.Unlock(context.Background()))
	require.Error(t, ctx.Err(), "Unlock returned before the context ended")
	require.ErrorIs(t, context.Cause(ctx), ErrReleased)
	require.ErrorIs(t, context.Cause(child), ErrReleased, "children end with the same cause")
	dl, _ := ctx.Deadline()
	require.Equal(t, epoch.Add(ttl-wantDrift), dl, "the deadline stays where it was")
}

func TestLock_Context_extendThatProvesTheLossEndsItWithErrLockLost(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	waitHeld(t, nodes, "k", l.Token())
	ctx := l.Context()
	loseOn(nodes[:3], "k")

	err = l.Extend(context.Background(), ttl)
	require.ErrorIs(t, err, ErrLockLost)
	require.Error(t, ctx.Err(), "Extend returned before the context ended")
	cause := context.Cause(ctx)
	require.ErrorIs(t, cause, ErrLockLost)
	require.Equal(t, 3, quorumError(t, cause).Count(NodeRefused), "the cause tells node by node")
}

func TestLock_Context_extendThatFailsWithoutProofOfLossKeepsIt(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	ctx := l.Context()
	before, _ := ctx.Deadline()
	failOn(nodes[:3], errors.New("connection refused"))

	err = l.Extend(context.Background(), ttl)
	require.ErrorIs(t, err, ErrLockLost)
	require.NoError(t, ctx.Err(), "unreachable nodes do not prove the loss; the validity still holds")
	after, _ := ctx.Deadline()
	require.Equal(t, before, after)
}

type ctxKey struct{}

func TestLock_Context_keepsTheAcquiringContextsValuesButNotItsCancellation(t *testing.T) {
	c, _, _ := newFakeClient(t, 5)
	acquiring, cancel := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "request-7"))
	l, err := c.TryLock(acquiring, "k", ttl)
	require.NoError(t, err)
	cancel()
	ctx := l.Context()
	require.NoError(t, ctx.Err())
	require.Equal(t, "request-7", ctx.Value(ctxKey{}))
}

func TestLock_Context_madeAfterTheLockEndedIsBornEnded(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	bg := context.Background()

	released, err := c.TryLock(bg, "released", ttl)
	require.NoError(t, err)
	require.NoError(t, released.Unlock(bg))
	require.ErrorIs(t, context.Cause(released.Context()), ErrReleased)

	lost, err := c.TryLock(bg, "lost", ttl)
	require.NoError(t, err)
	waitHeld(t, nodes, "lost", lost.Token())
	loseOn(nodes, "lost")
	require.ErrorIs(t, lost.Extend(bg, ttl), ErrLockLost)
	require.ErrorIs(t, context.Cause(lost.Context()), ErrLockLost)

	require.ErrorIs(t, context.Cause(c.Restore("restored", "some-token").Context()), ErrExpired,
		"a restored lock's validity is unknown until Extend")

	expired, err := c.TryLock(bg, "expired", ttl)
	require.NoError(t, err)
	clk.Set(expired.Until())
	require.ErrorIs(t, context.Cause(expired.Context()), ErrExpired)
}

func TestLock_Context_costsNothingUntilAskedFor(t *testing.T) {
	c, _, clk := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.Zero(t, clk.Timers(), "a lock nobody asked a context of arms no timer")
	require.Nil(t, l.ctx)
	l.Context()
	require.Equal(t, 1, clk.Timers())
	require.NoError(t, l.Unlock(context.Background()))
	require.Zero(t, clk.Timers(), "Unlock stops the context's timer")
}

func TestLock_Extend_afterTheContextEndedNeverRevivesTheHandle(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	waitHeld(t, nodes, "k", l.Token())
	ctx := l.Context()
	loseOn(nodes[:3], "k")
	require.ErrorIs(t, l.Extend(context.Background(), ttl), ErrLockLost)
	require.ErrorIs(t, ended(t, ctx), ErrLockLost)

	for _, n := range nodes[:3] {
		n.set("k", l.Token()) // the key is back (a node that lied, a late write)
	}
	err = l.Extend(context.Background(), ttl)
	require.ErrorIs(t, err, ErrLockLost, "an ended lock stays ended")
	require.Zero(t, l.Validity())
}

func TestLock_Unlock_withTheLocksOwnContextStillReleases(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	l, err := c.TryLock(context.Background(), "k", ttl)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(l.Context()), "Unlock ends the lock's context itself")
	requireFree(t, c, nodes, "k")
}
