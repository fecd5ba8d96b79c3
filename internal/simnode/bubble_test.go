//go:build go1.25

//go:debug asynctimerchan=0

package simnode_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/simnode"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func newNodes(k int) []*simnode.Node {
	ns := make([]*simnode.Node, k)
	for i := range ns {
		ns[i] = simnode.New(fmt.Sprintf("sim%d:6379", i+1))
	}
	return ns
}

func pools(t *testing.T, ns []*simnode.Node, client string) []pool.Pool {
	ps := make([]pool.Pool, len(ns))
	for i, n := range ns {
		p, err := pool.New(n.Addr(), pool.WithDialer(n.Dialer(client)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		ps[i] = p
	}
	return ps
}

func TestBubble_aWaitingLockTakesAnExpiredLock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ns := newNodes(5)
		defer func() {
			for _, n := range ns {
				n.Close()
			}
		}()
		a, err := redlock.New(pools(t, ns, "a"), redlock.WithRestartSafety(time.Minute))
		require.NoError(t, err)
		defer a.Close()
		b, err := redlock.New(pools(t, ns, "b"), redlock.WithRestartSafety(time.Minute))
		require.NoError(t, err)
		defer b.Close()
		ctx := context.Background()
		start := time.Now()
		l, err := a.TryLock(ctx, "k", 30*time.Second)
		require.NoError(t, err)
		_ = l
		l2, err := b.Lock(ctx, "k", time.Second)
		require.NoError(t, err)
		t.Logf("took at %v", time.Since(start))
		require.NoError(t, l2.Unlock(ctx))
		ns[0].Restart(simnode.Empty)
		ns[1].Pause()
		l3, err := b.TryLock(ctx, "k2", time.Second)
		t.Logf("after restart: %v %v", l3, err)
		ns[1].Resume()
	})
}
