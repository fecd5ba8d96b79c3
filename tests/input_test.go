package tests

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestNew_rejectsBadPoolsAndOptions(t *testing.T) {
	t.Parallel()
	// No server is needed: New does not connect.
	pools := newPools(t, []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"})

	for _, tc := range []struct {
		name  string
		pools []pool.Pool
		opts  []redlock.Option
		want  string
	}{
		{"nil slice", nil, nil, "no pools"},
		{"empty slice", []pool.Pool{}, nil, "no pools"},
		{"nil pool", []pool.Pool{pools[0], nil, pools[2]}, nil, "pool 1 is nil"},
		{"duplicate address", append(pools, newPools(t, []string{"127.0.0.1:2"})...), nil, "127.0.0.1:2"},
		{"drift factor 0.5", pools, []redlock.Option{redlock.WithDriftFactor(0.5)}, "drift factor"},
		{"drift factor negative", pools, []redlock.Option{redlock.WithDriftFactor(-0.01)}, "drift factor"},
		{"drift factor NaN", pools, []redlock.Option{redlock.WithDriftFactor(math.NaN())}, "drift factor"},
		{"drift factor +Inf", pools, []redlock.Option{redlock.WithDriftFactor(math.Inf(1))}, "drift factor"},
		{"zero node timeout", pools, []redlock.Option{redlock.WithNodeTimeout(0)}, "node timeout"},
		{"negative node timeout", pools, []redlock.Option{redlock.WithNodeTimeout(-time.Second)}, "node timeout"},
		{"retry maximum under its minimum", pools, []redlock.Option{redlock.WithRetry(time.Second, time.Millisecond)}, "retry maximum"},
		{"bad backoff", pools, []redlock.Option{redlock.WithRetry(0, 0)}, "retry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := redlock.New(tc.pools, tc.opts...)
			require.Nil(t, c)
			require.ErrorContains(t, err, tc.want)
		})
	}

	c, err := redlock.New(pools)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// wrappedPool is a caller's own Pool type, used through a pointer.
type wrappedPool struct{ pool.Pool }

// A nil pool in the slice: the nil *pool.Node of a failed pool.New
// appended without a check, or a nil pointer of a caller's own Pool type.
// Both are typed nils, non-nil Pool values: New must report them, not
// panic.
func TestNew_rejectsATypedNilPool(t *testing.T) {
	t.Parallel()
	good := newPools(t, []string{"127.0.0.1:1", "127.0.0.1:2"})
	failed, err := pool.New("not an address")
	require.Error(t, err)
	require.Nil(t, failed)
	var typed *wrappedPool

	for _, bad := range []pool.Pool{failed, typed} {
		var c *redlock.Client
		require.NotPanics(t, func() {
			c, err = redlock.New([]pool.Pool{good[0], bad, good[1]})
		})
		require.Nil(t, c)
		require.ErrorContains(t, err, "pool 1 is nil")
	}
}

func TestTryLockAndLock_rejectBadArgumentsBeforeAskingAnyNode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)

	for _, tc := range []struct {
		name string
		key  string
		ttl  time.Duration
		opts []redlock.LockOption
		want string
	}{
		{"empty key", "", longTTL, nil, "empty name"},
		{"zero ttl", key, 0, nil, "ttl"},
		{"negative ttl", key, -time.Second, nil, "ttl"},
		{"sub-millisecond ttl", key, 500 * time.Microsecond, nil, "ttl"},
		{"ttl equal to the drift floor", key, 2 * time.Millisecond, nil, "ttl"},
		{"ttl just under the drift", key, 2020 * time.Microsecond, nil, "ttl"},
		{"negative min validity", key, longTTL, []redlock.LockOption{redlock.WithMinValidity(-time.Second)}, "minimum validity"},
		{"min validity not below ttl", key, longTTL, []redlock.LockOption{redlock.WithMinValidity(longTTL)}, "minimum validity"},
		{"zero retry minimum", key, longTTL, []redlock.LockOption{redlock.WithRetry(0, time.Second)}, "retry minimum"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := c.TryLock(ctxT(t, 10*time.Second), tc.key, tc.ttl, tc.opts...)
			require.Nil(t, l)
			require.ErrorContains(t, err, tc.want)
			require.NotErrorIs(t, err, redlock.ErrNotAcquired, "bad input is not a lost race")

			l, err = c.Lock(ctxT(t, 10*time.Second), tc.key, tc.ttl, tc.opts...)
			require.Nil(t, l)
			require.ErrorContains(t, err, tc.want)
		})
	}

	// Extend checks its ttl too.
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, l.Token())
	require.ErrorContains(t, l.Extend(ctxT(t, 10*time.Second), 2*time.Millisecond), "ttl")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.ErrorIs(t, l.Extend(ctxT(t, 10*time.Second), longTTL), redlock.ErrReleased)

	// Restore with an empty key or token is refused without a round.
	require.ErrorContains(t, c.Restore("", "tok").Unlock(ctxT(t, 10*time.Second)), "empty name")
	require.ErrorContains(t, c.Restore(key, "").Extend(ctxT(t, 10*time.Second), longTTL), "empty token")

	require.NoError(t, c.Close())
	for i := range e.nodes {
		requireAbsent(t, e.nodes, i, key)
		requireAbsent(t, e.nodes, i, "")
	}
	// The smallest ttl above the drift works (2ms floor + 1% of 3ms).
	c2 := e.client()
	l, err = c2.TryLock(ctxT(t, 10*time.Second), newKey(t), 3*time.Millisecond)
	if err != nil {
		// 3ms minus the drift leaves under 1ms: a slow round may leave no
		// validity, which must then be an ordinary failed acquisition.
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
	} else {
		require.NotNil(t, l)
	}
}

func TestClient_afterCloseRefusesNewWork(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close twice")

	_, err = c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.ErrorIs(t, err, pool.ErrClosed)
	_, err = c.Lock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.ErrorIs(t, err, pool.ErrClosed)
	require.ErrorIs(t, l.Extend(ctxT(t, 10*time.Second), longTTL), pool.ErrClosed)
	require.ErrorIs(t, l.Unlock(ctxT(t, 10*time.Second)), pool.ErrClosed)

	// A Lock waiting on a held key ends when its client closes.
	c2 := e.client()
	done := make(chan error, 1)
	go func() {
		_, err := c2.Lock(context.Background(), key, longTTL)
		done <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it start waiting; not needed for correctness
	require.NoError(t, c2.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, pool.ErrClosed)
	case <-time.After(5 * time.Second):
		t.Fatal("Lock kept waiting after Close")
	}
}
