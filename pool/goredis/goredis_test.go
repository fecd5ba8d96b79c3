package goredis_test

import (
	"context"
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

// TestMain checks for leaked goroutines. go-redis's pool retries a
// failed dial in a goroutine of its own that sleeps a second between
// tries and ends at the first one after the pool closed: it may still be
// asleep when the tests end (a node a test killed), so it is not a leak.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// factory makes goredis pools over *redis.Client with the given options.
// The client's own timeouts (5s) are longer than the suite's deadlines, and
// it does not retry, so that the suite sees the pool's own bounds.
func factory(protocol int, contextTimeouts bool) pooltest.Factory {
	return pooltest.Factory{Subscriber: true, Reconnector: true, New: func(t testing.TB, addr, password string) pool.Pool {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: password, Protocol: protocol,
			ContextTimeoutEnabled: contextTimeouts, DialTimeout: 5 * time.Second,
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}}
}

func TestConformance_RESP3(t *testing.T) { pooltest.Run(t, factory(3, true)) }

func TestConformance_RESP2(t *testing.T) { pooltest.Run(t, factory(2, true)) }

// Without ContextTimeoutEnabled go-redis applies only its own timeouts to
// the sockets: the pool still returns at the caller's deadline.
func TestConformance_withoutContextTimeouts(t *testing.T) { pooltest.Run(t, factory(3, false)) }

// A client as most programs make it: go-redis' defaults (RESP3, no
// ContextTimeoutEnabled, 3s timeouts, 3 retries).
func TestConformance_clientDefaults(t *testing.T) {
	pooltest.Run(t, pooltest.Factory{Subscriber: true, Reconnector: true, New: func(t testing.TB, addr, password string) pool.Pool {
		c := redis.NewClient(&redis.Options{Addr: addr, Password: password})
		t.Cleanup(func() { _ = c.Close() })
		return goredis.New(c)
	}})
}

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

// Redlock nodes that are Redis Clusters, through *redis.ClusterClient.
func TestConformance_clusterNodes(t *testing.T) {
	pooltest.RunCluster(t, newClusterPool)
}

// The same with restart safety on: grants count shard by shard, and
// hand-offs are claimed by a round (redlock/shards.go).
func TestConformance_clusterNodesWithRestartSafety(t *testing.T) {
	pooltest.RunCluster(t, newClusterPool, redlock.WithRestartSafety(time.Minute))
}

// newClusterPool is a pool over a cluster client with seeds, closed when
// the test ends.
func newClusterPool(t testing.TB, seeds []string) pool.Pool {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = cc.Close() })
	return goredis.New(cc)
}
