package redistest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/redlock/internal/keyslot"
)

// RedisCluster is a Redis Cluster of masters without replicas, each owning
// an equal share of the 16384 hash slots, in node order.
type RedisCluster struct {
	*Cluster
	first []uint16 // first[i] is the first slot of node i
}

// clusterReady bounds how long StartRedisCluster waits for the cluster
// to agree that it is whole.
const clusterReady = 15 * time.Second

// StartRedisCluster starts masters >= 1 redis-server processes in cluster
// mode (as Start does, with opts), gives each an equal range of slots,
// joins them and waits until every node reports cluster_state:ok.
func StartRedisCluster(masters int, opts Options) (*RedisCluster, error) {
	opts.Args = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}, opts.Args...)
	c, err := Start(masters, opts)
	if err != nil {
		return nil, err
	}
	rc := &RedisCluster{Cluster: c, first: make([]uint16, masters)}
	if err := rc.form(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return rc, nil
}

// form assigns the slots, introduces the nodes to the first and waits.
func (rc *RedisCluster) form() error {
	n := len(rc.nodes)
	for i, s := range rc.nodes {
		first, last := 16384*i/n, 16384*(i+1)/n-1
		rc.first[i] = uint16(first)
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", first, last); err != nil {
			return fmt.Errorf("redistest: %s: CLUSTER ADDSLOTSRANGE: %w", s.Addr(), err)
		}
	}
	for _, s := range rc.nodes[1:] {
		if _, err := rc.nodes[0].Do("CLUSTER", "MEET", "127.0.0.1", s.Port()); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", s.Addr(), err)
		}
	}
	deadline := time.Now().Add(clusterReady)
	for {
		ok, why := rc.whole()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: the cluster did not form within %v: %s", clusterReady, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// whole reports whether every node sees every other and the state ok.
func (rc *RedisCluster) whole() (bool, string) {
	for _, s := range rc.nodes {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", len(rc.nodes))) {
			return false, s.Addr() + ": " + strings.ReplaceAll(info, "\r\n", " ")
		}
	}
	return true, ""
}

// MasterFor returns the node that owns key's hash slot.
func (rc *RedisCluster) MasterFor(key string) *Server {
	slot := keyslot.Slot(key)
	i := len(rc.first) - 1
	for i > 0 && rc.first[i] > slot {
		i--
	}
	return rc.nodes[i]
}

// StartRedisClusterT is StartRedisCluster for tests: it skips or fails as
// StartT does when redis-server is missing, fails the test on any other
// error, and closes the cluster when the test ends.
func StartRedisClusterT(t testing.TB, masters int, opts ...Options) *RedisCluster {
	t.Helper()
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	skipWithoutServer(t)
	rc, err := StartRedisCluster(masters, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rc.Close(); err != nil {
			t.Errorf("redistest: closing cluster: %v", err)
		}
	})
	return rc
}

// StartRedisClustersT starts n clusters of masters each at once, as
// StartRedisClusterT does; it returns nil after failing t.
func StartRedisClustersT(t testing.TB, n, masters int) []*RedisCluster {
	t.Helper()
	skipWithoutServer(t)
	clusters := make([]*RedisCluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = StartRedisCluster(masters, Options{})
		}()
	}
	wg.Wait()
	for _, rc := range clusters {
		if rc != nil {
			t.Cleanup(func() {
				if err := rc.Close(); err != nil {
					t.Errorf("redistest: closing cluster: %v", err)
				}
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
		return nil
	}
	return clusters
}
