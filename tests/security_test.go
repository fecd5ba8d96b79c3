package tests

import (
	"bytes"
	"context"
	"log/slog"
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

// The ACL rules of docs/operations.md, feature by feature: the commands a
// Client sends, directly or from its scripts, and the keys and channels
// it touches when its lock keys start with "lock:".
var (
	// Every Client: the check of an idle connection, and the keep-alive
	// of the pub/sub connections. AUTH needs no rule.
	aclConnection = []string{"ping"}
	// TryLock, Extend and Unlock, and Lock, Do and automatic extension
	// when they do not wait.
	aclPlain = []string{"set", "get", "del", "pexpire", "publish", "eval", "evalsha"}
	// Lock and Do that wait, with queueing (the default): the first
	// round is a transaction (multi, exec) on pool.New's nodes.
	aclWaiting = []string{"time", "zadd", "zpopmin", "zrem", "pttl", "multi", "exec", "subscribe", "unsubscribe"}
	// WithFencing: a refusal reads the holder's TTL, and a failed
	// acquisition is released by the script that serves the queue.
	aclFencing = []string{"pttl", "zpopmin"}
	// Restart safety (on by default): a script reads the node's run id and
	// uptime (INFO server), its role and lineage (INFO replication) and
	// its marker key and the keys beside it (a mark deletes a sighting).
	aclRestart = []string{"info|server", "info|replication", "get", "set", "del", "eval", "evalsha"}
	// The lock keys, their queues and fence counters (named after them), the nodes' epochs,
	// and the marker of restart safety.
	aclKeys = []string{"~lock:*", "~redlock:epoch:*", "~redlock:node"}
	// The release announcements, and the hand-offs to each Client.
	aclChannels = []string{"&redlock:released:lock:*", "&redlock:handoff:*:lock:*"}
)

// The ACL user of these tests.
const (
	aclUser     = "locker"
	aclPassword = "locker-password"
)

// documentedACL returns every command of the documented rules, once.
func documentedACL() []string {
	all := slices.Concat(aclConnection, aclRestart, aclPlain, aclWaiting, aclFencing)
	slices.Sort(all)
	return slices.Compact(all)
}

// setACL gives the test user exactly the documented key and channel
// patterns and the commands cmds on every node, and empties the nodes'
// ACL logs.
func setACL(t testing.TB, nodes []*redistest.Server, cmds []string) {
	t.Helper()
	setACLUser(t, nodes, aclUser, cmds)
}

// setACLUser is setACL for the user named user, whose password is
// user+"-password" (poolUser).
func setACLUser(t testing.TB, nodes []*redistest.Server, user string, cmds []string) {
	t.Helper()
	args := []any{"SETUSER", user, "reset", "on", ">" + user + "-password"}
	for _, p := range slices.Concat(aclKeys, aclChannels) {
		args = append(args, p)
	}
	args = append(args, "-@all")
	for _, c := range cmds {
		args = append(args, "+"+c)
	}
	for i, s := range nodes {
		_, err := s.Do("ACL", args...)
		require.NoError(t, err, "node %d", i)
		_, err = s.Do("ACL", "LOG", "RESET")
		require.NoError(t, err, "node %d", i)
	}
}

// poolUser is the pool option that authenticates as user (setACLUser).
func poolUser(user string) pool.Option { return pool.WithUser(user, user+"-password") }

// aclPools returns pools that authenticate as the test user.
func aclPools(t testing.TB, addrs []string, opts ...pool.Option) []pool.Pool {
	t.Helper()
	return newPools(t, addrs, append([]pool.Option{pool.WithUser(aclUser, aclPassword)}, opts...)...)
}

// deniedCommands returns the commands that node s refused for lack of a
// permission since its ACL log was last emptied (the log's "object" field:
// the command's name, or the key or channel denied).
func deniedCommands(t testing.TB, s *redistest.Server) []string {
	t.Helper()
	entries, err := redis.Values(s.Do("ACL", "LOG"))
	require.NoError(t, err)
	var out []string
	for _, e := range entries {
		fields, err := redis.Values(e, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(fields); i += 2 {
			if k, _ := redis.String(fields[i], nil); k == "object" {
				v, _ := redis.String(fields[i+1], nil)
				out = append(out, v)
			}
		}
	}
	return out
}

// awaitAbsent waits until no node holds key: a release returns once a
// quorum released, the other nodes follow.
func awaitAbsent(t testing.TB, nodes []*redistest.Server, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range nodes {
			if _, ok := get(t, s, key); ok {
				return false
			}
		}
		return true
	}, 5*time.Second, 2*time.Millisecond, "key %q left on a node", key)
}

// A user with exactly the documented rules, and nothing else, runs every
// feature on 5 nodes: TryLock, Extend and Unlock; Lock calls that wait and
// take the key by hand-off from one Client to another; fenced locks, taken
// at once, after waiting, and failed (and cleaned up); Do with automatic
// extension. No node refused a single command along the way, so no
// feature ran degraded either.
func TestACL_theDocumentedRulesSufficeForEveryFeature(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, documentedACL())
	a := newClient(t, aclPools(t, addrs))
	b := newClient(t, aclPools(t, addrs))
	e := &env{t: t, nodes: nodes}

	t.Run("TryLockExtendUnlock", func(t *testing.T) {
		key := newKey(t)
		l, err := a.TryLock(ctxT(t, quickly), key, longTTL)
		require.NoError(t, err)
		require.NoError(t, l.Extend(ctxT(t, quickly), longTTL))
		awaitToken(t, nodes, key, l.Token())
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
		awaitAbsent(t, nodes, key)
	})

	t.Run("WaitingAndHandOffs", func(t *testing.T) {
		key := newKey(t)
		handoffs := psubscribe(t, nodes[0], "redlock:handoff:*")
		// a holds the key; one of a's Lock calls waits for it, then one
		// of b's. a's release hands the key to a's waiter, whose release
		// hands it to b's. They never retry: only what the nodes announce
		// ends their wait.
		held := takeEverywhere(t, e, a, key, longTTL)
		gotA := lockAsync(ctxT(t, time.Minute), a, key, longTTL, neverRetry)
		awaitWaiting(t, nodes, key, 1)
		gotB := lockAsync(ctxT(t, time.Minute), b, key, longTTL, neverRetry)
		awaitWaiting(t, nodes, key, 2)
		require.NoError(t, held.Unlock(ctxT(t, quickly)))
		for _, got := range []<-chan lockResult{gotA, gotB} {
			r := awaitLock(t, got, 10*time.Second, "a waiter got no hand-off")
			require.NoError(t, r.err)
			require.Contains(t, handoffs(), ":"+key, "the node announced a hand-off")
			require.NoError(t, r.l.Unlock(ctxT(t, quickly)))
		}
		awaitAbsent(t, nodes, key)
		for i, s := range nodes {
			require.Zero(t, queued(t, s, key), "node %d: the releases took the waiters out of the queue", i)
		}
	})

	t.Run("Fencing", func(t *testing.T) {
		key := newKey(t)
		l, err := a.TryLock(ctxT(t, quickly), key, longTTL, redlock.WithFencing())
		require.NoError(t, err)
		require.Positive(t, l.Fence())
		awaitToken(t, nodes, key, l.Token())
		got := lockAsync(ctxT(t, time.Minute), b, key, longTTL, redlock.WithFencing())
		awaitWaiting(t, nodes, key, 1)
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
		r := <-got
		require.NoError(t, r.err)
		require.Greater(t, r.l.Fence(), l.Fence())
		require.NoError(t, r.l.Unlock(ctxT(t, quickly)))
		awaitAbsent(t, nodes, key)

		// Refused by 3 nodes: the 2 that granted it are released.
		key = newKey(t)
		holdForeign(t, nodes, key, 0, 1, 2)
		_, err = a.TryLock(ctxT(t, quickly), key, longTTL, redlock.WithFencing())
		require.ErrorIs(t, err, redlock.ErrNotAcquired)
		require.True(t, asQuorumError(t, err).Busy(), err)
		require.Eventually(t, func() bool {
			for _, i := range []int{3, 4} {
				if _, ok := get(t, nodes[i], key); ok {
					return false
				}
			}
			return true
		}, 5*time.Second, 2*time.Millisecond, "the failed acquisition left its token")
	})

	t.Run("DoWithAutomaticExtension", func(t *testing.T) {
		const ttl = time.Second
		key := newKey(t)
		extended := false
		err := a.Do(ctxT(t, 10*time.Second), key, ttl, func(ctx context.Context) error {
			// Outlive the TTL: only extensions keep the key.
			select {
			case <-time.After(ttl + ttl/2):
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			_, ok := get(t, nodes[0], key)
			extended = ok
			return nil
		})
		require.NoError(t, err)
		require.True(t, extended, "the key outlived its TTL")
		awaitAbsent(t, nodes, key)
	})

	for i, s := range nodes {
		require.Empty(t, deniedCommands(t, s), "node %d refused commands", i)
	}
}

// permissionText reports whether msg says that a node refused a command,
// a key or a channel for lack of permission: the library's own wording
// ("NOPERM: the user may not run GET ...", "NOPERM: a key is outside the
// user's key patterns ..."), the same whichever server refused, followed
// by the node's reply.
func permissionText(msg string) bool {
	return strings.Contains(msg, "NOPERM: the user may not run ") || strings.Contains(msg, "NOPERM: a key ") ||
		strings.Contains(msg, "NOPERM: a channel ")
}

// requirePermissionError asserts that err is a failed round in which no
// node succeeded and enough nodes failed to decide it, each with its own
// address and a refusal for lack of permission in its error; want are
// strings that every such error must contain as well.
func requirePermissionError(t testing.TB, err error, addrs []string, want ...string) {
	t.Helper()
	require.Error(t, err, "a refused command must not go unnoticed")
	qe := asQuorumError(t, err)
	require.Zero(t, qe.Count(redlock.NodeOK), statuses(qe))
	require.Greater(t, qe.Count(redlock.NodeFailed), len(qe.Nodes)-qe.Quorum, statuses(qe))
	for i, n := range qe.Nodes {
		if n.Status != redlock.NodeFailed {
			continue
		}
		requireNodeFailed(t, qe, i, addrs[i], want...)
		require.True(t, permissionText(n.Err.Error()), "node %d: not a permission error: %v", i, n.Err)
	}
}

// Without any one of the commands that locking needs, the call that needs
// it fails: every node's error names the node and says that permission
// was refused, and it comes at once (a Lock that waits gives up after its
// retries), never after a hang, and never as a success. A command sent by
// the client and one that a script calls are both named
// (TestACL_aCommandDeniedInAScriptIsNamed).
func TestACL_withoutACommandThatLockingNeedsTheCallFails(t *testing.T) {
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	ctx := func(t *testing.T) context.Context { return ctxT(t, 10*time.Second) }
	// Lock waits until its deadline: its error then carries the last
	// round's node errors, and the deadline as the cause.
	fewRetries := redlock.WithRetry(10*time.Millisecond, 50*time.Millisecond)

	// The calls that need a command, each returning the error that the
	// missing command causes.
	tryLock := func(t *testing.T, cl *redlock.Client, key string) error {
		_, err := cl.TryLock(ctx(t), key, longTTL)
		return err
	}
	extend := func(t *testing.T, cl *redlock.Client, key string) error {
		l, err := cl.TryLock(ctx(t), key, longTTL)
		require.NoError(t, err)
		return l.Extend(ctx(t), longTTL)
	}
	unlock := func(t *testing.T, cl *redlock.Client, key string) error {
		l, err := cl.TryLock(ctx(t), key, longTTL)
		require.NoError(t, err)
		awaitToken(t, nodes, key, l.Token())
		return l.Unlock(ctx(t))
	}
	// The key is held for a moment, so that Lock waits, queues, and then
	// finds it free.
	holdBriefly := func(t *testing.T, key string) {
		for i, s := range nodes {
			_, err := s.Do("SET", key, foreignToken, "PX", 200)
			require.NoError(t, err, "node %d", i)
		}
	}
	waitingLock := func(t *testing.T, cl *redlock.Client, key string) error {
		// Lock sends its first script round once subscribed, within a node
		// timeout, and the key is free after 200ms. The deadline may cut
		// a round short, its nodes still pending: the error shows them as
		// they answered the round before.
		holdBriefly(t, key)
		lctx, cancel := context.WithTimeout(ctx(t), testNodeTimeout+300*time.Millisecond)
		defer cancel()
		_, err := cl.Lock(lctx, key, longTTL, fewRetries)
		require.ErrorIs(t, err, context.DeadlineExceeded, "Lock waits while a node refuses")
		return err
	}
	unlockAfterWaiting := func(t *testing.T, cl *redlock.Client, key string) error {
		holdBriefly(t, key)
		l, err := cl.Lock(ctx(t), key, longTTL, fewRetries)
		require.NoError(t, err)
		// The release script takes the waiter out of the queue first, on
		// every node, whether the node holds the key or not.
		return l.Unlock(ctx(t))
	}

	// Restart safety is off in the rows about locking, so that the call
	// reaches the command; the rows about restart safety leave it on.
	for _, tc := range []struct {
		cmd     string
		call    func(*testing.T, *redlock.Client, string) error
		direct  bool // sent by the client, not called by a script
		restart bool // the restart check needs the command
		waits   bool // Lock waits until its deadline: the node errors are its last round's
	}{
		{cmd: "set", call: tryLock, direct: true},
		{cmd: "get", call: extend},
		{cmd: "pexpire", call: extend},
		{cmd: "evalsha", call: extend, direct: true},
		{cmd: "eval", call: extend, direct: true}, // the nodes lack the script
		{cmd: "del", call: unlock},
		// publish: the release happens without it, and Unlock says so
		// (TestACL_unlockWithoutPublishSaysTheKeyWasReleased).
		{cmd: "zpopmin", call: waitingLock, waits: true},
		{cmd: "zrem", call: unlockAfterWaiting},
		{cmd: "info|server", call: tryLock, restart: true},
		{cmd: "get", call: tryLock, restart: true},
		{cmd: "eval", call: tryLock, direct: true, restart: true},
	} {
		name := tc.cmd
		if tc.restart {
			name = "restart check " + name
		}
		t.Run(name, func(t *testing.T) {
			require.Contains(t, documentedACL(), tc.cmd)
			setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == tc.cmd }))
			if tc.cmd == "eval" {
				for i, s := range nodes {
					_, err := s.Do("SCRIPT", "FLUSH")
					require.NoError(t, err, "node %d", i)
				}
			}
			cl := newClient(t, aclPools(t, addrs), restartSafety(tc.restart))
			start := time.Now()
			err := tc.call(t, cl, newKey(t))
			require.Less(t, time.Since(start), 5*time.Second)
			require.Error(t, err, "a refused command must not go unnoticed")
			if !tc.waits {
				require.NotErrorIs(t, err, context.DeadlineExceeded)
			}
			denied := 0
			cmd, _, _ := strings.Cut(tc.cmd, "|")
			for _, s := range nodes {
				if slices.Contains(deniedCommands(t, s), cmd) {
					denied++
				}
			}
			require.Positive(t, denied, "no node logged a refusal of %s", tc.cmd)
			want := "NOPERM: the user may not run " + strings.ToUpper(cmd) + " ("
			if !tc.direct {
				want += "called by the script; "
			}
			requirePermissionError(t, err, addrs, want)
		})
	}
}

// A Lock that waits without ZADD (which its refused script round needs) until
// its deadline says so every time, however the deadline falls: the
// deadline may cut the last round before any node answered it, and the
// error then shows what the nodes answered the round before.
func TestACL_aWaitEndedByItsDeadlineNamesTheRefusedCommandEveryTime(t *testing.T) {
	// Serial: its nodes must answer within tens of milliseconds (main_test.go).
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "zadd" }))
	cl := newClient(t, aclPools(t, addrs), restartSafety(false))
	key := newKey(t)
	holdForeign(t, nodes, key, 0, 1, 2, 3, 4)
	// Deadlines spread over a back-off step (5-10ms), so that some fall
	// while a round is under way; each well after the first script round.
	// The first call has longer: it dials the pub/sub connections, and
	// sends its script round only once subscribed (or after a node
	// timeout).
	for i := range 20 {
		d := 100*time.Millisecond + time.Duration(i)*time.Millisecond
		if i == 0 {
			d = quickly
		}
		lctx, cancel := context.WithTimeout(ctxT(t, quickly), d)
		_, err := cl.Lock(lctx, key, longTTL, redlock.WithRetry(5*time.Millisecond, 10*time.Millisecond))
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, "attempt %d", i)
		requirePermissionError(t, err, addrs, "NOPERM")
		require.Contains(t, strings.ToUpper(err.Error()), "ZADD", "attempt %d (deadline %v)", i, d)
	}
}

// Without one of the commands that only make waiting efficient, a Lock
// that waits still gets the key once it is free, and releases it: it
// polls instead of being woken (subscribe), is not queued (zadd, time),
// is not told the holder's TTL (pttl), has its first round refused and
// sends the script instead (multi, exec), or dials its connections again
// (ping, unsubscribe). The node's ACL log shows the refusals.
func TestACL_withoutACommandThatOnlyHelpsWaitingLockStillWorks(t *testing.T) {
	// Serial: its waits are bounded by seconds, and it failed beside
	// parallel tests on a loaded machine (main_test.go).
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	// Without multi, the node runs the first round's commands one by one;
	// without zadd as well, they leave an entry but no place, which the
	// Client deletes (the script would queue its waiter again, and fail).
	for _, cmds := range [][]string{{"zadd"}, {"time"}, {"pttl"}, {"multi"}, {"exec"}, {"multi", "zadd"}, {"subscribe"}, {"unsubscribe"}, {"ping"}} {
		cmd := cmds[0]
		t.Run(strings.Join(cmds, "+"), func(t *testing.T) {
			setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return slices.Contains(cmds, c) }))
			// The pub/sub connections are kept alive with PING every
			// second. (The pool's PING of an idle connection, 10s by
			// default, is tested without the permission in pool/.)
			cl := newClient(t, aclPools(t, addrs))
			key := newKey(t)
			for i, s := range nodes {
				_, err := s.Do("SET", key, foreignToken, "PX", 200)
				require.NoError(t, err, "node %d", i)
			}
			l, err := cl.Lock(ctxT(t, 5*time.Second), key, longTTL)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctxT(t, quickly)))
			awaitAbsent(t, nodes, key)
			// UNSUBSCRIBE goes out a second after the last waiter left.
			require.Eventually(t, func() bool {
				for _, s := range nodes {
					if slices.Contains(deniedCommands(t, s), cmd) {
						return true
					}
				}
				return false
			}, 5*time.Second, 10*time.Millisecond, "no node logged a refusal of %s", cmd)
		})
	}
}

// A key outside the user's key patterns is refused by every node, and the
// error says so and names the nodes.
func TestACL_aKeyOutsideThePatternsIsRefused(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	setACL(t, c.Nodes(), documentedACL())
	cl := newClient(t, aclPools(t, c.Addrs()))
	_, err := cl.TryLock(ctxT(t, quickly), "other:"+newKey(t), longTTL)
	requirePermissionError(t, err, c.Addrs(), "NOPERM: a key is outside the user's key patterns")
}

// A command that a script calls and the user may not run is refused by
// Redis 7.0 with "ERR The user executing the script can't run this
// command or subcommand script: <sha>, on @user_script:<line>." (neither
// NOPERM nor the command's name), by Valkey 8 with "ERR ACL failure in
// script: User <user> has no permissions to run the '<command>' command
// script: ...". The error says both alike.
func TestACL_aCommandDeniedInAScriptIsNamed(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "pexpire" }))
	cl := newClient(t, aclPools(t, addrs))
	l, err := cl.TryLock(ctxT(t, quickly), newKey(t), longTTL)
	require.NoError(t, err)
	err = l.Extend(ctxT(t, quickly), longTTL)
	requirePermissionError(t, err, addrs, "NOPERM: the user may not run PEXPIRE (called by the script; ")
}

// Without PUBLISH, the release scripts delete the key and then fail to
// announce it. The release succeeded, so Unlock does too; the missing
// permission is logged naming the nodes, and told to observers.
func TestACL_unlockWithoutPublishSucceedsAndIsLogged(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "publish" }))
	var logs syncBuffer
	rec := &recorder{}
	cl := newClient(t, aclPools(t, addrs), redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		redlock.WithObserver(rec))
	key := newKey(t)
	l, err := cl.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)
	awaitToken(t, nodes, key, l.Token())
	require.NoError(t, l.Unlock(ctxT(t, quickly)), "the key was released")
	awaitAbsent(t, nodes, key)
	e, ok := rec.event(redlock.EventNotAnnounced)
	require.True(t, ok, "an observer hears of the missing announcement")
	require.Contains(t, addrs, e.Node)
	require.Contains(t, e.Err.Error(), "NOPERM")
	out := logs.String()
	require.Contains(t, out, "refused to announce")
	require.Contains(t, strings.ToUpper(out), "PUBLISH")
	named := false
	for _, a := range addrs {
		named = named || strings.Contains(out, a)
	}
	require.True(t, named, "the log names the nodes: %s", out)
}

// Users whose ACL predates the lineage check permit INFO server alone:
// restart safety still counts their nodes, and says, at Warn and naming
// each node, that it cannot see a failover there and which permission
// would let it.
func TestACL_withoutInfoReplicationLocksWorkAndTheBlindSpotIsLogged(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "info|replication" }))
	var logs syncBuffer
	cl := newClient(t, aclPools(t, addrs), redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for range 2 {
		l, err := cl.TryLock(ctxT(t, quickly), newKey(t), longTTL)
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
	}
	out := logs.String()
	require.Contains(t, out, "cannot see a failover")
	require.Contains(t, out, "+info|replication")
	for _, a := range addrs {
		require.Contains(t, out, a)
	}
	for i, s := range nodes {
		require.Contains(t, deniedCommands(t, s), "info", "node %d: INFO replication refused", i)
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Waiting without ZADD (no queue) or SUBSCRIBE (no announcements) still
// works, by the back-off (WithRetry), but not silently: WithLogger gets a Warn
// that names the node and the refused command.
func TestACL_aDegradedWaitIsLoggedNamingTheNodeAndTheCommand(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	for _, tc := range []struct{ cmd, want string }{
		{"zadd", "NOPERM: the user may not run ZADD"}, {"subscribe", "NOPERM: the user may not run SUBSCRIBE"},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			setACL(t, nodes, slices.DeleteFunc(documentedACL(), func(c string) bool { return c == tc.cmd }))
			var logs syncBuffer
			cl := newClient(t, aclPools(t, addrs), redlock.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
			key := newKey(t)
			for i, s := range nodes {
				_, err := s.Do("SET", key, foreignToken, "PX", 300)
				require.NoError(t, err, "node %d", i)
			}
			l, err := cl.Lock(ctxT(t, 10*time.Second), key, longTTL)
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctxT(t, quickly)))
			require.Eventually(t, func() bool {
				out := logs.String()
				return strings.Contains(out, "level=WARN") && strings.Contains(out, tc.want) &&
					slices.ContainsFunc(addrs, func(a string) bool { return strings.Contains(out, a) })
			}, 5*time.Second, 10*time.Millisecond, "no warning names the node and %s: %q", tc.want, logs.String())
			require.NotContains(t, logs.String(), l.Token(), "a token in the log")
			require.NotContains(t, logs.String(), aclPassword, "a password in the log")
		})
	}
}

// restartSafety is restart safety at its default (on), or off.
func restartSafety(on bool) redlock.Option {
	if on {
		return redlock.WithRestartSafety(time.Minute)
	}
	return redlock.WithRestartSafety(0)
}

// The rules the other kinds of lock add to the mutex's
// (docs/operations.md): the read-write lock's scripts call EXISTS, HGET,
// HSET, HDEL and HGETALL, the leader record HSET and HMGET, the
// inspections ZCARD, and the queue of a semaphore's waiting Acquire calls
// ZCOUNT, ZRANGEBYSCORE and ZRANGE.
var aclKinds = []string{"exists", "hget", "hgetall", "hmget", "hset", "hdel", "zcard", "zcount", "zrange", "zrangebyscore"}

// A user with exactly the documented rules runs every kind of lock on 5
// nodes, names starting with "lock:" as the key patterns say: a
// semaphore's TryAcquire, Extend and Unlock, and an Acquire that waits for
// a release; a read-write lock's readers, a writer that waits for them,
// and their extensions; an election's campaign, a rival that waits,
// Leader and Observe, and the resignation; and the inspection of each.
// No node refused a single command along the way.
func TestACL_theDocumentedRulesSufficeForEachKind(t *testing.T) {
	// Serial: its waits are bounded by seconds, and it failed beside
	// parallel tests on a loaded machine (main_test.go).
	c := redistest.StartT(t, 5)
	nodes, addrs := c.Nodes(), c.Addrs()
	setACL(t, nodes, slices.Concat(documentedACL(), aclKinds))
	refused := make(chan struct{}, 100) // b's refused acquisition rounds
	a := newClient(t, aclPools(t, addrs))
	b := newClient(t, aclPools(t, addrs), redlock.WithObserver(roundsRefused(refused)))
	ctx := ctxT(t, time.Minute)

	t.Run("Semaphore", func(t *testing.T) {
		name := newKey(t)
		p, err := a.Semaphore(name, 1).TryAcquire(ctx, longTTL)
		require.NoError(t, err)
		require.NoError(t, p.Extend(ctx, longTTL))
		got := make(chan error, 1)
		go func() {
			q, err := b.Semaphore(name, 1).Acquire(ctx, longTTL)
			if err == nil {
				err = q.Unlock(ctx)
			}
			got <- err
		}()
		<-refused // b waits
		in, err := a.Semaphore(name, 1).Inspect(ctx)
		require.NoError(t, err)
		require.Len(t, in.Holders(), 1)
		require.NoError(t, p.Unlock(ctx))
		require.NoError(t, <-got)
	})

	t.Run("RWLock", func(t *testing.T) {
		name := newKey(t)
		r, err := a.RWLock(name).RLock(ctx, longTTL)
		require.NoError(t, err)
		require.NoError(t, r.Extend(ctx, longTTL))
		got := make(chan error, 1)
		go func() {
			w, err := b.RWLock(name).Lock(ctx, longTTL)
			if err == nil {
				if err = w.Extend(ctx, longTTL); err == nil {
					err = w.Unlock(ctx)
				}
			}
			got <- err
		}()
		require.Eventually(t, func() bool {
			in, err := a.RWLock(name).Inspect(ctx)
			require.NoError(t, err)
			return in.Nodes[0].Intent != nil
		}, 5*time.Second, 5*time.Millisecond, "the writer waits")
		require.NoError(t, r.Unlock(ctx))
		require.NoError(t, <-got)
	})

	t.Run("Election", func(t *testing.T) {
		name := newKey(t)
		octx, stop := context.WithCancel(ctx)
		defer stop()
		seen := a.Election(name).Observe(octx)
		l, err := a.Election(name).Campaign(ctx, "first", longTTL)
		require.NoError(t, err)
		select {
		case first := <-seen:
			require.Equal(t, l.Fence(), first.Term)
		case <-time.After(10 * time.Second):
			t.Fatal("the observer delivered no leader")
		}
		got := make(chan error, 1)
		go func() {
			l2, err := b.Election(name).Campaign(ctx, "second", longTTL)
			if err == nil {
				err = l2.Unlock(ctx)
			}
			got <- err
		}()
		leader, err := b.Election(name).Leader(ctx)
		require.NoError(t, err)
		require.Equal(t, "first", leader.Value)
		in, err := b.Election(name).Inspect(ctx)
		require.NoError(t, err)
		_, _, ok := in.Leader()
		require.True(t, ok)
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, <-got)
	})

	t.Run("Inspect", func(t *testing.T) {
		_, err := a.Inspect(ctx, newKey(t))
		require.NoError(t, err)
	})

	for i, s := range nodes {
		require.Empty(t, deniedCommands(t, s), "node %d refused commands", i)
	}
}

// roundsRefused is an Observer that signals on ch each acquisition round
// that was not won (without blocking).
type roundsRefused chan struct{}

func (r roundsRefused) Round(info *redlock.RoundInfo) {
	if info.Op == redlock.OpAcquire && !info.Won {
		select {
		case r <- struct{}{}:
		default:
		}
	}
}

func (roundsRefused) Event(redlock.Event) {}

// A waiting round that a node refuses in the middle of its script (here
// TIME, for a waiter new on the node) leaves no queue without a TTL: the
// queue it created expires, even if its waiter never comes back.
func TestACL_aScriptRefusedMidwayLeavesNoQueueWithoutATTL(t *testing.T) {
	t.Parallel()
	c := redistest.StartT(t, 1)
	s := c.Nodes()[0]
	setACL(t, c.Nodes(), slices.DeleteFunc(documentedACL(), func(c string) bool { return c == "time" }))
	conn, err := redis.Dial("tcp", s.Addr(), redis.DialUsername(aclUser), redis.DialPassword(aclPassword),
		redis.DialReadTimeout(testReadTimeout))
	require.NoError(t, err)
	defer conn.Close()
	key := newKey(t)
	_, err = s.Do("SET", key, foreignToken, "PX", 60_000)
	require.NoError(t, err)
	_, err = script(wire.Acquire, -1).Do(conn, acquireArgs(key, "w-round-1", "cw.1", 1, "h")...)
	require.Error(t, err)
	require.Contains(t, deniedCommands(t, s), "time")
	require.True(t, inQueue(t, s, key, "cw.1"), "ZADD ran before the refusal")
	require.Positive(t, pttl(t, s, wire.WaitersKey(key)), "the queue expires")
}
