package goredis_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/pooltest"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// factory makes goredis pools over *redis.Client with the given options.
func factory(protocol int, contextTimeouts bool) pooltest.Factory {
	return pooltest.Factory{Subscriber: true, New: func(t testing.TB, addr, password string) pool.Pool {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: password, Protocol: protocol,
			ContextTimeoutEnabled: contextTimeouts, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}}
}

func TestConformance_RESP3(t *testing.T) { pooltest.Run(t, factory(3, true)) }

func TestConformance_RESP2(t *testing.T) { pooltest.Run(t, factory(2, true)) }

// Without ContextTimeoutEnabled go-redis applies only its own timeouts to
// the sockets: the pool still returns at the caller's deadline.
func TestConformance_withoutContextTimeouts(t *testing.T) { pooltest.Run(t, factory(3, false)) }

func TestNew_nilClientIsANilPool(t *testing.T) {
	require.Nil(t, goredis.New(nil))
	_, err := redlock.New([]pool.Pool{goredis.New(nil)})
	require.ErrorContains(t, err, "nil")
}

func TestNew_namesTheNode(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	require.Equal(t, "127.0.0.1:1", goredis.New(c).Addr())
	require.Equal(t, "cache-a", goredis.New(c, goredis.WithName("cache-a")).Addr())
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:2", "127.0.0.1:3"}})
	defer cc.Close()
	require.Equal(t, "127.0.0.1:2,127.0.0.1:3", goredis.New(cc).Addr())
}

func TestGeneration_growsWhenTheClientDials(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	p := goredis.New(c)
	rc := p.(pool.Reconnector)
	require.Zero(t, rc.Generation())
	_, err := p.Do(context.Background(), "PING")
	require.NoError(t, err)
	g := rc.Generation()
	require.Positive(t, g)
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	require.Eventually(t, func() bool {
		_, err := p.Do(context.Background(), "PING")
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	require.Greater(t, rc.Generation(), g, "a restarted node is reached on a new connection")
}

// Redlock nodes that are Redis Clusters, through *redis.ClusterClient:
// locks, waiting with hand-offs, and fences, for keys with and without
// hash tags.
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
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: true})
			t.Cleanup(func() { _ = cc.Close() })
			pools[i] = goredis.New(cc)
		}
		// Restart safety's marker lives in one slot of each cluster
		// (docs/operations.md): the masters here keep no data, so it is off.
		c, err := redlock.New(pools, redlock.WithRestartSafety(0))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := newClient(), newClient()
	for i, key := range []string{"lock:cluster:plain", "{order42}:lock", "odd}key", "odd{key"} {
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
		require.NoError(t, held.Extend(ctx, 10*time.Second))
		require.NoError(t, held.Unlock(ctx))
		next := <-got
		require.NotNil(t, next, key)
		require.Greater(t, next.Fence(), held.Fence(), key)
		require.NoError(t, next.Unlock(ctx), fmt.Sprint(i))
	}

	// Multi-key locks on cluster nodes: keys with a common hash tag, or a
	// clear error.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := a.TryLockMulti(ctx, []string{"{acct}:7", "{acct}:3"}, 10*time.Second, redlock.WithFencing())
	require.NoError(t, err)
	require.Len(t, l.Fences(), 2)
	require.NoError(t, l.Unlock(ctx))
	_, err = a.TryLockMulti(ctx, []string{"lock:acct:7", "lock:acct:3"}, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorContains(t, err, "common hash tag")
}
