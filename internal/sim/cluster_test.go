//go:build go1.25

package sim

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/keyslot"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A cluster node's pool sends each command to the shard that serves its
// key's slot, and again after a MOVED answer; a shard refuses a key of a
// slot it does not serve, and a script whose keys span slots (CROSSSLOT).
func TestClusterPool_routesByTheSlotAndFollowsAMove(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cl, cp := testCluster(t)
		ctx := context.Background()
		set := pool.NewScript(1, `return redis.call("SET", KEYS[1], ARGV[1])`)
		get := pool.NewScript(1, `return redis.call("GET", KEYS[1])`)
		for _, k := range []string{"k1", "k2", "k3", "k4", "k5", "k6", "sem", "rw", "el"} {
			_, err := cp.Eval(ctx, set, k, "v")
			require.NoError(t, err, k)
			slot := keyslot.Slot(k)
			from := cl.serving(slot)
			_, moved := cl.move(slot, (from+1)%3)
			require.Equal(t, 1, moved, k)
			v, err := cp.Eval(ctx, get, k)
			require.NoError(t, err, k)
			require.Equal(t, []byte("v"), v, k)
			_, err = cp.shards[from].Eval(ctx, get, k)
			require.ErrorContains(t, err, "MOVED", k)
			_, err = cp.Eval(ctx, wire.NodeCheck, wire.ShardCheckArgs(slot, "")...)
			require.NoError(t, err, k)
		}
		_, err := cp.Eval(ctx, pool.NewScript(2, `return 1`), "k1", "k2")
		require.ErrorContains(t, err, "CROSSSLOT")
	})
}

// A script that takes its key count as its first argument is routed by
// its first key.
func TestClusterPool_routesAScriptOfAVariableKeyCount(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, cp := testCluster(t)
		keys := pool.NewScript(-1, `return redis.call("SET", KEYS[1], ARGV[1])`)
		for _, k := range []string{"k1", "k3", "el"} {
			_, err := cp.Eval(context.Background(), keys, 1, k, "v")
			require.NoError(t, err, k)
		}
	})
}

// testCluster is a cluster of 3 shards and a pool of it, closed when the
// test ends.
func testCluster(t *testing.T) (*simCluster, *clusterPool) {
	cl := newCluster(0, 3)
	w := &world{}
	cp := &clusterPool{addr: "c", cl: cl}
	for _, s := range cl.shards {
		p := w.newPool(s, "c1")
		cp.shards = append(cp.shards, p)
		t.Cleanup(func() { _ = p.Close(); s.Close() })
	}
	return cl, cp
}
