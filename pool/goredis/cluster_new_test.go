package goredis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/redlock"
)

// keysOnEveryShard returns, for each master of rc, a key named after
// prefix that it serves, in slots no other key of the test uses.
func keysOnEveryShard(rc *redistest.RedisCluster, prefix string) []string {
	var keys []string
	seen := map[*redistest.Server]bool{}
	for n := 0; len(keys) < len(rc.Masters()); n++ {
		k := prefix + strconv.Itoa(n)
		if m := rc.MasterFor(k); !seen[m] {
			seen[m] = true
			keys = append(keys, k)
		}
	}
	return keys
}

// A new deployment of three Redlock nodes, each a 3-master cluster. Client
// A takes fenced locks on keys of the shard that holds the restart marker
// only; Client B, started beside it, then locks keys of every shard, in
// slots no one used, at once: the shards ran when A found the deployment
// new, so they lost nothing (docs/operations.md, "What restart safety
// excludes"). A shard that restarts empty afterwards is still excluded:
// TestCluster_aShardRestartedEmptyIsNotCountedUntilTheMaxTTL.
func TestCluster_aSecondClientLocksAnyKeyOfANewDeploymentAtOnce(t *testing.T) {
	t.Parallel()
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, exA, _ := clusterClient(t, clusters, redlock.WithRestartSafety(time.Minute))
	b, exB, _ := clusterClient(t, clusters, redlock.WithRestartSafety(time.Minute))
	marker := clusters[0].MasterFor(wire.MarkerKey)
	for n := 0; n < 3; n++ {
		k := "acc:a" + strconv.Itoa(n)
		for clusters[0].MasterFor(k) != marker {
			k += "x"
		}
		l, err := a.TryLock(ctx, k, time.Second, redlock.WithFencing())
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	for _, k := range keysOnEveryShard(clusters[0], "acc:b") {
		began := time.Now()
		l, err := b.TryLock(ctx, k, time.Second, redlock.WithFencing())
		require.NoError(t, err, "%s: a shard that lost nothing is counted", k)
		t.Logf("%s: locked by the second Client in %v", k, time.Since(began).Round(time.Millisecond))
		require.NoError(t, l.Unlock(ctx))
		l, err = a.TryLock(ctx, k, time.Second)
		require.NoError(t, err, "%s: and by the first", k)
		require.NoError(t, l.Unlock(ctx))
	}
	require.Empty(t, exA.list(), "no shard was excluded")
	require.Empty(t, exB.list(), "no shard was excluded")
}
