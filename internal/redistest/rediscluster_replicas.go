package redistest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// replicatedArgs are the config directives of every node of a replicated
// cluster. A short node timeout lets the cluster settle quickly; no replica
// fails over or migrates by itself, so that in a healthy run the shape
// changes only through FailOver. A replica's first sync starts at once
// rather than after the default 5s wait for other replicas.
var replicatedArgs = []string{
	"--cluster-node-timeout", "1000",
	"--repl-diskless-sync-delay", "0",
	"--cluster-replica-no-failover", "yes",
	"--cluster-allow-replica-migration", "no",
}

// failOverWithin bounds how long FailOver waits for the survivors to agree
// on the promoted node.
const failOverWithin = 15 * time.Second

// cutWithin bounds how long CutReplication waits for the replica to catch
// up before the cut and for its link to go down after.
const cutWithin = 5 * time.Second

// cutUser and cutPassword are the credentials CutReplication gives a
// replica for its master: no node has such a user, so every AUTH the
// replica sends on reconnecting fails and it never resyncs.
const (
	cutUser     = "redistest-cut-replication"
	cutPassword = "redistest-cut-replication"
)

// StartRedisClusterReplicated is StartRedisCluster with one replica for
// each master: it starts 2*masters nodes, gives the first masters the
// slots, makes node masters+i a replica of node i (CLUSTER REPLICATE), and
// waits until every node reports cluster_state:ok and knows every other,
// and every replica reports master_link_status:up. The nodes run with a
// cluster-node-timeout of 1s and with automatic failover and replica
// migration off (opts.Args may override either); use FailOver to promote a
// replica. With opts.Password the replicas authenticate to their masters
// with it.
func StartRedisClusterReplicated(masters int, opts Options) (*RedisCluster, error) {
	args := append([]string(nil), replicatedArgs...)
	if opts.Password != "" {
		args = append(args, "--masterauth", opts.Password)
	}
	opts.Args = append(args, opts.Args...)
	return startRedisCluster(masters, true, opts)
}

// StartRedisClusterReplicatedT is StartRedisClusterReplicated for tests, as
// StartRedisClusterT is StartRedisCluster.
func StartRedisClusterReplicatedT(t testing.TB, masters int, opts ...Options) *RedisCluster {
	t.Helper()
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	return startClustersT(t, 1, func() (*RedisCluster, error) { return StartRedisClusterReplicated(masters, o) })[0]
}

// StartRedisClustersReplicatedT starts n replicated clusters of masters
// each at once, as StartRedisClusterReplicatedT does; it returns nil after
// failing t.
func StartRedisClustersReplicatedT(t testing.TB, n, masters int) []*RedisCluster {
	t.Helper()
	return startClustersT(t, n, func() (*RedisCluster, error) { return StartRedisClusterReplicated(masters, Options{}) })
}

// Masters returns the nodes that serve the slot ranges now, in slot order:
// Nodes until a FailOver, and then with the promoted replica in place of
// the master it replaced.
func (rc *RedisCluster) Masters() []*Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*Server(nil), rc.owner...)
}

// ReplicaOf returns the replica of master, or nil if master has none (the
// cluster is not replicated, master is not a current master, or it is a
// replica promoted by FailOver).
func (rc *RedisCluster) ReplicaOf(master *Server) *Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for i, m := range rc.owner {
		if m == master {
			return rc.replica[i]
		}
	}
	return nil
}

// AllAddrs returns the addresses of the current masters, in slot order,
// then of their replicas: every member of the cluster but the masters that
// FailOver killed. It suits a cluster client's seed list.
func (rc *RedisCluster) AllAddrs() []string {
	var addrs []string
	for _, s := range rc.members() {
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// members returns the current masters, then their replicas.
func (rc *RedisCluster) members() []*Server {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	m := append([]*Server(nil), rc.owner...)
	for _, r := range rc.replica {
		if r != nil {
			m = append(m, r)
		}
	}
	return m
}

// attacher returns a condition for waitFor that makes each replica a
// replica of its master, retrying those the cluster refused (a replica may
// not know its master's id yet), once each.
func (rc *RedisCluster) attacher() func() (bool, string) {
	done := make([]bool, len(rc.replica))
	return func() (bool, string) {
		for i, r := range rc.replica {
			if r == nil || done[i] {
				continue
			}
			id, err := redis.String(rc.owner[i].Do("CLUSTER", "MYID"))
			if err != nil {
				return false, fmt.Sprintf("%s: CLUSTER MYID: %v", rc.owner[i].Addr(), err)
			}
			if _, err := r.Do("CLUSTER", "REPLICATE", id); err != nil {
				return false, fmt.Sprintf("%s: CLUSTER REPLICATE %s: %v", r.Addr(), id, err)
			}
			done[i] = true
		}
		return true, ""
	}
}

// replicasUp reports whether every replica streams from its master and
// every node lists all the replicas as such.
func (rc *RedisCluster) replicasUp() (bool, string) {
	n := 0
	for _, r := range rc.replica {
		if r == nil {
			continue
		}
		n++
		info, err := redis.String(r.Do("INFO", "replication"))
		if err != nil {
			return false, err.Error()
		}
		if infoField(info, "master_link_status") != "up" {
			return false, r.Addr() + ": " + strings.ReplaceAll(info, "\r\n", " ")
		}
	}
	for _, s := range rc.all {
		nodes, err := redis.String(s.Do("CLUSTER", "NODES"))
		if err != nil {
			return false, err.Error()
		}
		if got := countReplicas(nodes); got != n {
			return false, fmt.Sprintf("%s lists %d replicas, want %d: %s", s.Addr(), got, n, nodes)
		}
	}
	return true, ""
}

// countReplicas returns how many nodes a CLUSTER NODES reply flags as
// replicas.
func countReplicas(nodes string) int {
	n := 0
	for _, line := range strings.Split(nodes, "\n") {
		if f := strings.Fields(line); len(f) > 2 && slices.Contains(strings.Split(f[2], ","), "slave") {
			n++
		}
	}
	return n
}

// infoField returns the value of field in the text of an INFO reply, or ""
// if it is missing.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// replOffset returns s's master_repl_offset: on a master, how much it has
// sent to its replicas; on a replica, how much of that it has applied.
func replOffset(s *Server) (int64, error) {
	info, err := redis.String(s.Do("INFO", "replication"))
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(infoField(info, "master_repl_offset"), 10, 64)
}
