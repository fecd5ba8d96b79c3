package rueidispool_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/pooltest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/rueidispool"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// factory makes rueidispool pools over rueidis clients of one node.
func factory(resp2 bool) pooltest.Factory {
	return pooltest.Factory{Subscriber: true, New: func(t testing.TB, addr, password string) pool.Pool {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, Password: password,
			DisableCache: true, AlwaysRESP2: resp2, ConnWriteTimeout: time.Second, Dialer: dialer()})
		if password == "wr0ng-battery" {
			// rueidis authenticates when the client is made.
			require.Error(t, err)
			require.Contains(t, strings.ToUpper(err.Error()), "WRONGPASS")
			require.NotContains(t, err.Error(), password)
			return nil
		}
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return rueidispool.New(c)
	}}
}

func TestConformance_RESP3(t *testing.T) { pooltest.Run(t, factory(false)) }

func TestConformance_RESP2(t *testing.T) { pooltest.Run(t, factory(true)) }

func TestNew_nilClientIsANilPool(t *testing.T) {
	require.Nil(t, rueidispool.New(nil))
	_, err := redlock.New([]pool.Pool{rueidispool.New(nil)})
	require.ErrorContains(t, err, "nil")
}

func TestNew_namesTheNode(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{s.Addr()}, DisableCache: true})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, s.Addr(), rueidispool.New(c).Addr())
	require.Equal(t, "cache-a", rueidispool.New(c, rueidispool.WithName("cache-a")).Addr())
}

// Redlock nodes that are Redis Clusters, through rueidis cluster clients.
func TestClusterNodes(t *testing.T) {
	clusters := make([]*redistest.RedisCluster, 3)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i] = redistest.StartRedisClusterT(t, 3)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	newClient := func() *redlock.Client {
		pools := make([]pool.Pool, len(clusters))
		for i, rc := range clusters {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: rc.Addrs(), DisableCache: true})
			require.NoError(t, err)
			t.Cleanup(c.Close)
			pools[i] = rueidispool.New(c)
		}
		c, err := redlock.New(pools, redlock.WithRestartSafety(0))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newClient(), newClient()
	for _, key := range []string{"lock:cluster:plain", "{order42}:lock", "odd}key", "odd{key"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		held, err := a.TryLock(ctx, key, 10*time.Second, redlock.WithFencing())
		require.NoError(t, err, key)
		got := make(chan *redlock.Lock, 1)
		go func() {
			l, err := b.Lock(ctx, key, 10*time.Second, redlock.WithFencing())
			if err != nil {
				t.Error(key, err)
			}
			got <- l
		}()
		require.Eventually(t, func() bool {
			in, err := a.Inspect(ctx, key)
			require.NoError(t, err)
			queued := 0
			for _, n := range in.Nodes {
				require.NoError(t, n.Err)
				queued += n.Queued
			}
			return queued == len(clusters)
		}, 5*time.Second, 5*time.Millisecond, "%s: the waiter is queued on every node", key)
		require.NoError(t, held.Unlock(ctx))
		next := <-got
		require.NotNil(t, next, key)
		require.Greater(t, next.Fence(), held.Fence(), key)
		require.NoError(t, next.Unlock(ctx))
	}
}

// dialer bounds connecting, so that a paused node does not hold a dial
// for rueidis' default 5s.
func dialer() net.Dialer { return net.Dialer{Timeout: time.Second, KeepAlive: time.Minute} }
