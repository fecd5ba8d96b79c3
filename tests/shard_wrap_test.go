package tests

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
)

// A grant asked with its shard's identity (wire.Sharded, for nodes that
// are Redis Clusters: redlock/shards.go) answers what the grant itself
// answers, beside the replication id of the dataset that made it; an
// error stays an error, and names the script's own line.
func TestSharded_aGrantReportsTheLineageOfTheDatasetThatMadeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	s, p := e.nodes[0], e.pools[0]
	replid := infoReplid(t, s.Do)
	key := newKey(t)
	set := wire.Sharded(wire.CommandScript("SET"))

	shard, inner, err := sharded(t, p, set, wire.SetArgs(key, "tok1", 10_000))
	require.NoError(t, err)
	require.Equal(t, replid, shard)
	require.Nil(t, inner, "SET NX GET took the key")

	shard, inner, err = sharded(t, p, set, wire.SetArgs(key, "tok2", 10_000))
	require.NoError(t, err)
	require.Equal(t, replid, shard)
	v, _ := wire.String(inner)
	require.Equal(t, "tok1", v, "the holder's token")

	// A script's array reply, and its error reply.
	shard, inner, err = sharded(t, p, wire.Sharded(wire.Extend), wire.ExtendArgs(key, "tok1", 5_000, ""))
	require.NoError(t, err)
	require.Equal(t, replid, shard)
	require.NotNil(t, inner)

	// A command refused inside the script: the node names the script's
	// own line, which names the same command in the wrapped script.
	_, err = s.Do("HSET", key+":h", "f", "v")
	require.NoError(t, err)
	ext := wire.Sharded(wire.Extend)
	_, err = p.Eval(ctxT(t, quickly), ext, wire.ExtendArgs(key+":h", "tok1", 5_000, "")...)
	require.ErrorContains(t, err, "WRONGTYPE")
	m := regexp.MustCompile(`@user_script:(\d+)`).FindStringSubmatch(err.Error())
	require.NotNil(t, m, "%v", err)
	line, _ := strconv.Atoi(m[1])
	cmd, ok := wire.Called(ext.Hash(), line)
	require.True(t, ok, "line %d of %v", line, err)
	orig, _ := wire.Called(wire.Extend.Hash(), line)
	require.Equal(t, orig, cmd)

	// The node restarted: another dataset, another identity.
	require.NoError(t, s.Kill())
	require.NoError(t, s.Restart())
	shard, _, err = sharded(t, p, set, wire.SetArgs(key, "tok3", 10_000))
	if err != nil { // the pool's connection died with the process: once more
		shard, _, err = sharded(t, p, set, wire.SetArgs(key, "tok3", 10_000))
	}
	require.NoError(t, err)
	require.NotEqual(t, replid, shard)
	require.Equal(t, infoReplid(t, s.Do), shard)
}

// sharded runs the wrapped script w on p and splits its reply.
func sharded(t testing.TB, p pool.Pool, w *pool.Script, args []any) (shard string, inner any, err error) {
	reply, err := p.Eval(ctxT(t, quickly), w, args...)
	if err != nil {
		return "", nil, err
	}
	return wire.ShardReply(reply)
}

// infoReplid returns a node's master_replid.
func infoReplid(t testing.TB, do func(string, ...any) (any, error)) string {
	t.Helper()
	v, err := do("INFO", "replication")
	require.NoError(t, err)
	b, _ := v.([]byte)
	for _, line := range strings.Split(string(b), "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return id
		}
	}
	t.Fatalf("no master_replid in %q", b)
	return ""
}
