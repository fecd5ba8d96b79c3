package tests

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// excludedNodes records the nodes a Client's restart safety excluded.
type excludedNodes struct {
	mu     sync.Mutex
	events []redlock.Event
}

func (e *excludedNodes) Round(*redlock.RoundInfo) {}

func (e *excludedNodes) Event(ev redlock.Event) {
	if ev.Kind == redlock.EventNodeExcluded {
		e.mu.Lock()
		e.events = append(e.events, ev)
		e.mu.Unlock()
	}
}

func (e *excludedNodes) list() []redlock.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// Two Clients share five nodes: one authenticates as a user with every
// documented rule, the other as one without +info|replication (the docs
// say it still locks, blind to failovers). Whichever locks first, each
// then locks free keys at once, turn by turn: a node is never excluded for
// the rights of the Client that marked it (docs/operations.md, "What
// restart safety excludes").
func TestRestartSafety_clientsWithAndWithoutInfoReplicationShareNodes(t *testing.T) {
	t.Parallel()
	for _, restrictedFirst := range []bool{true, false} {
		name := map[bool]string{true: "restricted first", false: "full rights first"}[restrictedFirst]
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := redistest.StartT(t, 5)
			nodes, addrs := c.Nodes(), c.Addrs()
			setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "info|replication" }))
			setACLUser(t, nodes, "full", documentedACL())
			exR, exF := &excludedNodes{}, &excludedNodes{}
			restricted := newClient(t, aclPools(t, addrs), redlock.WithObserver(exR))
			full := newClient(t, newPools(t, addrs, poolUser("full")), redlock.WithObserver(exF))
			order := []*redlock.Client{full, restricted}
			if restrictedFirst {
				order = []*redlock.Client{restricted, full}
			}
			for turn := range 6 {
				cl := order[turn%2]
				began := time.Now()
				l, err := cl.TryLock(ctxT(t, quickly), newKey(t), longTTL, redlock.WithFencing())
				require.NoError(t, err, "turn %d: a free key is locked at once", turn)
				t.Logf("turn %d: locked in %v", turn, time.Since(began).Round(time.Microsecond))
				require.NoError(t, l.Unlock(ctxT(t, quickly)))
			}
			require.Empty(t, exR.list(), "no node excluded")
			require.Empty(t, exF.list(), "no node excluded")
		})
	}
}

// A replica promoted in its master's place (its lineage continues the
// master's) is waited out by a Client that sees lineages, from the first
// check that saw it. A Client without +info|replication that counted it
// (after its own wait, from the same sighting) and marked it left that
// sighting alone: before, its mark deleted it, and the other Client's next
// check took the node for newly seen and waited the maximum TTL again.
func TestRestartSafety_aMarkWithoutTheLineageLeavesTheSightingOfAPromotedReplica(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 2, redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
	master, replica := c.Node(0), c.Node(1)
	_, err := replica.Do("REPLICAOF", "127.0.0.1", master.Port())
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		v, _ := redis.String(replica.Do("INFO", "replication"))
		return strings.Contains(v, "master_link_status:up")
	}, 10*time.Second, 10*time.Millisecond)
	_, err = replica.Do("REPLICAOF", "NO", "ONE")
	require.NoError(t, err)
	nodes := []*redistest.Server{replica}
	setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "info|replication" }))
	setACLUser(t, nodes, "full", documentedACL())
	blind := aclPools(t, []string{replica.Addr()})[0]
	full := newPools(t, []string{replica.Addr()}, poolUser("full"))[0]
	check := func(p pool.Pool, mark string) wire.NodeFacts {
		t.Helper()
		reply, err := p.Eval(ctxT(t, quickly), wire.NodeCheck, wire.NodeCheckArgs(mark, "", "")...)
		require.NoError(t, err)
		f, err := wire.ParseNodeCheck(reply)
		require.NoError(t, err)
		return f
	}
	first := check(full, "")
	require.Equal(t, int64(0), first.Sighted, "first seen now: the dataset continues the master's")
	require.False(t, first.Own)
	time.Sleep(1100 * time.Millisecond)
	b := check(blind, "")
	require.Positive(t, b.Sighted, "the Client without the lineage waits from the same sighting")
	check(blind, wire.MarkerOf(b.RunID, b.Lineage)) // it waited out its bound, and marks
	time.Sleep(1100 * time.Millisecond)
	again := check(full, "")
	require.GreaterOrEqual(t, again.Sighted, int64(2), "the sighting stands: the wait is not started over")
}

// Clients whose WithRestartSafety differ (10s, 1m, 5m) and one that
// declares the nodes durable share five durable nodes: each locks free
// keys at once, turn by turn, and again right after CLIENT KILL closed
// every connection of every Client on every node (each Client checks its
// new connections: the same processes, counted at once). The time from
// the kill to each Client's first lock is logged: docs/operations.md,
// "What restart safety excludes".
func TestRestartSafety_clientsWithOtherSettingsAndKilledConnectionsExcludeNothing(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5, redistest.Options{Durable: true})
	if c == nil {
		return
	}
	settings := [][]redlock.Option{
		{redlock.WithRestartSafety(10 * time.Second)},
		{redlock.WithRestartSafety(time.Minute)},
		{redlock.WithRestartSafety(5 * time.Minute)},
		{redlock.WithRestartSafety(time.Minute), redlock.WithDurableNodes()},
	}
	var clients []*redlock.Client
	var logs []*excludedNodes
	for _, s := range settings {
		ex := &excludedNodes{}
		clients, logs = append(clients, newClient(t, newPools(t, c.Addrs()), append(s, redlock.WithObserver(ex))...)), append(logs, ex)
	}
	lockOnce := func(k int) time.Duration {
		t.Helper()
		began := time.Now()
		for {
			l, err := clients[k].TryLock(ctxT(t, quickly), newKey(t), longTTL)
			if err == nil {
				require.NoError(t, l.Unlock(ctxT(t, quickly)))
				return time.Since(began)
			}
			require.NotContains(t, err.Error(), "node restarted", "client %d", k)
			require.Less(t, time.Since(began), 5*time.Second, "client %d: %v", k, err)
		}
	}
	for turn := range 2 * len(clients) {
		t.Logf("turn %d, client %d: a free key locked in %v", turn, turn%len(clients), lockOnce(turn%len(clients)).Round(time.Microsecond))
	}
	for i, s := range c.Nodes() {
		_, err := s.Do("CLIENT", "KILL", "TYPE", "normal")
		require.NoError(t, err, "node %d", i)
	}
	for k := range clients {
		t.Logf("client %d: a free key locked %v after every connection was killed", k, lockOnce(k).Round(time.Microsecond))
	}
	for k, ex := range logs {
		require.Empty(t, ex.list(), "client %d excluded no node", k)
	}
}

// A marker of a form this version does not know (a later version's) says
// the deployment is in use, and is neither read as another process's nor
// overwritten while the node is waited out: a young node is counted once
// it has been up for the maximum TTL, as one without a marker, and then
// marked in the form every version reads.
func TestRestartSafety_aMarkerOfALaterFormIsNotAnotherProcesssMarker(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 3)
	if c == nil {
		return
	}
	for i, s := range c.Nodes() {
		_, err := s.Do("SET", wire.MarkerKey, "v9 a-form-of-a-later-version")
		require.NoError(t, err, "node %d", i)
	}
	const maxTTL = 2 * time.Second
	cl := newClient(t, newPools(t, c.Addrs()), redlock.WithRestartSafety(maxTTL))
	_, err := cl.TryLock(ctxT(t, quickly), newKey(t), time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "young nodes of a used deployment are waited out")
	require.ErrorContains(t, err, "with a marker of a form this version does not know")
	require.NotContains(t, err.Error(), "another process")
	var l *redlock.Lock
	require.Eventually(t, func() bool {
		l, err = cl.TryLock(ctxT(t, quickly), newKey(t), time.Second)
		return err == nil
	}, 3*maxTTL, 50*time.Millisecond, "counted once up for the maximum TTL: %v", err)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
	for i, s := range c.Nodes() {
		v, err := redis.String(s.Do("GET", wire.MarkerKey))
		require.NoError(t, err)
		require.True(t, wire.ParseMarker(v).Valid() && wire.ParseMarker(v).Lineage == "", "node %d marked with its run id: %q", i, v)
	}
}

// A Client that declares the nodes durable counts at once a node marked
// at once for keeping its data, and only such a mark: a Client with a
// shorter bound that waited out an empty restart marks the node too, and
// that mark, on a node younger than the durable Client's bound, says
// nothing of the locks the durable Client gave a longer TTL. Before, the
// durable Client took any mark on a young node for kept data, and took
// its own lock's key a second time.
func TestRestartSafety_aDurableClientTrustsOnlyAMarkForKeptData(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5, redistest.Options{Durable: true})
	if c == nil {
		return
	}
	a := newClient(t, newPools(t, c.Addrs()), redlock.WithDurableNodes(), redlock.WithRestartSafety(3*time.Second))
	b := newClient(t, newPools(t, c.Addrs()), redlock.WithRestartSafety(time.Second))
	key := newKey(t)
	held, err := a.TryLock(ctxT(t, quickly), key, 20*time.Second)
	require.NoError(t, err)
	l, err := b.TryLock(ctxT(t, quickly), newKey(t), time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
	for _, s := range c.Nodes()[:3] {
		require.NoError(t, s.Kill())
		require.NoError(t, s.RestartEmpty(), "a lost disk: the key is gone from a quorum")
	}
	// B waits out its own bound and marks the nodes.
	require.Eventually(t, func() bool {
		l, err := b.TryLock(ctxT(t, quickly), newKey(t), time.Second)
		if err == nil {
			require.NoError(t, l.Unlock(ctxT(t, quickly)))
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond)
	for i, s := range c.Nodes()[:3] {
		require.Eventually(t, func() bool {
			v, err := redis.String(s.Do("GET", wire.MarkerKey))
			return err == nil && v != ""
		}, 5*time.Second, 10*time.Millisecond, "node %d marked by B", i)
	}
	for range 5 {
		_, err = a.TryLock(ctxT(t, quickly), key, time.Second)
		require.Error(t, err, "the key is held for %v more", held.Validity())
		time.Sleep(100 * time.Millisecond)
	}
	require.Positive(t, held.Validity())
}
