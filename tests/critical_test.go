package tests

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
)

// Critical sections (Client.Do, Lock.Context, automatic extension) against
// real nodes. The bounds are generous: they only have to tell "noticed at
// the next extension" from "noticed at the validity end".

// slack is what the timing assertions allow for a slow, noisy machine.
const slack = time.Second

// ourValue waits until every listed node holds key with the same value,
// and returns it: the token of a lock taken through Do, which does not
// show its handle.
func ourValue(t *testing.T, e *env, key string, which ...int) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		first, ok := get(t, e.nodes[which[0]], key)
		same := ok
		for _, i := range which[1:] {
			if v, ok := get(t, e.nodes[i], key); !ok || v != first {
				same = false
			}
		}
		if same {
			return first
		}
		require.True(t, time.Now().Before(deadline), "the nodes never agreed on a value for %q", key)
		time.Sleep(2 * time.Millisecond)
	}
}

// waitEnd waits at most d for ctx to end and returns when it did.
func waitEnd(t *testing.T, ctx context.Context, d time.Duration) time.Time {
	t.Helper()
	select {
	case <-ctx.Done():
		return time.Now()
	case <-time.After(d):
		t.Fatalf("the lock's context did not end within %v", d)
		return time.Time{}
	}
}

func TestDo_keepsTheLockAliveForSeveralTTLs(t *testing.T) {
	e := newEnv(t, 5)
	c, other := e.client(), e.client()
	key := newKey(t)
	const ttl = time.Second
	checks := 0
	err := c.Do(ctxT(t, 30*time.Second), key, ttl, func(ctx context.Context) error {
		token := ourValue(t, e, key, 0, 1, 2, 3, 4)
		// Work for three and a half TTLs; the lock must stay ours all along.
		for end := time.Now().Add(3*ttl + ttl/2); time.Now().Before(end); {
			time.Sleep(ttl / 4)
			require.NoError(t, ctx.Err(), "cause: %v", context.Cause(ctx))
			_, err := other.TryLock(ctxT(t, 10*time.Second), key, ttl)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "another client took the lock")
			for i := range e.nodes {
				requireValue(t, e.nodes, i, key, token)
			}
			checks++
		}
		dl, ok := ctx.Deadline()
		require.True(t, ok)
		require.True(t, dl.After(time.Now()), "the deadline did not move with the extensions")
		return nil
	})
	require.NoError(t, err)
	require.GreaterOrEqual(t, checks, 10)
	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestDo_killingThreeNodesCancelsFnWithErrLockLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	const nodeTimeout, interval = 500 * time.Millisecond, 500 * time.Millisecond
	c := e.client(redlock.WithNodeTimeout(nodeTimeout))
	key := newKey(t)
	var killed, ended time.Time
	err := c.Do(ctxT(t, 30*time.Second), key, longTTL, func(ctx context.Context) error {
		time.Sleep(interval + interval/2) // an extension or two succeed first
		require.NoError(t, ctx.Err())
		for _, i := range []int{0, 2, 4} {
			require.NoError(t, e.nodes[i].Kill())
		}
		killed = time.Now()
		ended = waitEnd(t, ctx, longTTL)
		return ctx.Err()
	}, redlock.WithAutoExtend(interval))
	t.Logf("ErrLockLost %v after the third node died", ended.Sub(killed))
	require.ErrorIs(t, err, redlock.ErrLockLost, "not lost: %v", err)
	require.NotErrorIs(t, err, redlock.ErrExpired)
	require.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
	require.Less(t, ended.Sub(killed), interval+nodeTimeout+slack,
		"the loss was noticed later than one extension interval plus the node timeout")
	require.NoError(t, c.Close())
	for _, i := range []int{1, 3} {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestDo_keyDeletedOnThreeNodesIsNoticedAtTheNextExtension(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	const interval = 500 * time.Millisecond
	c := e.client()
	key := newKey(t)
	var deleted, ended time.Time
	err := c.Do(ctxT(t, 30*time.Second), key, longTTL, func(ctx context.Context) error {
		ourValue(t, e, key, 0, 1, 2, 3, 4)
		for _, i := range []int{1, 2, 3} {
			_, err := e.nodes[i].Do("DEL", key) // as if it had expired there
			require.NoError(t, err)
		}
		deleted = time.Now()
		ended = waitEnd(t, ctx, longTTL)
		require.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
		return nil
	}, redlock.WithAutoExtend(interval))
	t.Logf("ErrLockLost %v after the deletion", ended.Sub(deleted))
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.Less(t, ended.Sub(deleted), interval+slack, "the loss was not noticed at the next extension")
	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key) // never re-created; released where it was left
	}
}

func TestDo_panicInFnReleasesTheLock(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c, other := e.client(), e.client()
	key := newKey(t)
	require.PanicsWithValue(t, "boom", func() {
		_ = c.Do(ctxT(t, 10*time.Second), key, longTTL, func(ctx context.Context) error {
			ourValue(t, e, key, 0, 1, 2, 3, 4)
			panic("boom")
		})
	})
	require.NoError(t, c.Close()) // the releases of the nodes that answered late
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
	l, err := other.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err, "the lock was not released after the panic")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// hungFnIsStopped runs Do with a fn that ignores its context until the
// test lets it go, and checks that another client gets the lock anyway,
// no sooner than atLeast after Do started and no later than atMost.
func hungFnIsStopped(t *testing.T, ttl, atLeast, atMost time.Duration, opts ...redlock.LockOption) {
	e := newEnv(t, 5)
	c, other := e.client(), e.client()
	key := newKey(t)
	letGo := make(chan struct{})
	fnCtx := make(chan context.Context, 1)
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- c.Do(ctxT(t, 30*time.Second), key, ttl, func(ctx context.Context) error {
			fnCtx <- ctx
			select { // hung: deaf to its context
			case <-letGo:
			case <-time.After(30 * time.Second):
			}
			return nil
		}, opts...)
	}()
	ctx := <-fnCtx

	l, err := other.Lock(ctxT(t, atMost+slack), key, longTTL)
	took := time.Since(start)
	close(letGo)
	t.Logf("another client got the lock %v after Do started", took)
	require.NoError(t, err, "the hung fn kept the lock")
	require.Greater(t, took, atLeast, "the lock was free before the limit: it was not extended")
	require.Less(t, took, atMost+slack)
	require.ErrorIs(t, context.Cause(ctx), redlock.ErrExpired)

	require.ErrorIs(t, <-done, redlock.ErrExpired)
	require.NoError(t, l.Extend(ctxT(t, 10*time.Second), longTTL), "Do's release touched the new owner's lock")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

func TestDo_holdCapStopsAHungFn(t *testing.T) {
	// Extended every ~333ms, but never past 2s: the last extension is
	// shorter, so the nodes let the key go at the cap.
	const ttl, maxHold = time.Second, 2 * time.Second
	hungFnIsStopped(t, ttl, maxHold-200*time.Millisecond, maxHold, redlock.WithMaxHold(maxHold))
}

func TestLock_autoExtendKeepsALockPastItsTTLAndUnlockEndsItsContextWithErrReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	const ttl = time.Second
	l, err := c.Lock(ctxT(t, 10*time.Second), key, ttl, redlock.WithAutoExtend(0))
	require.NoError(t, err)
	ctx := l.Context()
	time.Sleep(ttl + ttl/2)
	require.NoError(t, ctx.Err(), "cause: %v", context.Cause(ctx))
	require.Positive(t, l.Validity())
	for i := range e.nodes {
		requireValue(t, e.nodes, i, key, l.Token())
	}

	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.Error(t, ctx.Err(), "Unlock returned before the context ended")
	require.ErrorIs(t, context.Cause(ctx), redlock.ErrReleased)
	require.ErrorIs(t, l.Extend(ctxT(t, 10*time.Second), ttl), redlock.ErrReleased)
	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
	}
}

func TestLock_Context_endsWithErrExpiredAtTheValidityEnd(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, 500*time.Millisecond)
	require.NoError(t, err)
	ctx := l.Context()
	dl, ok := ctx.Deadline()
	require.True(t, ok)
	require.Equal(t, l.Until(), dl)
	ended := waitEnd(t, ctx, 5*time.Second)
	require.False(t, ended.Before(dl), "ended %v before the validity end", dl.Sub(ended))
	require.Less(t, ended.Sub(dl), slack)
	cause := context.Cause(ctx)
	require.True(t, errors.Is(cause, redlock.ErrExpired), "cause: %v", cause)
}
