package goredis_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
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

// moveSlot moves slot, with its keys, from master src to master dst of rc,
// as resharding does (CLUSTER SETSLOT IMPORTING and MIGRATING, MIGRATE,
// then CLUSTER SETSLOT NODE on every master).
func moveSlot(t *testing.T, rc *redistest.RedisCluster, slot uint16, src, dst *redistest.Server) {
	t.Helper()
	id := func(s *redistest.Server) string {
		v, err := s.Do("CLUSTER", "MYID")
		require.NoError(t, err)
		b, _ := v.([]byte)
		return string(b)
	}
	srcID, dstID := id(src), id(dst)
	_, err := dst.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", srcID)
	require.NoError(t, err)
	_, err = src.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", dstID)
	require.NoError(t, err)
	v, err := src.Do("CLUSTER", "GETKEYSINSLOT", slot, 1000)
	require.NoError(t, err)
	keys, _ := v.([]any)
	require.NotEmpty(t, keys, "the slot holds the lock's keys")
	args := append([]any{"127.0.0.1", dst.Port(), "", 0, 5000, "KEYS"}, keys...)
	_, err = src.Do("MIGRATE", args...)
	require.NoError(t, err)
	for _, m := range rc.Masters() {
		_, err = m.Do("CLUSTER", "SETSLOT", slot, "NODE", dstID)
		require.NoError(t, err)
	}
}

// Resharding under a held lock: on every Redlock node (a 3-master
// cluster) the slot of a held lock moves, with its keys, to another
// master. The lock stays held (it extends, and no Client takes the key),
// no shard is excluded, and after its release the key is free at once for
// the Client that held it and for a new one.
func TestCluster_aSlotMovedUnderAHeldLockExcludesNothing(t *testing.T) {
	t.Parallel()
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, exA, _ := clusterClient(t, clusters, redlock.WithRestartSafety(time.Minute))
	key := "acc:moved"
	held, err := a.TryLock(ctx, key, 10*time.Second, redlock.WithFencing())
	require.NoError(t, err)
	slot := keyslot.Slot(key)
	for _, rc := range clusters {
		src := rc.MasterFor(key)
		dst := rc.Masters()[0]
		if dst == src {
			dst = rc.Masters()[1]
		}
		moveSlot(t, rc, slot, src, dst)
	}
	b, exB, _ := clusterClient(t, clusters, redlock.WithRestartSafety(time.Minute))
	_, err = b.TryLock(ctx, key, time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "held")
	require.NotContains(t, err.Error(), "restarted", "refused because held, not because a shard is excluded")
	require.NoError(t, held.Extend(ctx, 10*time.Second), "the lock stays held where its keys went")
	require.NoError(t, held.Unlock(ctx))
	for name, c := range map[string]*redlock.Client{"the holder's Client": a, "a new Client": b} {
		began := time.Now()
		l, err := c.TryLock(ctx, key, time.Second)
		require.NoError(t, err, "%s: the key is free", name)
		t.Logf("%s: locked the released key in %v", name, time.Since(began).Round(time.Microsecond))
		require.NoError(t, l.Unlock(ctx))
	}
	require.Empty(t, exA.list(), "no shard was excluded")
	require.Empty(t, exB.list(), "no shard was excluded")
}
