package pool_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
)

// A node tells that its first connection has yet to be opened (the lock
// client waits for it past its node timeout), and not a connection opened
// again after one broke.
func TestNode_Connecting_onlyWhileTheFirstConnectionIsOpened(t *testing.T) {
	t.Parallel()
	s := startNode(t)
	gate := make(chan struct{}, 4)
	var dials atomic.Int32
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
	n := newNode(t, s.Addr(), pool.WithDialer(dial))
	require.True(t, n.Connecting(), "not opened before its first command")

	done := make(chan error, 1)
	go func() {
		_, err := n.Do(ctxTimeout(t, waitLimit), "PING")
		done <- err
	}()
	waitFor(t, "the first dial is under way", n.Connecting)
	gate <- struct{}{}
	require.NoError(t, <-done)
	require.False(t, n.Connecting(), "connected")

	// The connection breaks; a command dials again.
	_, err := s.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
	require.NoError(t, err)
	go func() {
		for dials.Load() < 2 {
			_, _ = n.Do(ctxTimeout(t, waitLimit), "PING") // the first finds the connection dead
		}
		done <- nil
	}()
	waitFor(t, "the second dial is under way", func() bool { return dials.Load() == 2 })
	require.False(t, n.Connecting(), "a connection opened again is not a first")
	gate <- struct{}{}
	<-done
}
