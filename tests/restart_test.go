package tests

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// restartEmpty kills the given nodes and starts them again without their
// data; it returns the time just before the first was killed.
func restartEmpty(t *testing.T, e *env, which ...int) time.Time {
	t.Helper()
	before := time.Now()
	for _, i := range which {
		require.NoError(t, e.nodes[i].Kill())
		require.NoError(t, e.nodes[i].Restart())
	}
	return before
}

// marker returns node s's restart-safety marker ("<run id> <replication
// id>"), "" when it has none (a record of when a copied dataset was
// first seen, "~ ..." or "? ...", is none).
func marker(t *testing.T, s *redistest.Server) string {
	v, _ := get(t, s, "redlock:node")
	if strings.HasPrefix(v, "~") || strings.HasPrefix(v, "?") {
		return ""
	}
	return v
}

func TestRestartSafety_aNewClientIsRefusedUntilTheMaxTTLPassedSinceNodesRestartedEmpty(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	const maxTTL = 3 * time.Second
	key := newKey(t)
	a := e.client(redlock.WithRestartSafety(maxTTL))
	held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	_ = held
	restarted := restartEmpty(t, e, 0, 1, 2)

	// A process started after the restart: new pools, new Client.
	b := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(maxTTL))
	var first error
	var got time.Time
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l, err := b.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
		if err == nil {
			got = time.Now()
			require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
			break
		}
		if first == nil {
			first = err
		}
	}
	require.Error(t, first, "the first attempt, right after the restart, must be refused")
	qe := asQuorumError(t, first)
	named := 0
	for _, i := range []int{0, 1, 2} {
		if qe.Nodes[i].Status == redlock.NodeFailed {
			require.ErrorIs(t, qe.Nodes[i].Err, redlock.ErrNodeRestarted, statuses(qe))
			named++
		}
	}
	require.Positive(t, named, "the round was decided without a restarted node: %s", statuses(qe))
	// Three excluded nodes alone rule a quorum out: the nodes, not the
	// holder, are the problem. When the round was decided without one
	// of them, what the others said is a held key and an excluded node.
	require.Equal(t, named < 3 && qe.Count(redlock.NodeRefused) > 0, qe.Busy(), statuses(qe))
	require.Contains(t, first.Error(), "restarted without its data")
	require.False(t, got.IsZero(), "never acquired after the wait")
	require.GreaterOrEqual(t, got.Sub(restarted), maxTTL, "a restarted node was counted before the maximum TTL passed")
	// Once counted, a node is marked, so that other clients count it at
	// once. A node is counted (and marked) at its next grant after the
	// wait: a few locks on other keys see to it.
	require.Eventually(t, func() bool {
		if l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL); err == nil {
			require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
		}
		for _, i := range []int{0, 1, 2} {
			if marker(t, e.nodes[i]) == "" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)
	c := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(maxTTL))
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
	require.NoError(t, err, "a node that was marked counts at once for a new client")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// A holds a lock on all five nodes; node 0 restarts empty and is
// excluded. Another process's TryLock hears node 0 (excluded) and nodes 3
// and 4 (held by another owner) and decides without nodes 1 and 2, whose
// first requests a proxy holds back: the key is busy, by what the
// answering nodes said.
func TestRestartSafety_aKeyHeldWhereTheNodesAnswerIsBusyWithARestartedNodeExcluded(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	const maxTTL = 30 * time.Second
	key := newKey(t)
	a := e.client(redlock.WithRestartSafety(maxTTL))
	held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	awaitToken(t, e.nodes, key, held.Token())
	require.Eventually(t, func() bool {
		for _, s := range e.nodes {
			if marker(t, s) == "" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond, "every node is marked as counted")
	restartEmpty(t, e, 0)

	// A refused TryLock reads every node's answer before it returns
	// (done when returned): the four that answered refused.
	b := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(maxTTL))
	_, err = b.TryLock(ctxT(t, 20*time.Second), key, maxTTL)
	qe := asQuorumError(t, err)
	require.Equal(t, redlock.NodeFailed, qe.Nodes[0].Status, statuses(qe))
	require.ErrorIs(t, qe.Nodes[0].Err, redlock.ErrNodeRestarted)
	for _, i := range []int{1, 2, 3, 4} {
		require.Equal(t, redlock.NodeRefused, qe.Nodes[i].Status, statuses(qe))
	}
	require.Contains(t, err.Error(), "restarted without its data")
	require.Contains(t, err.Error(), "held by another owner")
	require.True(t, qe.Busy(), "the key is held where the nodes answered: %v", err)
}

func TestRestartSafety_offLetsASecondOwnerIn(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	key := newKey(t)
	a := e.client(redlock.WithRestartSafety(0))
	_, err := a.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err)
	restartEmpty(t, e, 0, 1, 2)
	b := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(0))
	_, err = b.TryLock(ctxT(t, 10*time.Second), key, longTTL)
	require.NoError(t, err, "without restart safety the forgotten lock is taken at once: two owners")
}

func TestRestartSafety_aNewDeploymentIsUsableAtOnceAndMarked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	for _, s := range e.nodes {
		require.Empty(t, marker(t, s))
	}
	c := e.client() // the default maximum TTL: a minute, far above the nodes' uptime
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	require.Eventually(t, func() bool {
		for _, s := range e.nodes {
			if marker(t, s) == "" {
				return false
			}
		}
		return true
	}, 5*time.Second, 10*time.Millisecond)

	// A second client of the healthy nodes is not slowed either.
	c2 := newClient(t, newPools(t, e.addrs))
	l, err = c2.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

func TestRestartSafety_aNodeRestartedWithItsDataWaitsUnlessDeclaredDurable(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5, redistest.Options{Args: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	const maxTTL = 30 * time.Second
	a := e.client(redlock.WithRestartSafety(maxTTL))
	key := newKey(t)
	held, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return marker(t, e.nodes[0]) != "" }, 5*time.Second, 10*time.Millisecond)
	restartEmpty(t, e, 0, 1, 2) // with appendonly, the data comes back
	requireValue(t, e.nodes, 0, key, held.Token())

	logged, resets := resetLog()
	rec := &recorder{}
	b := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(maxTTL), logged, redlock.WithObserver(rec))
	_, err = b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a restarted node may have come back from an old snapshot")
	require.Contains(t, err.Error(), "restarted without its data")
	// A node whose check answered after the round is reported a little
	// later, from the background.
	want := map[string]bool{e.addrs[0]: true, e.addrs[1]: true, e.addrs[2]: true}
	require.Eventually(t, func() bool { return len(resets()) == len(want) },
		5*time.Second, 10*time.Millisecond, "a node that came back under a new run id is reported as reset")
	require.Equal(t, want, resets())
	// Observers hear of the same nodes, reset and excluded for the rest of
	// the maximum TTL.
	rec.mu.Lock()
	reset, excluded := map[string]bool{}, map[string]bool{}
	for _, ev := range rec.events {
		switch ev.Kind {
		case redlock.EventNodeReset:
			reset[ev.Node] = true
		case redlock.EventNodeExcluded:
			excluded[ev.Node] = true
			require.Positive(t, ev.Duration)
			require.LessOrEqual(t, ev.Duration, maxTTL)
			require.ErrorContains(t, ev.Err, "under a new run id")
		}
	}
	rec.mu.Unlock()
	require.Equal(t, want, reset)
	require.Equal(t, want, excluded)

	d := newClient(t, newPools(t, e.addrs), redlock.WithRestartSafety(maxTTL), redlock.WithDurableNodes())
	l, err := d.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL)
	require.NoError(t, err, "declared durable, a node that kept its data counts at once")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

func TestExtend_aLockWhoseQuorumOfNodesRestartedEmptyIsLostAndItsContextEnds(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err)
	lctx := l.Context()
	restartEmpty(t, e, 1, 2, 3)
	err = l.Extend(ctxT(t, 10*time.Second), longTTL)
	require.ErrorIs(t, err, redlock.ErrLockLost)
	require.Error(t, lctx.Err(), "the lock's context must end with the loss")
	require.True(t, errors.Is(context.Cause(lctx), redlock.ErrLockLost), "cause %v", context.Cause(lctx))
}

func TestRestartSafety_aClientStartedBeforeItsNodesSeesThemAsANewDeployment(t *testing.T) {
	e := newEnv(t, 5)
	for _, s := range e.nodes {
		require.NoError(t, s.Kill())
	}
	c := e.client() // the default maximum TTL: a minute
	_, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "no node is up")
	for _, s := range e.nodes {
		require.NoError(t, s.Restart())
	}
	start := time.Now()
	require.Eventually(t, func() bool {
		l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
		return err == nil && l.Unlock(ctxT(t, 10*time.Second)) == nil
	}, 20*time.Second, 20*time.Millisecond, "nodes that no Client ever used are a new deployment")
	require.Less(t, time.Since(start), time.Minute/2, "the new nodes were waited out as if they had restarted")
}

func TestRestartSafety_aReplyOnANewConnectionCountsOnceTheConnectionIsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	c := e.client()
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL) // every node checked
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	for _, i := range []int{3, 4} {
		require.NoError(t, e.nodes[i].Kill())
	}
	// The three live nodes drop the Client's connections; a PING on each
	// pool finds its connection broken, so that the next call dials anew
	// and its reply comes on a connection the Client has not checked.
	for _, i := range []int{0, 1, 2} {
		_, err := e.nodes[i].Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
		require.NoError(t, err)
		_, err = e.pools[i].Do(ctxT(t, 10*time.Second), "PING")
		require.Error(t, err, "node %d: the connection was not dropped", i)
	}
	l, err = c.TryLock(ctxT(t, 10*time.Second), newKey(t), longTTL)
	require.NoError(t, err, "with two nodes down, the three on new connections must count as soon as they are checked")
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
}

// plainPool hides every method of a pool but those of pool.Pool, as a
// program's own wrapper of its pools (for metrics, say) may: it is not a
// pool.Reconnector.
type plainPool struct{ pool.Pool }

// A Client over pools that do not say when they open a connection checks
// a node again after a call to it failed without an answer: the pool may
// be on a new connection, to a process that restarted empty. A node that
// restarted empty while a lock was held is not counted until the maximum
// TTL has passed since, although the Client had checked it before.
func TestRestartSafety_aPoolThatDoesNotTellItsConnectionsStillKeepsARestartedNodeOut(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	const maxTTL = 3 * time.Second
	key := newKey(t)
	a := e.client(redlock.WithRestartSafety(maxTTL))
	_, err := a.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
	require.NoError(t, err)

	pools := redigoPools(t, e.addrs)
	for i, p := range pools {
		pools[i] = plainPool{p}
	}
	b := newClient(t, pools, redlock.WithRestartSafety(maxTTL))
	l, err := b.TryLock(ctxT(t, 10*time.Second), newKey(t), maxTTL) // every node checked and counted
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))

	restarted := restartEmpty(t, e, 0, 1, 2)
	named := false
	var got time.Time
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		l, err := b.TryLock(ctxT(t, 10*time.Second), key, maxTTL)
		if err == nil {
			got = time.Now()
			require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
			break
		}
		named = named || errors.Is(err, redlock.ErrNodeRestarted) ||
			strings.Contains(err.Error(), redlock.ErrNodeRestarted.Error())
	}
	require.False(t, got.IsZero(), "never acquired after the wait")
	require.GreaterOrEqual(t, got.Sub(restarted), maxTTL, "a node restarted empty was counted before the maximum TTL passed: a second owner")
	require.True(t, named, "no refusal named the restarted nodes")
}

// checkUnreachable is a pool whose restart checks never reach the node,
// as while it is still dialling; every other command goes through.
type checkUnreachable struct{ pool.Pool }

func (p checkUnreachable) Eval(ctx context.Context, s *pool.Script, keysAndArgs ...any) (any, error) {
	if s == wire.NodeCheck {
		return nil, &pool.NodeError{Addr: p.Addr(), Op: "dial", Err: errors.New("still connecting to the node")}
	}
	return p.Pool.Eval(ctx, s, keysAndArgs...)
}

// A node that took the key while restart safety could not count it (its
// check had not reached it) is released when the acquisition fails: the
// grant was real, and would keep the key from everyone for its TTL. The
// error of such a node is the check's, which names a command that was
// never sent; the acquisition's own command was sent and answered.
func TestRestartSafety_aGrantThatWasNotCountedIsReleasedWhenTheAcquisitionFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	key := newKey(t)
	for i, s := range e.nodes {
		if i != 1 {
			_, err := s.Do("SET", key, foreignToken, "PX", 60_000)
			require.NoError(t, err)
		}
	}
	pools := newPools(t, e.addrs)
	pools[1] = checkUnreachable{pools[1]}
	c := newClient(t, pools, redlock.WithRestartSafety(time.Minute))
	_, err := c.TryLock(ctxT(t, quickly), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.Eventually(t, func() bool {
		_, held := get(t, e.nodes[1], key)
		return !held
	}, 5*time.Second, 5*time.Millisecond, "node 1 keeps the failed acquisition's key")
}

// A hand-off counts only from a process that restart safety counts: one
// heard on a pub/sub connection opened to a node's new process is not
// counted before the node was checked on it, even while the Client's
// command connection to the node has not noticed the restart yet. Node 0
// restarts and comes back with what a snapshot taken a moment earlier
// would hold (the foreign holder's key and the waiter's place in the
// queue); a release there hands it the key, as releases on nodes 1 and 2
// do. Counting node 0 would give the waiter a quorum that the restart
// made up.
func TestRestartSafety_aHandOffFromARestartedNodeCountsOnlyOnceTheNodeIsChecked(t *testing.T) {
	// Serial: it restarts nodes on their ports (main_test.go).
	e := newEnv(t, 5)
	key := newKey(t)
	w := e.client()
	holdForeign(t, e.nodes, key, 0, 1, 2, 3, 4)
	ctx, cancel := context.WithCancel(ctxT(t, 30*time.Second))
	defer cancel()
	done := lockAsync(ctx, w, key, 10*time.Second)
	awaitWaiting(t, e.nodes, key, 1)
	place, err := redis.Strings(e.nodes[1].Do("ZRANGE", wire.WaitersKey(key), 0, -1, "WITHSCORES"))
	require.NoError(t, err)
	require.Len(t, place, 2)
	id, prio := place[0], place[1]
	entry, ok := get(t, e.nodes[1], wire.EntryKey(key, id))
	require.True(t, ok, "the waiter's entry on node 1")
	client, _, _ := strings.Cut(id, ".")
	handoffs := "redlock:handoff:" + client + ":" + key

	require.NoError(t, e.nodes[0].Kill())
	require.NoError(t, e.nodes[0].Restart())
	holdForeign(t, e.nodes, key, 0)
	_, err = e.nodes[0].Do("ZADD", wire.WaitersKey(key), prio, id)
	require.NoError(t, err)
	_, err = e.nodes[0].Do("SET", wire.EntryKey(key, id), entry, "PX", 10000)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return numSub(t, e.nodes[0], handoffs) > 0 },
		10*time.Second, time.Millisecond, "the waiter's Client subscribed on node 0's new process")

	release := script(wire.Release, 2)
	handOff := func(i int) {
		t.Helper()
		conn := dialNode(t, e.nodes[i])
		v, err := release.Do(conn, releaseArgs(key, foreignToken, "", "")...)
		require.NoError(t, err, "node %d", i)
		require.Equal(t, int64(1), v, "node %d", i)
		now, _ := get(t, e.nodes[i], key)
		require.True(t, strings.HasPrefix(now, id+"/"), "node %d handed the key to the waiter: %q", i, now)
	}
	for _, i := range []int{0, 1, 2} {
		handOff(i)
	}
	select {
	case r := <-done:
		if r.l != nil {
			_ = r.l.Unlock(ctxT(t, 10*time.Second))
		}
		t.Fatalf("Lock returned (err %v) on the hand-offs of nodes 0, 1 and 2: node 0 restarted from old data and must not count", r.err)
	case <-time.After(500 * time.Millisecond):
	}

	// Node 3's hand-off makes a quorum without node 0.
	handOff(3)
	r := awaitLock(t, done, 10*time.Second, "Lock did not return after node 3 handed the key over too")
	require.NoError(t, r.err)
	for _, i := range []int{1, 2, 3} {
		v, _ := get(t, e.nodes[i], key)
		require.True(t, ofLock(r.l.Token(), v), "node %d holds the lock: %q", i, v)
	}
	require.NoError(t, r.l.Unlock(ctxT(t, 10*time.Second)))
}

// A new Client's first acquisition checks every node for restarts. When
// the nodes that answer have no marker (a deployment no one marked yet,
// or one another Client is marking now), it asks them once more, after
// about four times as long as they took to answer. That wait was counted
// from the start of the check, and so grew with the nodes that did not
// answer: with three of five nodes stalled, a TryLock waited out their
// node timeout, then four more, before its round (5s and more with a 1s
// node timeout). It now ends within about two node timeouts.
func TestRestartSafety_theFirstCheckDoesNotWaitForStalledNodesTwice(t *testing.T) {
	e := newEnv(t, 5)
	key := newKey(t)
	const timeout = 500 * time.Millisecond
	c := e.client(redlock.WithNodeTimeout(timeout))
	for _, s := range e.nodes[2:] {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	}
	start := time.Now()
	_, err := c.TryLock(context.Background(), key, time.Minute)
	took := time.Since(start)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	t.Logf("TryLock failed after %v: %v", took.Round(time.Millisecond), err)
	// The check and the round each wait out the stalled nodes' timeout.
	require.Less(t, took, 7*timeout/2, "TryLock took %v", took)
}

// A node that restart safety excludes answers, and its pub/sub connection
// is up: it is no node that came back, and a waiting call paces its
// rounds as the refusals say (here by the back-off, 10 minutes, and the
// holder's keys, capped by the refresh interval: 5s with the tests' 1s
// node timeout), not every few hundred milliseconds for as long as the
// node is excluded (48 calls on a node in 3s).
func TestRestartSafety_aWaiterDoesNotPollWhileANodeIsExcluded(t *testing.T) {
	e := newEnv(t, 5)
	c := e.client(redlock.WithRestartSafety(20 * time.Second))
	warm, err := c.TryLock(ctxT(t, quickly), newKey(t), time.Second) // the nodes are marked
	require.NoError(t, err)
	require.NoError(t, warm.Unlock(ctxT(t, quickly)))
	restartEmpty(t, e, 4)
	// The Client's connection to node 4 may still be in its reconnect
	// back-off (its first dial came while the node started): wait until a
	// round has checked the node and excludes it, as the test is about
	// the rounds after that.
	// It polls (bounded: 10s) rather than sleeping, and says what the
	// last round found if node 4 was never excluded.
	probe := newKey(t)
	holdForeign(t, e.nodes, probe, 0, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.TryLock(ctxT(t, quickly), probe, 10*time.Second)
		require.Error(t, err, "TryLock on a key that nodes 0 and 1 refuse, with node 4 restarted")
		if strings.Contains(err.Error(), "node restarted without its data") {
			break
		}
		require.True(t, time.Now().Before(deadline), "node 4 was not excluded within 10s; the last round: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
	key := newKey(t)
	holdForeign(t, e.nodes, key, 0, 1)
	resetStats(t, e.nodes[2:3])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err = c.Lock(ctx, key, 10*time.Second, neverRetry)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "node restarted without its data", "node 4 was excluded")
	// The first rounds, while the subscription is made, and one when node
	// 4 confirms it; a round and a release each.
	n := calls(t, e.nodes[2], "evalsha") + calls(t, e.nodes[2], "exec")
	require.LessOrEqual(t, n, 10, "calls on node 2 while Lock waited 3s")
	t.Logf("%d calls on node 2", n)
}
