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
		reply, err := p.Eval(ctxT(t, quickly), wire.NodeCheck, wire.NodeCheckArgs(mark, "")...)
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
