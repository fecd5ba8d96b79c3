package rueidispool_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/rueidispool"
	"github.com/quorumlock/redlock/redlock"
)

func ctxFor(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// DialPubSub returns by the caller's deadline on a node that stalls:
// rueidis dials a dedicated connection without the caller's context, and
// waited for its own dial timeout (5s by default) with a 250ms deadline.
func TestDialPubSub_returnsByItsDeadlineOnAPausedNode(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	p := rueidispool.New(c)
	defer p.(io.Closer).Close()
	_, err = p.Do(ctxFor(t, time.Second), "PING")
	require.NoError(t, err)

	require.NoError(t, s.Pause())
	defer s.Resume()
	start := time.Now()
	conn, err := p.(pool.Subscriber).DialPubSub(ctxFor(t, 250*time.Millisecond), func(pool.PubSubEvent) {})
	took := time.Since(start)
	if conn != nil {
		_ = conn.Close()
	}
	t.Logf("DialPubSub on a paused node: %v after %v", err, took)
	require.Less(t, took, 1500*time.Millisecond, "DialPubSub returns by its 250ms deadline")
}

// Subscribe and Ping send and return without waiting for the node, as
// pool.PubSubConn says: a Lock call subscribes from its own goroutine,
// and with them waiting for a paused node's answer (the pool's timeout,
// 1s), a Lock with a 300ms deadline returned after 1s.
func TestLock_returnsByItsDeadlineWhileANodeIsPaused(t *testing.T) {
	nodes := redistest.StartT(t, 3)
	var ps []pool.Pool
	for _, a := range nodes.Addrs() {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true,
			Dialer: net.Dialer{Timeout: time.Second}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		p := rueidispool.New(c)
		t.Cleanup(func() { _ = p.(io.Closer).Close() })
		ps = append(ps, p)
	}
	holder, err := redlock.New(ps, redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer holder.Close()
	waiter, err := redlock.New(ps, redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	defer waiter.Close()
	for _, k := range []string{"k1", "k2"} {
		_, err = holder.TryLock(ctxFor(t, time.Second), k, time.Minute)
		require.NoError(t, err)
	}
	// The waiter's release subscriptions are connected.
	_, err = waiter.Lock(ctxFor(t, 300*time.Millisecond), "k1", time.Minute)
	require.Error(t, err)

	require.NoError(t, nodes.Node(0).Pause())
	defer nodes.Node(0).Resume()
	start := time.Now()
	_, err = waiter.Lock(ctxFor(t, 300*time.Millisecond), "k2", time.Minute)
	took := time.Since(start)
	t.Logf("Lock with a 300ms deadline, one node of three paused: %v after %v", err, took)
	require.Error(t, err)
	require.Less(t, took, 700*time.Millisecond, "Lock returns by its 300ms deadline")
}
