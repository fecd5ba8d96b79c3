package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
	"github.com/quorumlock/redlock/redlock"
)

// Redlock nodes that are Sentinel-managed masters, reached through
// go-redis's failover client (docs/operations.md, "Replicas and
// failover"). Linux only: the Sentinel process is made to die with the
// test process (Pdeathsig), as internal/redistest does for its nodes.

// startSentinel starts one Sentinel monitoring masters[i] as "node<i>",
// with a quorum of 1, and returns its address once it answers PING. It is
// killed when the test ends.
func startSentinel(t *testing.T, masters []string) string {
	t.Helper()
	bin, err := redistest.Path()
	require.NoError(t, err)
	dir := t.TempDir()
	var last error
	for range 3 { // another process may take the free port first
		addr, err := launchSentinel(t, bin, dir, masters)
		if err == nil {
			return addr
		}
		last = err
	}
	t.Fatal(last)
	return ""
}

func launchSentinel(t *testing.T, bin, dir string, masters []string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	var conf strings.Builder
	fmt.Fprintf(&conf, "port %d\nbind 127.0.0.1\ndir %s\n", port, dir)
	for i, m := range masters {
		host, mport, err := net.SplitHostPort(m)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&conf, "sentinel monitor node%d %s %s 1\n", i, host, mport)
		fmt.Fprintf(&conf, "sentinel down-after-milliseconds node%d 1000\n", i)
		fmt.Fprintf(&conf, "sentinel failover-timeout node%d 5000\n", i)
	}
	// Sentinel rewrites its configuration file: a fresh one per attempt.
	confPath := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
	if err := os.WriteFile(confPath, []byte(conf.String()), 0o644); err != nil {
		return "", err
	}
	logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", port)))
	if err != nil {
		return "", err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(bin, confPath, "--sentinel")
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	kill := func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Errorf("sentinel (pid %d) not reaped 5s after SIGKILL", cmd.Process.Pid)
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		select {
		case <-done:
			log, _ := os.ReadFile(logf.Name())
			return "", fmt.Errorf("sentinel on %s exited before it answered; log:\n%s", addr, log)
		default:
		}
		if err == nil {
			t.Cleanup(kill)
			return addr, nil
		}
		if time.Now().After(deadline) {
			kill()
			log, _ := os.ReadFile(logf.Name())
			return "", fmt.Errorf("sentinel on %s not answering after 5s (%v); log:\n%s", addr, err, log)
		}
	}
}

// sentinelClient is a Redlock Client over one failover client per node,
// each closed when the test ends. It returns the failover clients too.
func sentinelClient(t *testing.T, sentinel string, n int, opts ...redlock.Option) (*redlock.Client, []*redis.Client) {
	t.Helper()
	pools := make([]pool.Pool, n)
	rdbs := make([]*redis.Client, n)
	for i := range n {
		rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: fmt.Sprintf("node%d", i),
			SentinelAddrs: []string{sentinel}, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = rdb.Close() })
		rdbs[i] = rdb
		// A failover client's address is "FailoverClient": name each node.
		pools[i] = goredis.New(rdb, goredis.WithName(fmt.Sprintf("node%d", i)))
	}
	c, err := redlock.New(pools, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	return c, rdbs
}

// Three Redlock nodes, each a master with a replica under one Sentinel.
// Sentinel fails node 0 over (SENTINEL FAILOVER): the replica is promoted
// and the failover clients move to it. With node 1 held by another owner,
// a lock needs nodes 0 and 2, so it is refused while restart safety keeps
// the promoted node 0 out, for the existing Client and for a new one, and
// granted once the maximum TTL has passed since the failover.
func TestSentinel_aFailedOverNodeCountsOnlyAfterTheMaxTTL(t *testing.T) {
	const (
		n      = 3
		maxTTL = 2 * time.Second
	)
	nodes := redistest.StartT(t, 2*n, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}}).Nodes()
	masters, replicas := nodes[:n], nodes[n:]
	masterAddrs := make([]string, n)
	for i := range n {
		masterAddrs[i] = masters[i].Addr()
		_, err := replicas[i].Do("REPLICAOF", "127.0.0.1", masters[i].Port())
		require.NoError(t, err)
	}
	for i := range n {
		waitFor(t, 10*time.Second, func() bool {
			return infoField(t, replicas[i], "replication", "master_link_status") == "up"
		}, "replica %d not in sync", i)
	}
	sentinel := startSentinel(t, masterAddrs)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel})
	defer sc.Close()

	obs := &exclusions{}
	b, rdbs := sentinelClient(t, sentinel, n, redlock.WithRestartSafety(maxTTL), redlock.WithObserver(obs))
	l, err := b.TryLock(ctxT(t, 5*time.Second), "lock:sentinel:healthy", time.Second)
	require.NoError(t, err, "a healthy deployment")
	require.NoError(t, l.Unlock(ctxT(t, 5*time.Second)))
	require.Empty(t, obs.list(), "a node excluded on a healthy deployment")

	// Sentinel finds the replica through its master's INFO.
	replica0 := replicas[0].Addr()
	waitFor(t, 10*time.Second, func() bool {
		rs, err := sc.Replicas(ctxT(t, time.Second), "node0").Result()
		if err != nil {
			return false
		}
		for _, r := range rs {
			if net.JoinHostPort(r["ip"], r["port"]) == replica0 && !strings.Contains(r["flags"], "disconnected") {
				return true
			}
		}
		return false
	}, "sentinel does not list node 0's replica")
	// A replica whose INFO is older than 5s is no candidate
	// (-NOGOODSLAVE) until Sentinel asks again, every 10s.
	waitFor(t, 12*time.Second, func() bool {
		err := sc.Failover(ctxT(t, time.Second), "node0").Err()
		require.True(t, err == nil || strings.Contains(err.Error(), "NOGOODSLAVE"), "%v", err)
		return err == nil
	}, "SENTINEL FAILOVER node0")
	waitFor(t, 15*time.Second, func() bool {
		a, err := sc.GetMasterAddrByName(ctxT(t, time.Second), "node0").Result()
		return err == nil && len(a) == 2 && net.JoinHostPort(a[0], a[1]) == replica0
	}, "sentinel did not make node 0's replica its master")
	switched := time.Now()
	require.Equal(t, "master", infoField(t, replicas[0], "replication", "role"))

	// go-redis moves a failover client to the new master when Sentinel's
	// +switch-master message reaches it, a little after Sentinel answers
	// with the new address. Until then the existing Client's node 0 is
	// still the old master, which Sentinel leaves a master for several
	// seconds more: the same process and lineage, rightly counted (a
	// TryLock made 2ms after Sentinel named the new master, in a run
	// without this wait, was granted there). Wait for the move, so that
	// the existing Client's next call reaches the promoted replica.
	port0 := strconv.Itoa(replicas[0].Port())
	waitFor(t, 5*time.Second, func() bool {
		info, err := rdbs[0].Info(ctxT(t, time.Second), "server").Result()
		return err == nil && strings.Contains(info, "tcp_port:"+port0+"\r\n")
	}, "the existing failover client did not move to node 0's new master")
	t.Logf("the existing failover client reached node 0's new master %v after Sentinel named it; the old master's role then: %s",
		time.Since(switched).Round(time.Millisecond), infoField(t, masters[0], "replication", "role"))

	// Node 1 is held by another owner: a lock needs nodes 0 and 2.
	c, _ := sentinelClient(t, sentinel, n, redlock.WithRestartSafety(maxTTL))
	clients := map[string]*redlock.Client{"existing": b, "new": c}
	keys := map[string]string{}
	for name := range clients {
		keys[name] = "lock:sentinel:" + name
		_, err := masters[1].Do("SET", keys[name], "foreign", "PX", 30000)
		require.NoError(t, err)
	}
	counted := map[string]time.Duration{}
	lineage := map[string]bool{}
	seen := map[string]map[string]int{} // node 0's errors, by client
	deadline := switched.Add(maxTTL + 8*time.Second)
	for len(counted) < len(clients) && time.Now().Before(deadline) {
		for name, cl := range clients {
			if _, ok := counted[name]; ok {
				continue
			}
			l, err := cl.TryLock(ctxT(t, 5*time.Second), keys[name], time.Second)
			if err == nil {
				counted[name] = time.Since(switched)
				require.GreaterOrEqual(t, counted[name], maxTTL-100*time.Millisecond,
					"the %s Client counted node 0 %v after the failover; node 0's errors until then: %v", name, counted[name], seen[name])
				require.NoError(t, l.Unlock(ctxT(t, 5*time.Second)))
				continue
			}
			require.ErrorIs(t, err, redlock.ErrNotAcquired)
			var qe *redlock.QuorumError
			require.True(t, errors.As(err, &qe), "%v", err)
			r0 := qe.Nodes[0]
			require.Equal(t, redlock.NodeFailed, r0.Status, "node 0 (%s Client): %v", name, err)
			if seen[name] == nil {
				seen[name] = map[string]int{}
			}
			msg := r0.Err.Error()
			if strings.Contains(msg, "its data came from another process or lineage") {
				require.ErrorIs(t, r0.Err, redlock.ErrNodeRestarted)
				lineage[name] = true
				// The figures ("first seen so 1s ago") change: count the reason once.
				msg, _, _ = strings.Cut(msg, ", first seen so")
			}
			seen[name][msg]++
		}
		time.Sleep(20 * time.Millisecond)
	}
	for name := range clients {
		t.Logf("%s Client: node 0 counted again %v after the failover (maximum TTL %v); node 0's errors until then: %v",
			name, counted[name].Round(10*time.Millisecond), maxTTL, seen[name])
		require.Contains(t, counted, name, "the %s Client never counted node 0 again", name)
		require.True(t, lineage[name], "the %s Client was never told node 0's data came from another lineage", name)
	}
	for _, ev := range obs.list() {
		t.Logf("excluded: %s for %v (%v)", ev.Node, ev.Duration, ev.Err)
	}
	require.NotEmpty(t, obs.list(), "no EventNodeExcluded for node 0")
	for _, ev := range obs.list() {
		require.Equal(t, "node0", ev.Node)
	}

	// For the record: how long Sentinel left the old master a master, which
	// a failover client that missed +switch-master would still be using.
	for end := time.Now().Add(15 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if infoField(t, masters[0], "replication", "role") == "slave" {
			t.Logf("Sentinel made the old master a replica %v after the failover", time.Since(switched).Round(10*time.Millisecond))
			return
		}
	}
	t.Logf("the old master was still a master %v after the failover", time.Since(switched).Round(10*time.Millisecond))
}
