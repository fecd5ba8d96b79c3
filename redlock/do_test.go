package redlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// requireFree asserts that no node holds key, after the Client has been
// closed (every command has landed).
func requireFree(t *testing.T, c *Client, nodes []*testNode, key string) {
	t.Helper()
	require.NoError(t, c.Close())
	for _, n := range nodes {
		v, held := n.get(key)
		require.False(t, held, "%s still holds %q", n.addr, v)
	}
}

// heldEverywhere waits until every node holds key with one value (the
// acquisition's late SETs have landed) and returns it.
func heldEverywhere(t *testing.T, nodes []*testNode, key string) string {
	t.Helper()
	var token string
	require.Eventually(t, func() bool {
		token, _ = nodes[0].get(key)
		for _, n := range nodes {
			if v, _ := n.get(key); v == "" || v != token {
				return false
			}
		}
		return true
	}, 5*time.Second, time.Millisecond)
	return token
}

func TestClient_Do_runsFnWithTheLocksContextAndReleasesAfter(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	errWork := errors.New("work failed")
	ctx := context.WithValue(context.Background(), ctxKey{}, "request-7")
	called := false
	err := c.Do(ctx, "k", ttl, func(ctx context.Context) error {
		called = true
		require.Equal(t, "request-7", ctx.Value(ctxKey{}))
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		require.Equal(t, epoch.Add(ttl-wantDrift), dl)
		held := 0
		for _, n := range nodes {
			if v, _ := n.get("k"); v != "" {
				held++
			}
		}
		require.GreaterOrEqual(t, held, 3)
		return errWork
	})
	require.True(t, called)
	require.Equal(t, errWork, err, "fn's error comes back as it is while the lock held")
	requireFree(t, c, nodes, "k")
}

func TestClient_Do_extendsTheLockWhileFnRuns(t *testing.T) {
	c, nodes, clk, attempts := newExtendingClient(t)
	err := c.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
		for range 4 { // 4 x ttl/3: past the ttl
			require.True(t, armed(t, clk, nil))
			clk.Advance(ttl / 3)
			require.NoError(t, attempt(t, attempts))
		}
		dl, _ := ctx.Deadline()
		require.Equal(t, epoch.Add(4*(ttl/3)+ttl-wantDrift), dl)
		return ctx.Err()
	})
	require.NoError(t, err)
	requireFree(t, c, nodes, "k")
}

func TestClient_Do_lossCancelsFnAtOnceAndJoinsTheCause(t *testing.T) {
	c, nodes, clk, attempts := newExtendingClient(t)
	err := c.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
		require.True(t, armed(t, clk, nil))
		heldEverywhere(t, nodes, "k")
		loseOn(nodes[:3], "k") // expired there
		clk.Advance(ttl / 3)   // well inside the validity
		require.ErrorIs(t, attempt(t, attempts), ErrLockLost)
		require.ErrorIs(t, ended(t, ctx), ErrLockLost)
		return ctx.Err()
	}, WithAutoExtend(ttl/3))
	require.ErrorIs(t, err, context.Canceled, "fn's error")
	require.ErrorIs(t, err, ErrLockLost, "the cause")
	require.NoError(t, c.Close())
	for _, n := range nodes[3:] {
		_, held := n.get("k")
		require.False(t, held, "Do did not release %s", n.addr)
	}
}

func TestClient_Do_reportsAnUnlockThatFindsTheLockGoneAfterFnSucceeded(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	err := c.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
		heldEverywhere(t, nodes, "k")
		loseOn(nodes[:3], "k") // e.g. nodes restarted empty: unseen until the release
		return nil
	})
	require.ErrorIs(t, err, ErrLockLost)
	require.Equal(t, 3, quorumError(t, err).Count(NodeRefused))
}

func TestClient_Do_releasesTheLockWhenFnPanicsAndThePanicGoesOn(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	var ctx context.Context
	require.PanicsWithValue(t, "boom", func() {
		_ = c.Do(context.Background(), "k", ttl, func(fnCtx context.Context) error {
			ctx = fnCtx
			panic("boom")
		})
	})
	require.ErrorIs(t, context.Cause(ctx), ErrReleased, "the lock was not released before the panic went on")
	requireFree(t, c, nodes, "k")
}

func TestClient_Do_doesNotCallFnWithoutTheLock(t *testing.T) {
	asked := make(signalRetry, 1)
	c, nodes, clk := newFakeClient(t, 5, withPacer(asked))
	for _, n := range nodes {
		n.set("k", "foreign")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- c.Do(ctx, "k", ttl, func(context.Context) error {
			t.Error("fn ran without the lock")
			return nil
		})
	}()
	<-asked // a round was refused: Do is about to sleep
	require.True(t, clk.WaitTimers(1, nil), "Do waits for the key")
	cancel() // while it sleeps: its last round was refused by the holder
	err := <-done
	require.ErrorIs(t, err, ErrNotAcquired)
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, quorumError(t, err).Busy(), "%v", err)

	require.ErrorContains(t, c.Do(context.Background(), "k", ttl, nil), "needs a function")
	require.ErrorContains(t, c.Do(context.Background(), "k", ttl, func(context.Context) error { return nil }, WithAutoExtend(ttl)),
		"auto-extend interval 10s plus safety margin 0s is not below the ttl 10s")
}

func TestClient_Do_leavesNoGoroutineBehind(t *testing.T) {
	ignore := goleak.IgnoreCurrent()
	c, _, clk := newFakeClient(t, 5)
	err := c.Do(context.Background(), "k", ttl, func(ctx context.Context) error {
		require.True(t, armed(t, clk, nil))
		return nil
	})
	require.NoError(t, err)
	// The Client is still open: Do itself must have stopped everything.
	goleak.VerifyNone(t, append(ignoreServers(), ignore)...)
	require.Zero(t, clk.Timers())
}

func TestDo_cancellingTheCallersContextStopsFnAndReleases(t *testing.T) {
	c, nodes, _ := newFakeClient(t, 5)
	ctx, cancel := context.WithCancel(context.Background())
	err := c.Do(ctx, "k", ttl, func(fnCtx context.Context) error {
		cancel()
		select {
		case <-fnCtx.Done():
		case <-time.After(5 * time.Second):
			return errors.New("fn's context did not end with the caller's")
		}
		if !errors.Is(context.Cause(fnCtx), context.Canceled) {
			return errors.New("fn's context ended for another reason")
		}
		return fnCtx.Err()
	})
	require.ErrorIs(t, err, context.Canceled)
	requireFree(t, c, nodes, "k")
}

func TestDo_neverStartsFnWhenTheValidityLeftIsWithinTheMargin(t *testing.T) {
	c, nodes, clk := newFakeClient(t, 5)
	var open []func()
	for _, n := range nodes {
		open = append(open, n.hold())
	}
	called := false
	done := make(chan error, 1)
	go func() {
		done <- c.Do(context.Background(), "k", ttl, func(context.Context) error {
			called = true
			return nil
		}, WithSafetyMargin(6*time.Second))
	}()
	require.True(t, clk.WaitTimers(1, nil)) // the acquisition round has started
	clk.Advance(4 * time.Second)            // it takes 4s: 10s - 4s - 102ms of validity is left, under the 6s margin
	for _, o := range open {
		o()
	}
	err := <-done
	require.ErrorIs(t, err, ErrExpired)
	require.False(t, called, "fn ran on a lock whose context had already ended")
	requireFree(t, c, nodes, "k")
}
