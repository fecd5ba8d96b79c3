package redistest

import (
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
)

// readonlyExists reports whether key exists on the replica r, read on a
// READONLY connection (a cluster replica redirects reads otherwise).
func readonlyExists(t *testing.T, r *Server, key string) bool {
	t.Helper()
	conn, err := redis.Dial("tcp", r.Addr(), redis.DialReadTimeout(2*time.Second))
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.Do("READONLY")
	require.NoError(t, err)
	n, err := redis.Int(conn.Do("EXISTS", key))
	require.NoError(t, err)
	return n == 1
}

func replID(t *testing.T, s *Server) string {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "replication"))
	require.NoError(t, err)
	id := infoField(info, "master_replid")
	require.NotEmpty(t, id)
	return id
}

func TestRedisClusterReplicated_shape(t *testing.T) {
	rc := StartRedisClusterReplicatedT(t, 2)
	require.Len(t, rc.Nodes(), 2)
	require.Equal(t, rc.Nodes(), rc.Masters())
	require.Len(t, rc.AllAddrs(), 4)
	require.Equal(t, rc.Addrs(), rc.AllAddrs()[:2])
	for _, m := range rc.Masters() {
		r := rc.ReplicaOf(m)
		require.NotNil(t, r)
		require.Nil(t, rc.ReplicaOf(r))
		info, err := redis.String(r.Do("INFO", "replication"))
		require.NoError(t, err)
		require.Equal(t, "slave", infoField(info, "role"))
		require.Equal(t, "up", infoField(info, "master_link_status"))
		require.Equal(t, strconv.Itoa(m.Port()), infoField(info, "master_port"))
	}
}

func TestRedisClusterReplicated_failOverLosesCutWrites(t *testing.T) {
	rc := StartRedisClusterReplicatedT(t, 2)
	const k, k2 = "{x}k", "{x}k2"
	m := rc.MasterFor(k)
	r := rc.ReplicaOf(m)
	require.NotNil(t, r)
	_, err := m.Do("SET", k, "before")
	require.NoError(t, err)
	oldID := replID(t, r)

	require.NoError(t, rc.CutReplication(m))
	require.True(t, readonlyExists(t, r, k), "a write acknowledged before the cut reached the replica")
	_, err = m.Do("SET", k2, "after")
	require.NoError(t, err)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		require.False(t, readonlyExists(t, r, k2), "the replica got a write after the cut")
		time.Sleep(50 * time.Millisecond)
	}
	require.Equal(t, "down", linkStatus(t, r), "the replica reconnected to its master")

	start := time.Now()
	p, err := rc.FailOver(m)
	require.NoError(t, err)
	t.Logf("FailOver took %v", time.Since(start))
	require.Same(t, r, p)
	require.False(t, m.Running())
	require.Same(t, p, rc.MasterFor(k))
	require.Same(t, p, rc.MasterFor(k2))
	require.Nil(t, rc.ReplicaOf(p))
	require.Len(t, rc.AllAddrs(), 3)

	v, err := redis.String(p.Do("GET", k))
	require.NoError(t, err)
	require.Equal(t, "before", v)
	n, err := redis.Int(p.Do("EXISTS", k2))
	require.NoError(t, err)
	require.Zero(t, n, "the promoted node has the write it missed")
	require.NotEqual(t, oldID, replID(t, p), "promotion kept the replication id")
	for _, s := range rc.Masters() {
		info, err := redis.String(s.Do("CLUSTER", "INFO"))
		require.NoError(t, err)
		require.Equal(t, "ok", infoField(info, "cluster_state"), s.Addr())
	}
}

func linkStatus(t *testing.T, r *Server) string {
	t.Helper()
	info, err := redis.String(r.Do("INFO", "replication"))
	require.NoError(t, err)
	return infoField(info, "master_link_status")
}

// With a password, the replicas authenticate to their masters, and the cut
// still holds: the wrong credentials it sets replace the right ones.
func TestRedisClusterReplicated_password(t *testing.T) {
	rc := StartRedisClusterReplicatedT(t, 1, Options{Password: "pw"})
	m := rc.Node(0)
	r := rc.ReplicaOf(m)
	require.Equal(t, "up", linkStatus(t, r))
	require.NoError(t, rc.CutReplication(m))
	_, err := m.Do("SET", "k", "after")
	require.NoError(t, err)
	time.Sleep(1500 * time.Millisecond)
	require.Equal(t, "down", linkStatus(t, r))
	n, err := redis.Int(r.Do("DBSIZE"))
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestRedisClustersReplicatedT(t *testing.T) {
	clusters := StartRedisClustersReplicatedT(t, 2, 1)
	require.Len(t, clusters, 2)
	for _, rc := range clusters {
		require.Len(t, rc.AllAddrs(), 2)
		require.Same(t, rc.Node(0), rc.MasterFor("a"))
	}
}
