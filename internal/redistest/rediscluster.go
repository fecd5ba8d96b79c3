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

// RedisCluster is a Redis Cluster whose masters each own an equal share of
// the 16384 hash slots, in node order, with or without one replica each
// (StartRedisClusterReplicated). The embedded Cluster holds the masters as
// started: Nodes, Node and Addrs name them, in slot order, even after
// FailOver has replaced one; Masters, ReplicaOf and AllAddrs tell the
// current shape. Its methods are safe for concurrent use.
type RedisCluster struct {
	*Cluster
	all   []*Server // every node started: the masters, then their replicas
	first []uint16  // first[i] is the first slot of range i

	mu      sync.Mutex
	owner   []*Server // owner[i] serves slot range i now
	replica []*Server // replica[i] replicates owner[i]; nil if none
}

// clusterReady bounds how long StartRedisCluster waits for the cluster
// to agree that it is whole.
const clusterReady = 15 * time.Second

// StartRedisCluster starts masters >= 1 redis-server processes in cluster
// mode (as Start does, with opts), gives each an equal range of slots,
// joins them and waits until every node reports cluster_state:ok.
func StartRedisCluster(masters int, opts Options) (*RedisCluster, error) {
	return startRedisCluster(masters, false, opts)
}

// startRedisCluster starts masters nodes, and as many replicas if
// replicated, and forms the cluster.
func startRedisCluster(masters int, replicated bool, opts Options) (*RedisCluster, error) {
	if masters < 1 {
		return nil, fmt.Errorf("redistest: a Redis Cluster of %d masters: need at least one", masters)
	}
	opts.Args = append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}, opts.Args...)
	n := masters
	if replicated {
		n *= 2
	}
	c, err := Start(n, opts)
	if err != nil {
		return nil, err
	}
	rc := &RedisCluster{
		Cluster: &Cluster{nodes: c.nodes[:masters], close: c.close},
		all:     c.nodes,
		first:   make([]uint16, masters),
		owner:   append([]*Server(nil), c.nodes[:masters]...),
		replica: make([]*Server, masters),
	}
	if replicated {
		copy(rc.replica, c.nodes[masters:])
	}
	if err := rc.form(); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return rc, nil
}

// form assigns the slots, introduces the nodes to the first, attaches the
// replicas and waits.
func (rc *RedisCluster) form() error {
	n := len(rc.nodes)
	for i, s := range rc.nodes {
		first, last := 16384*i/n, 16384*(i+1)/n-1
		rc.first[i] = uint16(first)
		if _, err := s.Do("CLUSTER", "ADDSLOTSRANGE", first, last); err != nil {
			return fmt.Errorf("redistest: %s: CLUSTER ADDSLOTSRANGE: %w", s.Addr(), err)
		}
	}
	for _, s := range rc.all[1:] {
		if _, err := rc.all[0].Do("CLUSTER", "MEET", "127.0.0.1", s.Port()); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET %s: %w", s.Addr(), err)
		}
	}
	if len(rc.all) > n {
		if err := waitFor("the nodes did not meet", clusterReady, rc.acquainted); err != nil {
			return err
		}
		if err := waitFor("the replicas did not attach", clusterReady, rc.attacher()); err != nil {
			return err
		}
	}
	return waitFor("the cluster did not form", clusterReady, rc.whole)
}

// waitFor polls cond every 50ms until it holds, or fails after within
// with failure and cond's last reason.
func waitFor(failure string, within time.Duration, cond func() (bool, string)) error {
	deadline := time.Now().Add(within)
	for {
		ok, why := cond()
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: %s within %v: %s", failure, within, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// acquainted reports whether every node knows every node started.
func (rc *RedisCluster) acquainted() (bool, string) {
	for _, s := range rc.all {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", len(rc.all))) {
			return false, s.Addr() + ": " + strings.ReplaceAll(info, "\r\n", " ")
		}
	}
	return true, ""
}

// whole reports whether every node sees every other and the state ok, and
// every replica is attached and streaming from its master.
func (rc *RedisCluster) whole() (bool, string) {
	ok, why := rc.acquainted()
	if !ok {
		return false, why
	}
	for _, s := range rc.all {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") {
			return false, s.Addr() + ": " + strings.ReplaceAll(info, "\r\n", " ")
		}
	}
	return rc.replicasUp()
}

// MasterFor returns the node that owns key's hash slot now: after FailOver,
// the promoted replica for the failed master's slots.
func (rc *RedisCluster) MasterFor(key string) *Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.owner[rc.rangeOf(keyslot.Slot(key))]
}

// rangeOf returns the index of the slot range that holds slot.
func (rc *RedisCluster) rangeOf(slot uint16) int {
	i := len(rc.first) - 1
	for i > 0 && rc.first[i] > slot {
		i--
	}
	return i
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
	return startClustersT(t, 1, func() (*RedisCluster, error) { return StartRedisCluster(masters, o) })[0]
}

// StartRedisClustersT starts n clusters of masters each at once, as
// StartRedisClusterT does; it returns nil after failing t.
func StartRedisClustersT(t testing.TB, n, masters int) []*RedisCluster {
	t.Helper()
	return startClustersT(t, n, func() (*RedisCluster, error) { return StartRedisCluster(masters, Options{}) })
}

// startClustersT runs start n times at once, closes every cluster it
// started when the test ends, and fails t (returning nil) on any error.
func startClustersT(t testing.TB, n int, start func() (*RedisCluster, error)) []*RedisCluster {
	t.Helper()
	skipWithoutServer(t)
	clusters := make([]*RedisCluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clusters[i], errs[i] = start()
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
