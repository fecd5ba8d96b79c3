package tests

import (
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// Redlock nodes that are Redis Clusters: every key a script touches is in
// the lock key's hash slot, so the scripts run on the master that owns it.
// Here each of 3 Redlock nodes is a 3-master cluster, reached through
// pool.New on the master that owns the key (a cluster-aware client, such
// as the go-redis adapter, finds it by itself: pool/goredis's tests).
// Restart safety is off: its marker is in a slot of its own, on another
// master (docs/operations.md, "A node that is a Redis Cluster").
func TestCluster_locksWaitingHandOffsAndFencesOnClusterNodes(t *testing.T) {
	t.Parallel()
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}

	for _, key := range []string{newKey(t), "{order42}:" + newKey(t), newKey(t) + "{a", "}" + newKey(t), "{}" + newKey(t)} {
		t.Run(key, func(t *testing.T) {
			addrs := make([]string, len(clusters))
			for i, rc := range clusters {
				addrs[i] = rc.MasterFor(key).Addr()
			}
			client := func() *redlock.Client {
				return newClient(t, newPools(t, addrs), redlock.WithRestartSafety(0))
			}
			a, b := client(), client()

			held, err := a.TryLock(ctxT(t, quickly), key, longTTL, redlock.WithFencing())
			require.NoError(t, err)
			require.Positive(t, held.Fence())
			got := make(chan *redlock.Lock, 1)
			go func() {
				l, err := b.Lock(ctxT(t, 10*time.Second), key, longTTL, redlock.WithFencing())
				if err != nil {
					t.Error(err)
				}
				got <- l
			}()
			// Queued on a quorum: on a busy machine a node may time out.
			require.Eventually(t, func() bool {
				in, err := a.Inspect(ctxT(t, quickly), key)
				require.NoError(t, err)
				queued := 0
				for _, n := range in.Nodes {
					if n.Queued > 0 {
						queued++
					}
				}
				return queued >= in.Quorum
			}, 5*time.Second, 5*time.Millisecond, "the waiter is queued")
			require.NoError(t, held.Extend(ctxT(t, quickly), longTTL))
			require.NoError(t, held.Unlock(ctxT(t, quickly)))
			next := <-got
			require.NotNil(t, next)
			require.Greater(t, next.Fence(), held.Fence(), "fences grow on cluster nodes too")
			require.NoError(t, next.Unlock(ctxT(t, quickly)))
		})
	}

	// Names outside the key's slot are refused by a cluster node: the
	// check above could fail.
	key := newKey(t)
	_, err := clusters[0].MasterFor(key).Do("EVAL", "return redis.call('ZCARD', KEYS[2])", 2, key, key+":waiters")
	require.ErrorContains(t, err, "CROSSSLOT")
	_, err = clusters[0].MasterFor(key).Do("EVAL", "return redis.call('ZCARD', KEYS[2])", 2, key, wire.WaitersKey(key))
	require.NoError(t, err)

	// The slots the library computes are the cluster's.
	for _, k := range []string{"", "{}", "{}a", "a{b", "a}b", "{a}{b}", "a{}{b}", "x{", "{a", "\x00\xff{\x01}", "ünïcode", key} {
		want, err := redis.Int(clusters[0].Node(0).Do("CLUSTER", "KEYSLOT", k))
		require.NoError(t, err)
		require.Equal(t, want, int(keyslot.Slot(k)), "%q", k)
		for _, name := range []string{wire.WaitersKey(k), wire.EntryKey(k, "c}{x.1"), wire.FenceKey(k)} {
			got, err := redis.Int(clusters[0].Node(0).Do("CLUSTER", "KEYSLOT", name))
			require.NoError(t, err)
			require.Equal(t, want, got, "%q's %s", k, name)
		}
	}
}
