//go:build go1.25

//go:debug asynctimerchan=0

package redlocktest_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlocktest"
)

// clients returns a Client per Pools call on nodes, closed at the end of
// the bubble's function (before nodes).
func clients(t *testing.T, nodes *redlocktest.Cluster, k int, opts ...redlock.Option) []*redlock.Client {
	cs := make([]*redlock.Client, k)
	for i := range cs {
		c, err := redlock.New(nodes.Pools(), opts...)
		require.NoError(t, err)
		cs[i] = c
	}
	return cs
}

func closeAll(cs []*redlock.Client) {
	for _, c := range cs {
		_ = c.Close()
	}
}

// A lock that is never released is taken by another client's waiting
// Lock once its 30s TTL ran out, in virtual time.
func TestSynctest_waitingLockTakesAnAbandonedLock(t *testing.T) {
	wall := time.Now()
	synctest.Test(t, func(t *testing.T) {
		nodes := redlocktest.New(5)
		defer nodes.Close()
		cs := clients(t, nodes, 2)
		defer closeAll(cs)
		a, b := cs[0], cs[1]

		ctx := context.Background()
		start := time.Now()
		_, err := a.TryLock(ctx, "lock:abandoned", 30*time.Second) // never released
		require.NoError(t, err)

		ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		l, err := b.Lock(ctx, "lock:abandoned", time.Second)
		require.NoError(t, err)
		waited := time.Since(start)
		require.GreaterOrEqual(t, waited, 30*time.Second)
		require.Less(t, waited, 31*time.Second)
		require.NoError(t, l.Unlock(ctx))
		t.Logf("b took the lock after %v of virtual time", waited)
	})
	t.Logf("wall time: %v", time.Since(wall))
	require.Less(t, time.Since(wall), 5*time.Second)
}

// A holder cut off from a quorum of nodes loses its lock (ErrLockLost)
// within its TTL; the other client takes it once the cut-off nodes' keys
// ran out, and a healed node serves the first client again.
func TestSynctest_partition(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := redlocktest.New(5)
		defer nodes.Close()
		poolsA := nodes.Pools()
		a, err := redlock.New(poolsA)
		require.NoError(t, err)
		defer a.Close()
		cs := clients(t, nodes, 1)
		defer closeAll(cs)
		b := cs[0]

		ctx := context.Background()
		const ttl = 10 * time.Second
		start := time.Now()
		var cut time.Time
		err = a.Do(ctx, "lock:job", ttl, func(ctx context.Context) error {
			time.Sleep(ttl) // extended meanwhile
			require.NoError(t, ctx.Err())
			cut = time.Now()
			for i := range 3 {
				nodes.Node(i).Partition(poolsA)
			}
			<-ctx.Done()
			require.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
			return nil
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		lost := time.Since(cut)
		require.Less(t, lost, ttl)
		t.Logf("lost %v after the partition (virtual; %v since the start)", lost, time.Since(start))

		l, err := b.Lock(ctx, "lock:job", ttl)
		require.NoError(t, err)
		require.LessOrEqual(t, time.Since(cut), 2*ttl)
		_, err = a.TryLock(ctx, "lock:job", ttl)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.NoError(t, l.Unlock(ctx))

		for i := range 3 {
			nodes.Node(i).Heal()
		}
		// a's pools may be in their reconnect back-off (1s at most) from
		// the dials the partition refused: virtual time, so it costs nothing.
		time.Sleep(2 * time.Second)
		l, err = a.TryLock(ctx, "lock:job", ttl)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	})
}

// A paused node times out; a client still locks with the other four. With
// three paused there is no quorum until they resume, and the commands that
// waited then run.
func TestSynctest_pause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := redlocktest.New(5)
		defer nodes.Close()
		cs := clients(t, nodes, 1)
		defer closeAll(cs)
		c := cs[0]
		ctx := context.Background()

		// A first lock, so that the nodes are counted (restart safety).
		l, err := c.TryLock(ctx, "lock:warm", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))

		nodes.Node(0).Pause()
		start := time.Now()
		l, err = c.TryLock(ctx, "lock:p", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		t.Logf("one paused node: locked and released in %v (virtual)", time.Since(start))

		nodes.Node(1).Pause()
		nodes.Node(2).Pause()
		_, err = c.TryLock(ctx, "lock:p", 10*time.Second)
		var qe *redlock.QuorumError
		require.ErrorAs(t, err, &qe)
		require.False(t, qe.Busy(), "paused nodes time out, they do not refuse: %v", err)

		for i := range 3 {
			nodes.Node(i).Resume()
		}
		ctx2, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		l, err = c.Lock(ctx2, "lock:p", 10*time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	})
}

// Killing three of five nodes ends a Do's lock with ErrLockLost, within
// its TTL.
func TestSynctest_killQuorumLosesDo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nodes := redlocktest.New(5)
		defer nodes.Close()
		cs := clients(t, nodes, 1)
		defer closeAll(cs)
		var killed time.Time
		err := cs[0].Do(context.Background(), "lock:job", 30*time.Second, func(ctx context.Context) error {
			killed = time.Now()
			for i := 2; i < 5; i++ {
				nodes.Node(i).Kill()
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Hour):
				return errors.New("the job ran on without its lock")
			}
			require.ErrorIs(t, context.Cause(ctx), redlock.ErrLockLost)
			return nil
		})
		require.ErrorIs(t, err, redlock.ErrLockLost)
		require.Less(t, time.Since(killed), 30*time.Second)
	})
}
