package tests

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/redlock"
)

// Nodes with replicas that fail over: each Redlock node is a master with
// one replica behind a stable address (a TCP proxy standing in for a
// Sentinel-aware client or a managed endpoint), as most deployments run
// Redis. docs/operations.md, "Replicas and failover".

// switchProxy forwards every connection to its target, which can change
// (a failover moves the address to another process) or be cut (a broken
// replication link). Either drops the connections it carries, as an
// endpoint does when its process goes away.
type switchProxy struct {
	*fakeServer
	mu     sync.Mutex
	target string
	cut    bool
	live   map[net.Conn]bool
}

func startSwitchProxy(t testing.TB, target string) *switchProxy {
	t.Helper()
	p := &switchProxy{target: target, live: map[net.Conn]bool{}}
	p.fakeServer = startFakeServer(t, p.serve)
	return p
}

func (p *switchProxy) serve(c net.Conn) {
	p.mu.Lock()
	target, cut := p.target, p.cut
	p.live[c] = true
	p.mu.Unlock()
	defer p.drop(c)
	if cut {
		return
	}
	up, err := net.DialTimeout("tcp", target, 2*time.Second)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.live[up] = true
	p.mu.Unlock()
	defer p.drop(up)
	go func() {
		_, _ = io.Copy(up, c)
		_ = up.Close()
	}()
	_, _ = io.Copy(c, up)
}

func (p *switchProxy) drop(c net.Conn) {
	_ = c.Close()
	p.mu.Lock()
	delete(p.live, c)
	p.mu.Unlock()
}

// point sends new connections to target and drops the ones carried.
func (p *switchProxy) point(target string) { p.set(target, false) }

// cutOff refuses every connection from now on and drops the ones carried.
func (p *switchProxy) cutOff() { p.set(p.target, true) }

func (p *switchProxy) set(target string, cut bool) {
	p.mu.Lock()
	p.target, p.cut = target, cut
	live := p.live
	p.live = map[net.Conn]bool{}
	p.mu.Unlock()
	for c := range live {
		_ = c.Close()
	}
}

// replicated is n Redlock nodes, each a master with a replica that
// follows it through a link proxy, and a front proxy that clients use.
type replicated struct {
	masters, replicas []*redistest.Server
	links             []*switchProxy
	fronts            []front
	addrs             []string // the fronts'
	started           time.Time
}

// front is the stable address of a node: a proxy that a failover points
// at the promoted replica.
type front interface {
	Addr() string
	point(target string)
}

func startReplicated(t *testing.T, n int) *replicated {
	t.Helper()
	return startReplicatedWith(t, n, func(t testing.TB, target string) front { return startSwitchProxy(t, target) })
}

// startReplicatedWith is startReplicated with fronts made by newFront.
func startReplicatedWith(t *testing.T, n int, newFront func(t testing.TB, target string) front) *replicated {
	t.Helper()
	// Replicas sync at once (diskless, without the default 5s delay).
	nodes := redistest.StartT(t, 2*n, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}}).Nodes()
	r := &replicated{masters: nodes[:n], replicas: nodes[n:], started: time.Now()}
	for i := range n {
		r.links = append(r.links, startSwitchProxy(t, r.masters[i].Addr()))
		r.fronts = append(r.fronts, newFront(t, r.masters[i].Addr()))
		r.addrs = append(r.addrs, r.fronts[i].Addr())
		host, port, err := net.SplitHostPort(r.links[i].Addr())
		require.NoError(t, err)
		_, err = r.replicas[i].Do("REPLICAOF", host, port)
		require.NoError(t, err)
	}
	for i := range n {
		r.awaitLink(t, i, "up")
	}
	return r
}

// awaitLink waits until replica i says its link to the master is state.
func (r *replicated) awaitLink(t *testing.T, i int, state string) {
	t.Helper()
	require.Eventually(t, func() bool {
		info, err := redis.String(r.replicas[i].Do("INFO", "replication"))
		return err == nil && strings.Contains(info, "master_link_status:"+state)
	}, 10*time.Second, 10*time.Millisecond, "replica %d: link not %s", i, state)
}

// failOver kills master i and promotes its replica behind the address.
func (r *replicated) failOver(t *testing.T, i int) {
	t.Helper()
	require.NoError(t, r.masters[i].Kill())
	_, err := r.replicas[i].Do("REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	r.fronts[i].point(r.replicas[i].Addr())
}

// excluded counts the EventNodeExcluded events a Client reports.
type excluded struct{ n atomic.Int64 }

func (e *excluded) Round(*redlock.RoundInfo) {}
func (e *excluded) Event(ev redlock.Event) {
	if ev.Kind == redlock.EventNodeExcluded {
		e.n.Add(1)
	}
}

// The failover of issue scenario: the replication links of k pairs
// break, A takes a lock on all five masters, those k masters die and
// their replicas, which never got A's key, take their addresses. The
// replicas have run for longer than the maximum TTL, and carry the
// restart marker their masters had (it was replicated), so restart
// safety counted them at once: an existing Client and a new one both
// took A's key while A held it. Now a promoted replica is a node whose
// data came from another lineage: counted only once the maximum TTL has
// passed since it was first seen so. Neither takes the key while A's
// lock is valid, and both do once the exclusion has run out.
func TestFailover_aPromotedReplicaThatMissedALockIsNotCountedUntilTheLockRanOut(t *testing.T) {
	t.Parallel()
	for _, k := range []int{3, 5} {
		t.Run(fmt.Sprintf("%d of 5 fail over", k), func(t *testing.T) {
			t.Parallel()
			const maxTTL = 2 * time.Second
			r := startReplicated(t, 5)
			b := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(maxTTL))
			l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
			require.NoError(t, err, "a healthy deployment with replicas")
			require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
			// The replicas have run for longer than the maximum TTL.
			time.Sleep(time.Until(r.started.Add(maxTTL + 1500*time.Millisecond)))

			for i := range k {
				r.links[i].cutOff()
				r.awaitLink(t, i, "down")
			}
			key := newKey(t)
			a := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(maxTTL))
			held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
			require.NoError(t, err)
			for i := range k {
				r.failOver(t, i)
			}
			promoted := time.Now()

			c := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(maxTTL))
			tries := 0
			for time.Now().Before(held.Until()) && tries < 200 {
				tries++
				for name, cl := range map[string]*redlock.Client{"existing": b, "new": c} {
					_, err := cl.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
					require.Error(t, err, "the %s Client took the key while A holds it (%v of validity left)", name, time.Until(held.Until()))
					require.ErrorIs(t, err, redlock.ErrNotAcquired)
				}
				time.Sleep(20 * time.Millisecond)
			}
			require.Positive(t, tries)

			// Once the exclusion has run out (and A's key with it), the
			// promoted nodes count again.
			var got *redlock.Lock
			var last error
			for deadline := promoted.Add(maxTTL + 5*time.Second); got == nil && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				got, last = b.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
			}
			require.NotNil(t, got, "the promoted nodes never counted again: %v", last)
			t.Logf("counted again %v after the promotion (maximum TTL %v)", time.Since(promoted).Round(10*time.Millisecond), maxTTL)
			require.GreaterOrEqual(t, time.Since(promoted), maxTTL-100*time.Millisecond)
			require.NoError(t, got.Unlock(ctxT(t, 10*time.Second)))
			for i := range k {
				require.Eventually(t, func() bool {
					if marker(t, r.replicas[i]) != "" {
						return true
					}
					// A Client marks a node once a grant of it counts.
					if l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL); err == nil {
						_ = l.Unlock(ctxT(t, 10*time.Second))
					}
					return false
				}, 5*time.Second, 20*time.Millisecond, "node %d not marked again", i)
			}
		})
	}
}

// A deployment whose nodes simply have replicas excludes no node: a
// replica that reconnects, or restarts and syncs anew, does not change
// its master's lineage.
func TestFailover_aHealthyDeploymentWithReplicasExcludesNoNode(t *testing.T) {
	// Serial: it restarts a replica on its port (main_test.go).
	r := startReplicated(t, 5)
	obs := &excluded{}
	c := newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(time.Minute), redlock.WithObserver(obs))
	// A try whose connections the proxies just dropped fails without an
	// answer (EOF); the next one goes out on new connections.
	take := func(c *redlock.Client) {
		t.Helper()
		var err error
		for range 3 {
			var l *redlock.Lock
			if l, err = c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second); err == nil {
				require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
				return
			}
			require.NotContains(t, err.Error(), "restart", "a node excluded")
		}
		require.NoError(t, err)
	}
	take(c)
	for i := range r.masters {
		_, err := r.masters[i].Do("CLIENT", "KILL", "TYPE", "replica")
		require.NoError(t, err)
	}
	require.NoError(t, r.replicas[0].Kill())
	require.NoError(t, r.replicas[0].RestartEmpty())
	host, port, err := net.SplitHostPort(r.links[0].Addr())
	require.NoError(t, err)
	_, err = r.replicas[0].Do("REPLICAOF", host, port)
	require.NoError(t, err)
	for i := range r.replicas {
		r.awaitLink(t, i, "up")
	}
	// A new Client too, and one after the old Client's connections broke.
	for i := range r.fronts {
		r.fronts[i].point(r.masters[i].Addr())
	}
	take(c)
	take(newClient(t, newPools(t, r.addrs), redlock.WithRestartSafety(time.Minute), redlock.WithObserver(obs)))
	require.Zero(t, obs.n.Load(), "nodes excluded")
}

// A node that became a replica is counted toward no quorum: its check
// fails, naming its role.
func TestFailover_aNodeThatIsAReplicaIsNotCounted(t *testing.T) {
	t.Parallel()
	r := startReplicated(t, 3)
	c := newClient(t, newPools(t, r.addrs[:3]), redlock.WithRestartSafety(time.Minute))
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	for i := range 2 {
		r.fronts[i].point(r.replicas[i].Addr())
	}
	// The first try after the switch fails on the dropped connections.
	for try := 0; ; try++ {
		_, err = c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Second)
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		var qe *redlock.QuorumError
		require.True(t, errors.As(err, &qe))
		if qe.Count(redlock.NodeFailed) == 2 && strings.Count(err.Error(), "READONLY") == 2 {
			break
		}
		require.Less(t, try, 3, "%v", err)
	}
}
