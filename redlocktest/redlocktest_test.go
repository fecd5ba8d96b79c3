package redlocktest_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
	"github.com/quorumlock/redlock/redlocktest"
)

// Every test and example closes its Clients and Cluster: no goroutine is
// left once they have.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNew(t *testing.T) {
	require.Panics(t, func() { redlocktest.New(0) })
	c := redlocktest.New(3)
	defer c.Close()
	require.Equal(t, 3, c.Len())
	require.Len(t, c.Nodes(), 3)
	for i := range 3 {
		require.Equal(t, c.Nodes()[i], c.Node(i))
		require.True(t, c.Node(i).Up())
		require.Empty(t, c.Node(i).Keys())
	}
	require.Equal(t, "redlocktest-1:6379", c.Node(0).Addr())
	require.Equal(t, "redlocktest-3:6379", c.Node(2).Addr())
	require.Panics(t, func() { c.Node(3) })
	require.Panics(t, func() { c.Node(-1) })
}

func TestPools(t *testing.T) {
	c := redlocktest.New(2)
	ps := c.Pools(pool.WithConns(2), pool.WithClientName("tests"))
	require.Len(t, ps, 2)
	for i, p := range ps {
		require.IsType(t, &pool.Node{}, p)
		require.Equal(t, c.Node(i).Addr(), p.Addr())
	}
	ctx := context.Background()
	_, err := ps[0].Do(ctx, "SET", "k", "v")
	require.NoError(t, err)
	v, err := c.Pools()[0].Do(ctx, "GET", "k")
	require.NoError(t, err)
	require.Equal(t, []byte("v"), v)

	require.Panics(t, func() { c.Pools(pool.WithConns(0)) })
	_ = ps[1].(*pool.Node).Close() // closing one early is fine
	c.Close()
	c.Close()
	_, err = ps[0].Do(ctx, "GET", "k")
	require.ErrorIs(t, err, pool.ErrClosed)
	require.Panics(t, func() { c.Pools() })
}

func TestNodeData(t *testing.T) {
	c := redlocktest.New(1)
	defer c.Close()
	n := c.Node(0)
	r, err := n.Do("SET", "a", "1")
	require.NoError(t, err)
	require.Equal(t, "OK", r)
	_, err = n.Do("SET", "b", "2", "PX", "60000")
	require.NoError(t, err)
	r, err = n.Do("GET", "a")
	require.NoError(t, err)
	require.Equal(t, "1", r)
	r, err = n.Do("MGET", "a", "nope")
	require.NoError(t, err)
	require.Equal(t, []any{"1", nil}, r)
	r, err = n.Do("INCR", "counter")
	require.NoError(t, err)
	require.Equal(t, 1, r)
	_, err = n.Do("INCR", "a", "extra")
	require.Error(t, err)
	require.Equal(t, []string{"a", "b", "counter"}, n.Keys())

	require.True(t, n.Expire("b"))
	require.False(t, n.Expire("b"))

	n.Restart() // keeps its data
	require.True(t, n.Up())
	require.Equal(t, []string{"a", "counter"}, n.Keys())

	n.Kill()
	require.False(t, n.Up())
	require.Empty(t, n.Keys())
	require.False(t, n.Expire("a"))
	_, err = n.Do("GET", "a")
	require.Error(t, err)
	n.Kill() // nothing
	n.Start()
	require.True(t, n.Up())
	require.Empty(t, n.Keys())

	_, err = n.Do("SET", "a", "1")
	require.NoError(t, err)
	n.RestartEmpty()
	require.Empty(t, n.Keys())
}

func TestKillAndStart(t *testing.T) {
	c := redlocktest.New(1)
	defer c.Close()
	p := c.Pools(pool.WithIOTimeout(100 * time.Millisecond))[0]
	ctx := context.Background()
	_, err := p.Do(ctx, "PING")
	require.NoError(t, err)
	c.Node(0).Kill()
	_, err = p.Do(ctx, "PING")
	require.Error(t, err)
	c.Node(0).Start()
	require.Eventually(t, func() bool { _, err := p.Do(ctx, "PING"); return err == nil }, 2*time.Second, 5*time.Millisecond)
}

func TestPartitionIsPerClient(t *testing.T) {
	c := redlocktest.New(1)
	defer c.Close()
	opts := []pool.Option{pool.WithIOTimeout(50 * time.Millisecond), pool.WithDialTimeout(50 * time.Millisecond)}
	a, b := c.Pools(opts...), c.Pools(opts...)
	ctx := context.Background()
	for _, ps := range [][]pool.Pool{a, b} {
		_, err := ps[0].Do(ctx, "PING")
		require.NoError(t, err)
	}
	n := c.Node(0)
	n.Partition(a)
	_, err := a[0].Do(ctx, "SET", "k", "a")
	require.Error(t, err)
	_, err = b[0].Do(ctx, "PING")
	require.NoError(t, err)
	n.Heal()
	require.Eventually(t, func() bool { _, err := a[0].Do(ctx, "PING"); return err == nil }, 2*time.Second, 5*time.Millisecond)

	other := redlocktest.New(1)
	defer other.Close()
	require.Panics(t, func() { n.Partition(other.Pools()) })
	require.Panics(t, func() { n.Partition(append(slices.Clone(a), b...)) })
	require.Panics(t, func() { n.Partition(nil) })
}

func TestPauseAndResume(t *testing.T) {
	c := redlocktest.New(1)
	defer c.Close()
	p := c.Pools(pool.WithIOTimeout(50 * time.Millisecond))[0]
	ctx := context.Background()
	_, err := p.Do(ctx, "PING")
	require.NoError(t, err)
	c.Node(0).Pause()
	_, err = p.Do(ctx, "PING")
	require.Error(t, err)
	c.Node(0).Resume()
	require.Eventually(t, func() bool { _, err := p.Do(ctx, "PING"); return err == nil }, 2*time.Second, 5*time.Millisecond)
}

// Unlock returns once a quorum released; the other nodes release soon
// after.
func TestLockKeys(t *testing.T) {
	c := redlocktest.New(5)
	defer c.Close()
	client, err := redlock.New(c.Pools(), redlock.WithNodeTimeout(time.Second))
	require.NoError(t, err)
	defer client.Close()
	ctx := context.Background()
	l, err := client.TryLock(ctx, "lock:k", time.Second)
	require.NoError(t, err)
	held := func() (k int) {
		for _, n := range c.Nodes() {
			if slices.Contains(n.Keys(), "lock:k") {
				k++
			}
		}
		return k
	}
	require.GreaterOrEqual(t, held(), 3)
	require.NoError(t, l.Unlock(ctx))
	require.Eventually(t, func() bool { return held() == 0 }, time.Second, time.Millisecond)
}

// A node back from Restart or Start is left out of quorums by restart
// safety; WithDurableNodes counts one that kept its data at once.
func TestRestartSafety(t *testing.T) {
	for _, durable := range []bool{false, true} {
		nodes := redlocktest.New(3)
		opts := []redlock.Option{slack}
		if durable {
			opts = append(opts, redlock.WithDurableNodes())
		}
		c, err := redlock.New(nodes.Pools(), opts...)
		require.NoError(t, err)
		ctx := context.Background()
		l, err := c.TryLock(ctx, "k", time.Second)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
		// The lock counted a quorum; node 0 may be marked a moment later.
		// Restarted unmarked, even a durable node is one that may have
		// come back empty.
		require.Eventually(t, func() bool {
			v, err := nodes.Node(0).Do("GET", "redlock:node")
			return err == nil && v != nil
		}, 2*time.Second, time.Millisecond, "node 0 is marked")

		nodes.Node(0).Restart()
		nodes.Node(1).Kill() // the quorum of 2 needs node 0
		// restarted reports whether node 0 is left out as restarted;
		// false when a lock was taken. Calls fail otherwise while the
		// pool reconnects.
		restarted := func() (bool, bool) {
			l, err := c.TryLock(ctx, "k", time.Second)
			if err == nil {
				require.NoError(t, l.Unlock(ctx))
				return false, true
			}
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			return errors.Is(qe.Nodes[0].Err, redlock.ErrNodeRestarted), false
		}
		// Until node 0 is checked again, calls fail while the pool
		// reconnects; from then on a Client leaves it out as restarted
		// and never locks, and a durable one locks and never leaves it
		// out.
		settled := false
		for deadline := time.Now().Add(2 * time.Second); !settled && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			r, ok := restarted()
			require.False(t, durable && r, "a durable Client left the node that kept its data out")
			require.False(t, !durable && ok, "the restarted node was counted at once")
			settled = r || ok
		}
		require.True(t, settled, "node 0 was never checked again")

		nodes.Node(1).Start()
		nodes.Node(0).RestartEmpty()
		require.Eventually(t, func() bool { r, _ := restarted(); return r }, 2*time.Second, 10*time.Millisecond)
		require.NoError(t, c.Close())
		nodes.Close()
	}
}
