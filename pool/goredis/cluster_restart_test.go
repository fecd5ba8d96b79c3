package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
	"github.com/quorumlock/redlock/redlock"
)

// Restart safety on Redlock nodes that are Redis Clusters, through
// *redis.ClusterClient (docs/safety.md, "Nodes that are Redis Clusters").

// clusterClient is a Redlock Client over one cluster client per cluster,
// each closed when the test ends, with its exclusions recorded.
func clusterClient(t *testing.T, clusters []*redistest.RedisCluster, opts ...redlock.Option) (*redlock.Client, *exclusions, []*redis.ClusterClient) {
	t.Helper()
	pools := make([]pool.Pool, len(clusters))
	ccs := make([]*redis.ClusterClient, len(clusters))
	for i, rc := range clusters {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.AllAddrs(), ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = cc.Close() })
		pools[i] = goredis.New(cc, goredis.WithName("cluster"+strconv.Itoa(i)))
		ccs[i] = cc
	}
	ex := &exclusions{}
	// A fresh cluster client's first call loads the slots and dials a
	// master: more than the default node timeout on a busy machine.
	c, err := redlock.New(pools, append([]redlock.Option{redlock.WithNodeTimeout(time.Second), redlock.WithObserver(ex)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c, ex, ccs
}

// keyOffMarker returns a key named after prefix whose slot a master of rc
// other than the one that holds the restart marker serves.
func keyOffMarker(rc *redistest.RedisCluster, prefix string) string {
	marker := rc.MasterFor(wire.MarkerKey)
	for n := 0; ; n++ {
		if k := prefix + strconv.Itoa(n); rc.MasterFor(k) != marker {
			return k
		}
	}
}

// Three Redlock nodes, each a cluster of three masters. A holds a key
// served, on every cluster, by a shard other than the one with the
// restart marker. That shard restarts empty on two clusters: it lost A's
// key, and the check of the marker sees nothing. Neither A's Client nor a
// new one may take the key again while A holds it; the restarted shards
// count again once they have run for the maximum TTL.
func TestCluster_aShardRestartedEmptyIsNotCountedUntilTheMaxTTL(t *testing.T) {
	t.Parallel()
	const maxTTL = 3 * time.Second
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}
	a, _, _ := clusterClient(t, clusters, redlock.WithRestartSafety(maxTTL))
	key := keyOffMarker(clusters[0], "lock:shard:")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := a.TryLock(ctx, key, maxTTL)
	require.NoError(t, err, "the first Client of a new deployment counts every shard at once")

	for _, rc := range clusters[:2] {
		s := rc.MasterFor(key)
		require.NoError(t, s.Kill())
		require.NoError(t, s.Restart())
	}
	restarted := time.Now()
	waitClusters(t, clusters)

	b, ex, _ := clusterClient(t, clusters, redlock.WithRestartSafety(maxTTL))
	refuseWhileHeld(t, ctx, held, key, maxTTL, a, b)
	require.NotEmpty(t, ex.list(), "the exclusion is reported")

	// Another key of the same shards: taken once the restarted shards have
	// run for the maximum TTL.
	other := key + ":other"
	for clusters[0].MasterFor(other) != clusters[0].MasterFor(key) {
		other += "x"
	}
	var l *redlock.Lock
	waitFor(t, 3*maxTTL, func() bool {
		l, err = b.TryLock(ctx, other, time.Second)
		return err == nil
	}, "the restarted shards count again: %v", err)
	took := time.Since(restarted)
	t.Logf("the restarted shards counted again %v after their restart", took.Round(10*time.Millisecond))
	require.GreaterOrEqual(t, took, maxTTL-time.Second, "not before the maximum TTL (less Redis's rounding of uptime)")
	require.NoError(t, l.Unlock(ctx))
}

// waitClusters waits until every node of every cluster reports
// cluster_state:ok.
func waitClusters(t *testing.T, clusters []*redistest.RedisCluster) {
	t.Helper()
	waitFor(t, 15*time.Second, func() bool {
		for _, rc := range clusters {
			for _, s := range rc.Nodes() {
				if infoCluster(s) != "ok" {
					return false
				}
			}
		}
		return true
	}, "the clusters are whole again")
}

// infoCluster returns s's cluster_state, or "" when it does not answer.
func infoCluster(s *redistest.Server) string {
	v, err := s.Do("CLUSTER", "INFO")
	if err != nil {
		return ""
	}
	b, _ := v.([]byte)
	for _, line := range strings.Split(string(b), "\n") {
		if st, ok := strings.CutPrefix(strings.TrimSpace(line), "cluster_state:"); ok {
			return st
		}
	}
	return ""
}

// Three Redlock nodes, each a cluster of two masters with a replica each,
// the replicas up for longer than the maximum TTL. On two clusters, the
// shard that serves A's key (not the one with the restart marker) stops
// replicating, A takes the key, and the master dies: its replica, which
// never got A's key, takes its slots over. Neither A's Client nor a new
// one may take the key while A holds it; the promoted shards count again
// once the maximum TTL has passed since a check first saw them.
func TestCluster_aShardFailedOverToAReplicaThatMissedALockIsNotCountedUntilTheMaxTTL(t *testing.T) {
	t.Parallel()
	// Long enough for the cluster clients to find the promoted masters
	// (a round to the dead one waits for the node timeout) while A holds.
	const maxTTL = 4 * time.Second
	clusters := redistest.StartRedisClustersReplicatedT(t, 3, 2)
	if clusters == nil {
		return
	}
	time.Sleep(maxTTL + time.Second) // the replicas have run for longer than any lock
	a, _, accs := clusterClient(t, clusters, redlock.WithRestartSafety(maxTTL))
	key := keyOffMarker(clusters[0], "lock:failover:")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, rc := range clusters[:2] {
		require.NoError(t, rc.CutReplication(rc.MasterFor(key)))
	}
	held, err := a.TryLock(ctx, key, maxTTL)
	require.NoError(t, err)
	for _, rc := range clusters[:2] {
		promoted, err := rc.FailOver(rc.MasterFor(key))
		require.NoError(t, err)
		v, err := promoted.Do("EXISTS", key)
		require.NoError(t, err)
		require.Equal(t, int64(0), v, "the promoted replica missed the lock")
	}
	failedOver := time.Now()
	// A's cluster clients still send the key's slot to the dead masters:
	// go-redis reloads the slots when its view is 10s old, or at once on
	// a MOVED answer. Here, at once.
	for _, cc := range accs {
		cc.ReloadState(ctx)
	}

	b, ex, _ := clusterClient(t, clusters, redlock.WithRestartSafety(maxTTL))
	refuseWhileHeld(t, ctx, held, key, maxTTL, a, b)
	require.NotEmpty(t, ex.list(), "the exclusion is reported")

	var l *redlock.Lock
	waitFor(t, 3*maxTTL, func() bool {
		l, err = b.TryLock(ctx, key, time.Second)
		return err == nil
	}, "the promoted shards count again: %v", err)
	took := time.Since(failedOver)
	t.Logf("the promoted shards counted again %v after the failover", took.Round(10*time.Millisecond))
	require.GreaterOrEqual(t, took, maxTTL-time.Second, "not before the maximum TTL (less Redis's rounding of uptime)")
	require.NoError(t, l.Unlock(ctx))
}

// refuseWhileHeld tries key (ttl) with each of clients until held has
// little validity left: every try is refused, and each Client names the
// shards of the first two clusters as not counted (ErrNodeRestarted) at
// least once.
func refuseWhileHeld(t *testing.T, ctx context.Context, held *redlock.Lock, key string, ttl time.Duration, clients ...*redlock.Client) {
	t.Helper()
	excluded := make([]int, len(clients))
	for held.Validity() > 200*time.Millisecond {
		for i, c := range clients {
			_, err := c.TryLock(ctx, key, ttl)
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "a second owner while the first holds %v more", held.Validity())
			var qe *redlock.QuorumError
			require.True(t, errors.As(err, &qe))
			for _, n := range qe.Nodes[:2] {
				if errors.Is(n.Err, redlock.ErrNodeRestarted) {
					excluded[i]++
				}
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i, n := range excluded {
		require.Positive(t, n, "Client %d never named the shards that lost the lock", i)
	}
}

// A shard's restart check reads the marker of one slot, and each slot
// keeps its own record of when a check first saw a promoted dataset. A
// Client that meets a promoted shard on a second slot, later, waits from
// its first sighting of that shard (its view is the shard's, whatever the
// slot), not from the second slot's.
func TestCluster_aPromotedShardMetOnASecondSlotIsWaitedOutFromItsFirstSighting(t *testing.T) {
	t.Parallel()
	const maxTTL = 3 * time.Second
	clusters := redistest.StartRedisClustersReplicatedT(t, 3, 2)
	if clusters == nil {
		return
	}
	time.Sleep(maxTTL + time.Second) // the replicas have run for longer than any lock
	a, _, accs := clusterClient(t, clusters, redlock.WithRestartSafety(maxTTL))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	first := keyOffMarker(clusters[0], "lock:first:")
	second := first + ":second"
	for clusters[0].MasterFor(second) != clusters[0].MasterFor(first) || keyslot.Slot(second) == keyslot.Slot(first) {
		second += "x"
	}
	l, err := a.TryLock(ctx, "lock:warm", time.Second) // the deployment is new: every shard listed
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	for _, rc := range clusters[:2] {
		_, err := rc.FailOver(rc.MasterFor(first))
		require.NoError(t, err)
	}
	for _, cc := range accs {
		cc.ReloadState(ctx)
	}
	left := func(key string) time.Duration {
		t.Helper()
		var longest time.Duration
		waitFor(t, 5*time.Second, func() bool {
			_, err := a.TryLock(ctx, key, time.Second)
			m := regexp.MustCompile(`not counted toward a quorum for another ([0-9.]+m?s)`).FindAllStringSubmatch(fmt.Sprint(err), -1)
			for _, s := range m {
				d, _ := time.ParseDuration(s[1])
				longest = max(longest, d)
			}
			return len(m) >= 2
		}, "the promoted shards are named as not counted")
		return longest
	}
	t.Logf("first slot: %v left", left(first))
	time.Sleep(1500 * time.Millisecond)
	got := left(second)
	t.Logf("second slot, 1.5s later: %v left", got)
	require.Less(t, got, maxTTL-time.Second, "the wait runs from the shard's first sighting")
}
