package tests

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// slowDialer opens connections after delay (a TLS handshake across a
// wide-area link, a machine busy opening many at once), or never, until
// ctx ends, when delay is negative.
func slowDialer(delay time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if delay < 0 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// A fresh Client's first lock on nodes whose connections take longer to
// open than the node timeout: the round waits for the dials, then gives
// each node a node timeout to answer. It failed on every node's timeout
// before. The validity is still counted from the round's start.
func TestDialGrace_aFirstLockWaitsForConnectionsSlowerThanTheNodeTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	l := firstLockOn(t, slowDialPools(t, e.addrs, 400*time.Millisecond), 150*time.Millisecond, "the first lock waits for the connections")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// slowDialPools returns pool.New pools over addrs whose connections take
// dial to open.
func slowDialPools(t *testing.T, addrs []string, dial time.Duration) []pool.Pool {
	t.Helper()
	pools := make([]pool.Pool, len(addrs))
	for i, addr := range addrs {
		p, err := pool.New(addr, pool.WithDialer(slowDialer(dial)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	return pools
}

// firstLockOn takes a key with a new Client over pools whose node timeout
// is nodeTimeout, failing the test with why when it does not, and checks
// that the lock's validity counts from the round's start.
func firstLockOn(t *testing.T, pools []pool.Pool, nodeTimeout time.Duration, why string) *redlock.Lock {
	t.Helper()
	const ttl = 10 * time.Second
	c := newClient(t, pools, redlock.WithNodeTimeout(nodeTimeout))
	start := time.Now()
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), ttl)
	require.NoError(t, err, why)
	require.Less(t, l.Validity(), ttl-time.Since(start)+time.Millisecond, "counted from the round's start")
	return l
}

// Nodes whose connections never open: the round waits no longer than the
// pool's dial timeout and a node timeout, and fails naming the dial.
func TestDialGrace_aDialThatNeverEndsFailsWithinTheDialTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	pools := make([]pool.Pool, len(e.addrs))
	for i, addr := range e.addrs {
		delay := time.Duration(0)
		if i < 3 {
			delay = -1 // a quorum never connects
		}
		p, err := pool.New(addr, pool.WithDialer(slowDialer(delay)), pool.WithDialTimeout(500*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	c := newClient(t, pools, redlock.WithNodeTimeout(100*time.Millisecond))
	start := time.Now()
	_, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), 10*time.Second)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorContains(t, err, "dial")
	require.Less(t, took, 3*time.Second, "the dial timeout bounds the wait")
}

// A node whose first connection takes long to open answers its first
// request slowly too (the same burst or load slowed both): once the
// connection opens, the round gives it as long to answer as it waited for
// the dial, when that is longer than the node timeout. Here connections
// take 400ms to open and every request is held back 250ms, with a 150ms
// node timeout. Before, the node had one node timeout from its opening to
// answer, and the first lock failed on every node.
func TestDialGrace_aSlowDialsFirstAnswerGetsAsLongAsTheDialTook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	markDeployment(t, e.addrs)
	slow := make([]string, len(e.addrs))
	for i, addr := range e.addrs {
		slow[i] = startLatencyProxy(t, addr, 250*time.Millisecond, nil).Addr()
	}
	firstLockOn(t, slowDialPools(t, slow, 400*time.Millisecond), 150*time.Millisecond, "the first answers get as long as the dials took")
	// No Unlock: every request is held back longer than the node timeout,
	// and the key goes with the test's nodes.
}
