package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// lockerOptions are those of the Client that takes the locks the command
// inspects: restart safety off and a generous node timeout, so that a
// slow first check on a loaded machine cannot keep a new node out of the
// quorums (the command is under test, not the locking).
var lockerOptions = []redlock.Option{redlock.WithRestartSafety(0), redlock.WithNodeTimeout(2 * time.Second)}

func runCmd(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut, func(k string) string { return env[k] })
	return code, out.String(), errOut.String()
}

func TestInspectAndForceRelease_onRealNodes(t *testing.T) {
	nodes := redistest.StartT(t, 3, redistest.Options{Password: "s3cret"})
	addrs := strings.Join(nodes.Addrs(), ",")
	env := map[string]string{"REDLOCK_PASSWORD": "s3cret"}
	var pools []pool.Pool
	for _, a := range nodes.Addrs() {
		p, err := pool.New(a, pool.WithPassword("s3cret"))
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, lockerOptions...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	l, err := c.TryLock(ctx, "orders:42", time.Minute, redlock.WithFencing())
	require.NoError(t, err)
	// TryLock returns once a quorum granted: the last node's grant and
	// fence may still be on their way.
	for _, s := range nodes.Nodes() {
		require.Eventually(t, func() bool {
			n, err := s.Do("EXISTS", "orders:42")
			return err == nil && n == int64(1)
		}, 5*time.Second, 5*time.Millisecond, "node %s", s.Addr())
	}

	code, out, errOut := runCmd(t, env, "inspect", "-addrs", addrs, "orders:42")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `key "orders:42": held by client `+c.ID()+" on 3 of 3 nodes (quorum 2)")
	require.Len(t, regexp.MustCompile(`(?m)^\S+\s+held\s+`+c.ID()+`\s`).FindAllString(out, -1), 3, out)
	require.NotContains(t, out, l.Token(), "the token is the holder's secret")
	require.Contains(t, out, "NODE")

	code, _, errOut = runCmd(t, env, "force-release", "-addrs", addrs, "orders:42")
	require.Equal(t, 2, code, "force-release without -yes")
	require.Contains(t, errOut, "-yes")
	code, out, errOut = runCmd(t, env, "force-release", "-addrs", addrs, "-yes", "orders:42")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "released")
	require.ErrorIs(t, l.Extend(ctx, time.Minute), redlock.ErrLockLost)

	code, out, _ = runCmd(t, env, "inspect", "-addrs", addrs, "orders:42")
	require.Equal(t, 0, code)
	require.Contains(t, out, "free on every node")

	// A node that refuses the password is named, with its error, and the
	// others still answer.
	code, out, errOut = runCmd(t, map[string]string{"REDLOCK_PASSWORD": "wrong"}, "inspect", "-addrs", addrs, "orders:42")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, nodes.Addrs()[0])
	require.Contains(t, strings.ToUpper(out), "WRONGPASS")
	require.NotContains(t, out, "wrong\n")
}

func TestRun_refusesBadCommandLines(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"bogus"},
		{"inspect"},
		{"inspect", "-addrs", "127.0.0.1:1"},
		{"inspect", "-addrs", "127.0.0.1:1", "a", "b"},
		{"inspect", "-nope", "k"},
		{"inspect", "-addrs", "127.0.0.1:1,127.0.0.1:1", "k"},
	} {
		code, _, errOut := runCmd(t, nil, args...)
		require.Equal(t, 2, code, "%q: %s", args, errOut)
		require.Contains(t, errOut, "usage:")
	}
}

func TestInspect_anUnreachableNodeIsNamedAndBounded(t *testing.T) {
	nodes := redistest.StartT(t, 3)
	require.NoError(t, nodes.Node(2).Kill())
	start := time.Now()
	code, out, errOut := runCmd(t, nil, "inspect", "-addrs", strings.Join(nodes.Addrs(), ","), "-timeout", "500ms", "k")
	require.Equal(t, 0, code, errOut)
	require.Less(t, time.Since(start), 5*time.Second)
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, nodes.Addrs()[2]) {
			line = l
		}
	}
	require.NotEmpty(t, line, out)
	require.Contains(t, line, "redlock/pool: node "+nodes.Addrs()[2])
}

// inspect -kind prints a semaphore's permits in use, a read-write lock's
// mode and holders, and an election's leader, each node by node.
func TestInspect_theOtherKindsOnRealNodes(t *testing.T) {
	nodes := redistest.StartT(t, 3)
	addrs := strings.Join(nodes.Addrs(), ",")
	var pools []pool.Pool
	for _, a := range nodes.Addrs() {
		p, err := pool.New(a)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, lockerOptions...)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ctx := context.Background()
	rows := func(out, pattern string) int {
		return len(regexp.MustCompile(`(?m)^127\.0\.0\.1:\d+\s+`+pattern).FindAllString(out, -1))
	}

	p, err := c.Semaphore("pool", 2).TryAcquire(ctx, time.Minute)
	require.NoError(t, err)
	code, out, errOut := runCmd(t, nil, "inspect", "-addrs", addrs, "-kind", "semaphore", "-permits", "2", "pool")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `semaphore "pool": 1 permits in use on a quorum (2): slot 0 by client `+c.ID())
	require.GreaterOrEqual(t, rows(out, `2\s+0\s+0=`+c.ID()+`\(`), 2, out)
	require.NotContains(t, out, p.Token())
	code, out, errOut = runCmd(t, nil, "inspect", "-addrs", addrs, "-kind", "semaphore", "pool")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "slot 0 by client "+c.ID(), "every slot is read by default")

	r, err := c.RWLock("doc").TryRLock(ctx, time.Minute)
	require.NoError(t, err)
	code, out, errOut = runCmd(t, nil, "inspect", "-addrs", addrs, "-kind", "rwlock", "doc")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `read-write lock "doc": read on a quorum (2): 1 readers, clients `+c.ID())
	require.GreaterOrEqual(t, rows(out, `read\s+-\s+`+c.ID()+`\(`), 2, out)
	require.NotContains(t, out, r.Token())

	l, err := c.Election("jobs").Campaign(ctx, "worker-1", time.Minute)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, out, _ = runCmd(t, nil, "inspect", "-addrs", addrs, "-kind", "election", "jobs")
		return rows(out, c.ID()+`\(\S+\)\s+"worker-1"`) == 3
	}, 5*time.Second, 10*time.Millisecond, "the record on every node: %s", out)
	require.Contains(t, out, fmt.Sprintf(`election "jobs": leader "worker-1" (client %s), term %d, ttl `, c.ID(), l.Fence()))
	require.NotContains(t, out, l.Token())
	require.NoError(t, l.Unlock(ctx))
	code, out, errOut = runCmd(t, nil, "inspect", "-addrs", addrs, "-kind", "election", "jobs")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, `election "jobs": no leader on a quorum`)
}

func TestRun_refusesBadKinds(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "-addrs", "127.0.0.1:1", "-kind", "queue", "k"},
		{"inspect", "-addrs", "127.0.0.1:1", "-kind", "semaphore", "-permits", "0", "k"},
		{"inspect", "-addrs", "127.0.0.1:1", "-kind", "semaphore", "-permits", "65", "k"},
		{"force-release", "-addrs", "127.0.0.1:1", "-kind", "rwlock", "-yes", "k"},
	} {
		code, _, errOut := runCmd(t, nil, args...)
		require.Equal(t, 2, code, "%q: %s", args, errOut)
		require.Contains(t, errOut, "usage:")
	}
}

// nodes tells, node by node, whether restart safety counts a node: a node
// that restarted empty after a Client marked the deployment is kept out,
// for the rest of the maximum TTL, and named so.
func TestNodes_namesANodeThatRestartedEmptyAsNotCounted(t *testing.T) {
	nodes := redistest.StartT(t, 3)
	addrs := strings.Join(nodes.Addrs(), ",")
	code, out, errOut := runCmd(t, nil, "nodes", "-addrs", addrs)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "3 of 3 nodes counted", "no node has a marker: a new deployment\n%s", out)

	var pools []pool.Pool
	for _, a := range nodes.Addrs() {
		p, err := pool.New(a)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	l, err := c.TryLock(context.Background(), "k", time.Minute) // marks every node
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.Eventually(t, func() bool {
		_, out, _ = runCmd(t, nil, "nodes", "-addrs", addrs)
		return strings.Count(out, "counted (marked: run id and lineage)") == 3
	}, 5*time.Second, 20*time.Millisecond, out)

	require.NoError(t, nodes.Node(0).Kill())
	require.NoError(t, nodes.Node(0).Restart()) // without its data
	code, out, errOut = runCmd(t, nil, "nodes", "-addrs", addrs, "-max-ttl", "30s")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 of 3 nodes counted", out)
	require.Regexp(t, regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(nodes.Addrs()[0])+`\s.*not counted for another`), out)
}

// info reads node's INFO section as fields.
func info(t *testing.T, node *redistest.Server, section string) map[string]string {
	t.Helper()
	v, err := redis.String(node.Do("INFO", section))
	require.NoError(t, err)
	return infoFields(v)
}

// nodeLine is the line of nodes' output about the node at addr.
func nodeLine(t *testing.T, out, addr string) string {
	t.Helper()
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, addr+" ") {
			return l
		}
	}
	t.Fatalf("no line of %s in\n%s", addr, out)
	return ""
}

// nodes reads each form of the marker, and a replica, as node.lua does:
// a mark of run id and lineage, an older marker of the run id, a "~"
// record with its wait left, a marker of another lineage that no check
// has seen yet, and a replica, which counts toward no quorum.
func TestNodes_readsEveryFormOfTheMarker(t *testing.T) {
	nodes := redistest.StartT(t, 5)
	ids, replids := make([]string, 5), make([]string, 5)
	for i, n := range nodes.Nodes() {
		ids[i], replids[i] = info(t, n, "server")["run_id"], info(t, n, "replication")["master_replid"]
		require.NotEmpty(t, ids[i])
		require.NotEmpty(t, replids[i])
	}
	const otherLineage = "0123456789abcdef0123456789abcdef01234567"
	markers := []string{
		wire.MarkerOf(ids[0], replids[0]),
		ids[1],
		"~ " + wire.MarkerOf(ids[2], replids[2]) + " 0", // first seen at its start
		wire.MarkerOf(ids[3], otherLineage),
	}
	for i, v := range markers {
		_, err := nodes.Node(i).Do("SET", wire.MarkerKey, v)
		require.NoError(t, err)
	}
	_, err := nodes.Node(4).Do("REPLICAOF", "127.0.0.1", nodes.Node(3).Port())
	require.NoError(t, err)

	code, out, errOut := runCmd(t, nil, "nodes", "-addrs", strings.Join(nodes.Addrs(), ","), "-max-ttl", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 of 5 nodes counted by restart safety (quorum 3; maximum TTL 1h0m0s)", out)
	row := func(i int, marked, why string) {
		t.Helper()
		re := `^` + regexp.QuoteMeta(nodes.Addrs()[i]) + `\s+` + ids[i] + `\s+\d+s\s+` + marked + `\s+` + why + `$`
		require.Regexp(t, regexp.MustCompile(re), nodeLine(t, out, nodes.Addrs()[i]))
	}
	row(0, "yes", regexp.QuoteMeta("counted (marked: run id and lineage)"))
	row(1, "yes", regexp.QuoteMeta("counted (marked: run id and lineage)"))
	row(2, "no", `not counted for another (1h0m0s|59m5\ds): `+regexp.QuoteMeta("its data came from another process or lineage (a promoted replica, or a restart from a snapshot), first seen ")+`\d+s ago`+regexp.QuoteMeta(durableNote))
	row(3, "no", regexp.QuoteMeta("not counted for the maximum TTL after the next check: its data came from another process or lineage and no check has seen it yet"+durableNote))
	row(4, "no", regexp.QuoteMeta("not counted: a replica (role:slave)"))

	for i, n := range nodes.Nodes()[:4] {
		v, err := redis.String(n.Do("GET", wire.MarkerKey))
		require.NoError(t, err)
		require.Equal(t, markers[i], v, "node %d: nodes writes nothing", i)
	}
}

// A replica promoted in its master's place carries the master's marker:
// nodes says it waits for a check, and once a Client's check has seen it,
// for how much longer it is kept out.
func TestNodes_aPromotedReplicaWaitsFromTheCheckThatSawIt(t *testing.T) {
	all := redistest.StartT(t, 4, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	_, err := all.Node(3).Do("REPLICAOF", "127.0.0.1", all.Node(2).Port())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return info(t, all.Node(3), "replication")["master_link_status"] == "up"
	}, 10*time.Second, 10*time.Millisecond)
	c := newMarkingClient(t, all.Addrs()[:3])
	l, err := c.TryLock(context.Background(), "k", time.Minute) // marks nodes 0 to 2 (a new deployment)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.Eventually(t, func() bool { // the replica has its master's mark
		v, err := redis.String(all.Node(3).Do("GET", wire.MarkerKey))
		return err == nil && wire.ParseMarker(v).Marks(info(t, all.Node(2), "server")["run_id"], info(t, all.Node(2), "replication")["master_replid"], true)
	}, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, all.Node(2).Kill())
	_, err = all.Node(3).Do("REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	addrs := []string{all.Addrs()[0], all.Addrs()[1], all.Addrs()[3]}
	code, out, errOut := runCmd(t, nil, "nodes", "-addrs", strings.Join(addrs, ","), "-max-ttl", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 of 3 nodes counted", out)
	require.Contains(t, nodeLine(t, out, addrs[2]), "not counted for the maximum TTL after the next check: its data came from another process or lineage and no check has seen it yet", out)

	c2 := newMarkingClient(t, addrs)
	l, err = c2.TryLock(context.Background(), "k", time.Minute) // nodes 0 and 1 make the quorum
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
	require.Eventually(t, func() bool { // the check has recorded its first sighting
		v, err := redis.String(all.Node(3).Do("GET", wire.FactKey(wire.MarkerKey, wire.FactSeen)))
		return err == nil && wire.ParseMarker(v).Pending == "~"
	}, 10*time.Second, 10*time.Millisecond)
	code, out, errOut = runCmd(t, nil, "nodes", "-addrs", strings.Join(addrs, ","), "-max-ttl", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "2 of 3 nodes counted", out)
	require.Regexp(t, `not counted for another (1h0m0s|59m\d+s): its data came from another process or lineage \(a promoted replica, or a restart from a snapshot\), first seen \d+s ago`, nodeLine(t, out, addrs[2]))
}

// newMarkingClient is a Client over the nodes at addrs with restart
// safety on (maximum TTL 1h): its checks mark the nodes.
func newMarkingClient(t *testing.T, addrs []string) *redlock.Client {
	t.Helper()
	var pools []pool.Pool
	for _, a := range addrs {
		p, err := pool.New(a)
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		pools = append(pools, p)
	}
	c, err := redlock.New(pools, redlock.WithRestartSafety(time.Hour), redlock.WithNodeTimeout(2*time.Second))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

// The verdicts, branch by branch, on what the nodes reported.
func TestNodes_verdicts(t *testing.T) {
	const id, lin, other = "aa11", "bb22", "cc33"
	node := func(up int64, marker string, copied bool) nodeState {
		return nodeState{runID: id, up: up, role: "master", lineage: lin, copied: copied, marker: marker, hasMark: marker != "-"}
	}
	for _, c := range []struct {
		s       nodeState
		used    bool
		counted bool
		why     string
	}{
		{nodeState{runID: id, role: "slave", lineage: lin, marker: id + " " + lin, hasMark: true}, true, false, "not counted: a replica (role:slave)"},
		{node(5, id+" "+lin, false), true, true, "counted (marked: run id and lineage)"},
		{node(5, id, false), true, true, "counted (marked: run id and lineage)"},
		{node(5, id, true), true, false, "no check has seen it yet" + durableNote}, // a mark without its lineage, on a promoted dataset
		{node(5, "-", false), false, true, "counted at once: no node has a marker (a new deployment)"},
		{node(5, "? "+id+" "+lin+" 0", true), false, true, "counted at once"},
		{node(5, "-", false), true, false, "not counted for another 56s: no marker while other nodes have one"},
		{node(61, "-", false), true, true, "counted at its next use (up for the maximum TTL), then marked"},
		{node(100, "~ "+id+" "+lin+" 82", false), true, false, "not counted for another 43s: its data came from another process or lineage (a promoted replica, or a restart from a snapshot), first seen 18s ago" + durableNote},
		{node(100, "? "+id+" "+lin+" 82", true), true, false, "first seen 18s ago"},
		{node(100, "~ "+id+" "+lin+" 39", false), true, true, "counted at its next use (the maximum TTL has passed since its data was first seen from another lineage), then marked"},
		{node(5, "-", true), true, false, "not counted for the maximum TTL after the next check: its data came from another process or lineage and no check has seen it yet"},
		{node(5, id+" "+other, false), true, false, "no check has seen it yet" + durableNote},
		{node(5, "~ "+id+" "+other+" 1", false), true, false, "no check has seen it yet" + durableNote},
		{node(5, "? "+id+" "+other+" 1", true), true, false, "no check has seen it yet"},
		{node(5, "garbage", false), true, false, "not counted for another 56s: no marker while other nodes have one"}, // a later form
		{node(5, "garbage", true), true, false, "no check has seen it yet"},
	} {
		counted, why := c.s.verdict(c.used, time.Minute)
		require.Equal(t, c.counted, counted, "%+v: %s", c.s, why)
		require.True(t, strings.HasPrefix(why, c.why) || strings.HasSuffix(why, c.why), "%+v: %q", c.s, why)
		if c.s.hasMark && strings.HasPrefix(c.s.marker, "?") {
			require.True(t, !strings.HasSuffix(why, durableNote), "a ? record had no marker: %q", why)
		}
	}
	require.False(t, node(5, "? "+id+" "+lin+" 0", true).usesDeployment(), "a ? record does not make the deployment used")
	require.True(t, node(5, "~ "+id+" "+lin+" 0", false).usesDeployment())
	require.True(t, node(5, id+" "+other, false).usesDeployment())
	require.False(t, node(5, "-", false).usesDeployment())
}

// Help reads like a Go tool's: the commands, and each command's own flags
// with their defaults and an example, on the standard output, exit 0.
func TestRun_help(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		code, out, errOut := runCmd(t, nil, args...)
		require.Equal(t, 0, code, "%q: %s", args, errOut)
		for _, cmd := range []string{"inspect", "force-release", "nodes"} {
			require.Contains(t, out, cmd, "%q", args)
		}
	}
	for _, c := range []struct {
		cmd       string
		has, hasn []string
	}{
		{"inspect", []string{"-kind", "-permits", "(default 64)", "-addrs", "-timeout", "Example:"}, []string{"-yes", "-max-ttl"}},
		{"force-release", []string{"-yes", "-addrs", "Example:"}, []string{"-kind", "-max-ttl"}},
		{"nodes", []string{"-max-ttl", "(default 1m0s)", "Example:"}, []string{"-yes", "-kind"}},
	} {
		for _, args := range [][]string{{"help", c.cmd}, {c.cmd, "-h"}} {
			code, out, errOut := runCmd(t, nil, args...)
			require.Equal(t, 0, code, "%q: %s", args, errOut)
			require.Contains(t, out, "usage: redlock "+c.cmd)
			for _, s := range c.has {
				require.Contains(t, out, s, "%q", args)
			}
			for _, s := range c.hasn {
				require.NotContains(t, out, s, "%q: a flag of another command", args)
			}
		}
	}
	for _, args := range [][]string{{"help", "bogus"}, {"help", "nodes", "more"}, {"inspect", "-yes", "-addrs", "127.0.0.1:1", "k"}, {"nodes", "-kind", "rwlock", "-addrs", "127.0.0.1:1"}} {
		code, _, errOut := runCmd(t, nil, args...)
		require.Equal(t, 2, code, "%q: %s", args, errOut)
		require.Contains(t, errOut, "usage:")
	}
}
