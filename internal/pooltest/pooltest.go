// Package pooltest is the conformance suite of pool.Pool implementations:
// the checks every Redlock node adapter must pass against real
// redis-server processes (pool.New, pool.FromRedigo, and the adapters in
// pool/goredis and pool/rueidispool run it). It checks the contract of
// package pool's documentation, then the lock client on top: quorum
// subsets of failed nodes, hand-offs and release announcements, fencing.
package pooltest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Factory makes the pools under test.
type Factory struct {
	// New returns a pool for the node at addr, authenticating as the
	// default user with password when it is not "". The pool must have a
	// Close method (io.Closer), which the suite calls; New must arrange for anything else it made (a
	// client) to be closed when t ends. A client that authenticates when
	// it is made (rueidis) refuses a wrong password then, before any pool
	// exists: New checks that error itself and returns nil.
	//
	// The client's own I/O timeouts (read, write, dial) should be at least
	// 3s: the suite gives calls to paused nodes deadlines of 250ms and
	// wants them back well before such a timeout, so that only the
	// caller's deadline can have ended them.
	New func(t testing.TB, addr, password string) pool.Pool
	// Subscriber says the pools implement pool.Subscriber; the suite then
	// requires it and checks their publish/subscribe and that waiters are
	// handed the key. A pool that implements it unasked is checked too.
	Subscriber bool
	// Reconnector says the pools implement pool.Reconnector; the suite
	// then requires it and checks that Generation grows when the pool
	// reconnects to a restarted node, and only then. A pool that
	// implements it unasked is checked too.
	Reconnector bool
}

// Bounds: generous, since the machines are shared; the checks say "a call
// is bounded by its deadline", not "a call is fast". boundedBy is well
// below the client timeouts a Factory sets (3s at least), so that a call
// that waited for those instead of its deadline fails the check.
const (
	shortDeadline = 250 * time.Millisecond
	boundedBy     = shortDeadline + 1250*time.Millisecond
	waitLimit     = 10 * time.Second
)

// Run runs every check of the suite as subtests of t. Each check starts
// its own redis-server nodes (internal/redistest) and makes its pools with
// f.New.
func Run(t *testing.T, f Factory) {
	t.Run("Replies", func(t *testing.T) { replies(t, f) })
	t.Run("RESP2Replies", func(t *testing.T) { resp2Replies(t, f) })
	t.Run("ErrorReplies", func(t *testing.T) { errorReplies(t, f) })
	t.Run("ConcurrentCalls", func(t *testing.T) { concurrentCalls(t, f) })
	t.Run("Closed", func(t *testing.T) { closedPool(t, f) })
	t.Run("NoScript", func(t *testing.T) { noScript(t, f) })
	t.Run("WrongPassword", func(t *testing.T) { wrongPassword(t, f) })
	t.Run("PausedAndKilledNodes", func(t *testing.T) { pausedAndKilled(t, f) })
	t.Run("PubSub", func(t *testing.T) { pubSub(t, f) })
	t.Run("PubSubClose", func(t *testing.T) { pubSubClose(t, f) })
	t.Run("PubSubNoSilentReconnect", func(t *testing.T) { pubSubNoSilentReconnect(t, f) })
	t.Run("Generation", func(t *testing.T) { generation(t, f) })
	t.Run("QuorumSubsets", func(t *testing.T) { quorumSubsets(t, f) })
	t.Run("Waiters", func(t *testing.T) { waiters(t, f) })
	t.Run("HandOff", func(t *testing.T) { handOff(t, f) })
	t.Run("Fencing", func(t *testing.T) { fencing(t, f) })
	t.Run("ExtendAndUnlock", func(t *testing.T) { extendAndUnlock(t, f) })
}

func newPool(t testing.TB, f Factory, addr, password string) pool.Pool {
	t.Helper()
	p := f.New(t, addr, password)
	require.NotNil(t, p)
	c := closer(t, p)
	t.Cleanup(func() { _ = c.Close() })
	return p
}

// closer returns p's Close method: not part of pool.Pool, since the lock
// client never closes a pool, but every pool the suite checks has one.
func closer(t testing.TB, p pool.Pool) io.Closer {
	t.Helper()
	c, ok := p.(io.Closer)
	require.True(t, ok, "the pool (%T) has no Close method", p)
	return c
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// requireNodeError checks that err is a *pool.NodeError naming addr.
func requireNodeError(t testing.TB, err error, addr string) *pool.NodeError {
	t.Helper()
	var ne *pool.NodeError
	require.ErrorAs(t, err, &ne, "want a *pool.NodeError, got %T: %v", err, err)
	require.Equal(t, addr, ne.Addr)
	require.Contains(t, err.Error(), addr)
	return ne
}

// text reads a string reply, simple or bulk.
func text(t testing.TB, v any) string {
	t.Helper()
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	t.Fatalf("want a string reply, got %T %v", v, v)
	return ""
}

func replies(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	require.Equal(t, s.Addr(), p.Addr(), "the factory names the node by its address")
	ctx := ctxT(t, waitLimit)

	v, err := p.Do(ctx, "SET", "k", "v", "PX", 60000)
	require.NoError(t, err)
	require.Equal(t, "OK", text(t, v))
	v, err = p.Do(ctx, "GET", "k")
	require.NoError(t, err)
	require.Equal(t, "v", text(t, v))
	v, err = p.Do(ctx, "GET", "missing")
	require.NoError(t, err)
	require.Nil(t, v, "a nil reply is nil, not an error")
	v, err = p.Do(ctx, "INCR", "n")
	require.NoError(t, err)
	require.Equal(t, int64(1), v)

	script := pool.NewScript(-1, `return {1, "a", {2, false}, false, true, KEYS[1], ARGV[1]}`)
	v, err = p.Eval(ctx, script, 1, "key", "arg")
	require.NoError(t, err)
	vs, ok := v.([]any)
	require.True(t, ok, "an array reply is []any: %T", v)
	require.Len(t, vs, 7)
	require.Equal(t, int64(1), vs[0])
	require.Equal(t, "a", text(t, vs[1]))
	inner, ok := vs[2].([]any)
	require.True(t, ok, "%T", vs[2])
	// Lua false is nil and true is 1, as RESP2 gives them (a client that
	// speaks RESP3 gets booleans, which the pool converts).
	require.Equal(t, []any{int64(2), nil}, inner)
	require.Nil(t, vs[3])
	require.Equal(t, int64(1), vs[4])
	require.Equal(t, "key", text(t, vs[5]))
	require.Equal(t, "arg", text(t, vs[6]))

	v, err = p.Eval(ctx, pool.NewScript(0, `return false`))
	require.NoError(t, err)
	require.Nil(t, v)
}

func errorReplies(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	ctx := ctxT(t, waitLimit)
	_, err := p.Do(ctx, "SET", "h", "v")
	require.NoError(t, err)
	_, err = p.Do(ctx, "HGET", "h", "f")
	ne := requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied(), "an error reply: %v", err)
	require.Equal(t, "HGET", strings.ToUpper(ne.Op))
	var re pool.ReplyError
	require.ErrorAs(t, err, &re)
	require.True(t, strings.HasPrefix(string(re), "WRONGTYPE"), "%q", re)

	_, err = p.Eval(ctx, pool.NewScript(0, `return redis.error_reply("MYERR boom")`))
	ne = requireNodeError(t, err, s.Addr())
	require.True(t, ne.Replied())
	require.ErrorAs(t, err, &re)
	require.Contains(t, string(re), "MYERR boom")

	v, err := p.Eval(ctx, pool.NewScript(0, `return {1, redis.error_reply("INNER x")}`))
	require.NoError(t, err)
	vs, ok := v.([]any)
	require.True(t, ok, "%T", v)
	require.Len(t, vs, 2)
	require.Equal(t, pool.ReplyError("INNER x"), vs[1], "an error inside an array is a pool.ReplyError")
}

func noScript(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	script := pool.NewScript(1, `redis.call("SET", KEYS[1], ARGV[1]) return ARGV[1]`)
	for i := range 4 {
		_, err := s.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		v, err := p.Eval(ctxT(t, waitLimit), script, "k", fmt.Sprint("v", i))
		require.NoError(t, err, "EVAL after NOSCRIPT, round %d", i)
		require.Equal(t, fmt.Sprint("v", i), text(t, v))
		v, err = p.Eval(ctxT(t, waitLimit), script, "k", "again")
		require.NoError(t, err, "EVALSHA of the script EVAL loaded")
		require.Equal(t, "again", text(t, v))
	}
}

func wrongPassword(t *testing.T, f Factory) {
	const password = "c0rrect-horse"
	s := redistest.StartT(t, 1, redistest.Options{Password: password}).Node(0)
	p := f.New(t, s.Addr(), "wr0ng-battery")
	if p == nil {
		return // refused when the client was made, and checked by New
	}
	c := closer(t, p)
	t.Cleanup(func() { _ = c.Close() })
	_, err := p.Do(ctxT(t, waitLimit), "PING")
	requireNodeError(t, err, s.Addr())
	require.NotContains(t, err.Error(), "wr0ng-battery")
	require.NotContains(t, err.Error(), password)
	msg := strings.ToUpper(err.Error())
	require.True(t, strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "AUTH"),
		"the error says authentication failed: %v", err)

	good := newPool(t, f, s.Addr(), password)
	_, err = good.Do(ctxT(t, waitLimit), "PING")
	require.NoError(t, err)
}

// pausedAndKilled checks that calls to a paused node (SIGSTOP: the
// connection stays open and nothing answers) and to a killed one return
// by the caller's deadline with a *pool.NodeError: on a connection the
// pool had, on the pool's first connection (dialled and set up while the
// node is paused), for DialPubSub, and without a deadline (the pool's own
// bound). The pool recovers when the node answers again.
func pausedAndKilled(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	_, err := p.Do(ctxT(t, waitLimit), "PING") // connected
	require.NoError(t, err)
	fresh := newPool(t, f, s.Addr(), "") // made, not used yet
	script := pool.NewScript(0, "return 1")
	bounded := func(what string, call func(context.Context) error) *pool.NodeError {
		t.Helper()
		start := time.Now()
		err := call(ctxT(t, shortDeadline))
		took := time.Since(start)
		require.Less(t, took, boundedBy, "%s: a call on an unresponsive node returns by its deadline", what)
		t.Logf("%s: %v after %v", what, err, took.Round(time.Millisecond))
		return requireNodeError(t, err, s.Addr())
	}

	require.NoError(t, s.Pause())
	bounded("Do on a paused node", func(ctx context.Context) error { _, err := p.Do(ctx, "GET", "k"); return err })
	bounded("Eval on a paused node", func(ctx context.Context) error { _, err := p.Eval(ctx, script); return err })
	bounded("first Do on a paused node", func(ctx context.Context) error { _, err := fresh.Do(ctx, "GET", "k"); return err })
	bounded("first Eval on a paused node", func(ctx context.Context) error { _, err := fresh.Eval(ctx, script); return err })
	if sub, ok := p.(pool.Subscriber); ok {
		// Connecting needs no answer unless the pool asks for one: a
		// connection may open. It must close all the same.
		evs := &events{ch: make(chan pool.PubSubEvent, 8)}
		start := time.Now()
		c, err := sub.DialPubSub(ctxT(t, shortDeadline), evs.on)
		require.Less(t, time.Since(start), boundedBy, "DialPubSub on a paused node returns by its deadline")
		if err != nil {
			ne := requireNodeError(t, err, s.Addr())
			require.Equal(t, "dial", ne.Op)
		} else {
			start = time.Now()
			require.NoError(t, c.Close())
			require.Less(t, time.Since(start), boundedBy, "Close does not wait for a paused node")
			require.Equal(t, pool.PubSubClosed, evs.nextExcept(t, pool.PubSubPong).Kind)
		}
	}
	start := time.Now()
	_, err = p.Do(context.Background(), "GET", "k")
	require.Less(t, time.Since(start), waitLimit, "a call without a deadline is bounded by the pool")
	requireNodeError(t, err, s.Addr())
	require.NoError(t, s.Resume())
	for _, q := range []pool.Pool{p, fresh} {
		require.Eventually(t, func() bool {
			_, err := q.Do(ctxT(t, waitLimit), "PING")
			return err == nil
		}, waitLimit, 10*time.Millisecond, "the pool recovers once the node answers again")
	}

	require.NoError(t, s.Kill())
	bounded("Do on a killed node", func(ctx context.Context) error { _, err := p.Do(ctx, "PING"); return err })
	bounded("Eval on a killed node", func(ctx context.Context) error { _, err := p.Eval(ctx, script); return err })
	if sub, ok := p.(pool.Subscriber); ok {
		ne := bounded("DialPubSub to a killed node", func(ctx context.Context) error {
			c, err := sub.DialPubSub(ctx, func(pool.PubSubEvent) {})
			if err == nil {
				_ = c.Close()
			}
			return err
		})
		require.Equal(t, "dial", ne.Op)
	}
	require.NoError(t, s.Restart())
	require.Eventually(t, func() bool {
		_, err := p.Do(ctxT(t, waitLimit), "PING")
		return err == nil
	}, waitLimit, 10*time.Millisecond, "the pool reconnects to the restarted node")
}

// events records what a pub/sub connection delivers.
type events struct{ ch chan pool.PubSubEvent }

func (e *events) on(ev pool.PubSubEvent) { e.ch <- ev }

func (e *events) next(t testing.TB) pool.PubSubEvent {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(waitLimit):
		t.Fatal("no pub/sub event")
		return pool.PubSubEvent{}
	}
}

// nextExcept returns the next event that is not a pong (a client may
// answer pings of its own).
func (e *events) nextExcept(t testing.TB, skip pool.PubSubKind) pool.PubSubEvent {
	t.Helper()
	for {
		if ev := e.next(t); ev.Kind != skip {
			return ev
		}
	}
}

func pubSub(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	sub := subscriberOf(t, f, newPool(t, f, s.Addr(), ""))
	evs := &events{ch: make(chan pool.PubSubEvent, 64)}
	c, err := sub.DialPubSub(ctxT(t, waitLimit), evs.on)
	require.NoError(t, err)

	require.NoError(t, c.Subscribe("a", "b"))
	got := map[string]bool{}
	for range 2 {
		ev := evs.nextExcept(t, pool.PubSubPong)
		require.Equal(t, pool.PubSubSubscribed, ev.Kind, "%+v", ev)
		got[ev.Channel] = true
	}
	require.Equal(t, map[string]bool{"a": true, "b": true}, got)
	_, err = s.Do("PUBLISH", "b", "hello")
	require.NoError(t, err)
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: "b", Data: "hello"}, evs.nextExcept(t, pool.PubSubPong))
	_, err = s.Do("PUBLISH", "b", "")
	require.NoError(t, err)
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: "b"}, evs.nextExcept(t, pool.PubSubPong), "an empty message")
	const burst = 50
	for i := range burst {
		_, err = s.Do("PUBLISH", []string{"a", "b"}[i%2], fmt.Sprint(i))
		require.NoError(t, err)
	}
	for i := range burst {
		require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: []string{"a", "b"}[i%2], Data: fmt.Sprint(i)},
			evs.nextExcept(t, pool.PubSubPong), "messages arrive in order")
	}
	require.NoError(t, c.Ping())
	require.Equal(t, pool.PubSubPong, evs.next(t).Kind)
	require.NoError(t, c.Unsubscribe("a"))
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubUnsubscribed, Channel: "a"}, evs.nextExcept(t, pool.PubSubPong))
	require.NoError(t, c.Close())
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, evs.nextExcept(t, pool.PubSubPong), "Close ends it without an error")

	// A node that dies ends the connection with an error naming it.
	c, err = sub.DialPubSub(ctxT(t, waitLimit), evs.on)
	require.NoError(t, err)
	require.NoError(t, c.Subscribe("a"))
	require.Equal(t, pool.PubSubSubscribed, evs.nextExcept(t, pool.PubSubPong).Kind)
	require.NoError(t, s.Kill())
	ev := evs.nextExcept(t, pool.PubSubPong)
	require.Equal(t, pool.PubSubClosed, ev.Kind)
	requireNodeError(t, ev.Err, s.Addr())
	_ = c.Close()
}

// lockEnv is 5 nodes and the pools of the factory on them.
type lockEnv struct {
	nodes *redistest.Cluster
	pools []pool.Pool
}

func newLockEnv(t *testing.T, f Factory) *lockEnv {
	nodes := redistest.StartT(t, 5)
	e := &lockEnv{nodes: nodes}
	for _, a := range nodes.Addrs() {
		e.pools = append(e.pools, newPool(t, f, a, ""))
	}
	return e
}

// ready waits until every pool answers again (after its node was paused or
// restarted).
func (e *lockEnv) ready(t testing.TB) {
	t.Helper()
	for i, p := range e.pools {
		require.Eventually(t, func() bool { return answersWrites(t, p) }, waitLimit, 5*time.Millisecond,
			"node %d answers its pool again", i)
	}
}

// answersWrites reports whether 16 writes in a row went through p. A
// client with several connections to a node (rueidis multiplexes its
// pipeline over a few) may fail the first command on each connection the
// node closed while it was down, once; a PING does not show it, since
// such clients send a read-only command again on a new connection.
func answersWrites(t testing.TB, p pool.Pool) bool {
	for range 16 {
		if _, err := p.Do(ctxT(t, waitLimit), "SET", "pooltest:ready", "1", "PX", 1000); err != nil {
			return false
		}
	}
	return true
}

// client makes a Client on the env's pools. Its node timeout is a second,
// not 50ms, unless opts say otherwise: the checks are of the pools, on
// machines that may be busy.
func (e *lockEnv) client(t testing.TB, opts ...redlock.Option) *redlock.Client {
	c, err := redlock.New(e.pools, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// quorumSubsets takes a lock with every subset of the 5 nodes down, some
// paused and some killed (which depends on the subset, so that each node
// is paused in some and killed in others): TryLock succeeds, with the key
// set on every live node, exactly when a quorum (3) is up, and fails
// otherwise naming the nodes that failed; either way it returns within
// the bound, and once the nodes are back no key is left held (the TTL is
// longer than the check waits: only a release can have removed it).
func quorumSubsets(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	// A node timeout above the default (50ms): with two nodes down, every
	// live node must answer in time, on a shared machine under -race.
	c := e.client(t, redlock.WithRestartSafety(0), redlock.WithNodeTimeout(250*time.Millisecond))
	const ttl = time.Minute
	for mask := range 1 << 5 {
		var down, paused, killed []int
		for i := range 5 {
			if mask&(1<<i) == 0 {
				continue
			}
			down = append(down, i)
			if (i+mask)%2 == 0 {
				killed = append(killed, i)
				require.NoError(t, e.nodes.Node(i).Kill())
			} else {
				paused = append(paused, i)
				require.NoError(t, e.nodes.Node(i).Pause())
			}
		}
		what := fmt.Sprintf("paused %v, killed %v", paused, killed)
		key := fmt.Sprintf("lock:subset:%02d", mask)
		start := time.Now()
		l, err := c.TryLock(ctxT(t, waitLimit), key, ttl)
		require.Less(t, time.Since(start), boundedBy, "%s: bounded by the node timeout", what)
		if len(down) <= 2 {
			require.NoError(t, err, "%s: a quorum is up", what)
			// A quorum of the live nodes holds the key (one beyond the
			// quorum may answer after TryLock returned, or fail).
			require.Eventually(t, func() bool {
				n := 0
				for i, s := range e.nodes.Nodes() {
					if mask&(1<<i) == 0 {
						if v, _ := s.Do("GET", key); v != nil && text(t, v) == l.Token() {
							n++
						}
					}
				}
				return n >= 3
			}, waitLimit, 5*time.Millisecond, "%s: a quorum holds the key", what)
			require.NoError(t, l.Unlock(ctxT(t, waitLimit)), what)
		} else {
			require.ErrorIs(t, err, redlock.ErrNotAcquired, what)
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			require.False(t, qe.Busy(), "%s: unreachable, not busy", what)
			require.Zero(t, qe.Count(redlock.NodeRefused), what)
			for _, i := range down {
				n := qe.Nodes[i]
				require.NotEqual(t, redlock.NodeOK, n.Status, "%s: node %d", what, i)
				if n.Status == redlock.NodeFailed { // else pending: no reply within the node timeout
					requireNodeError(t, n.Err, e.nodes.Node(i).Addr())
				}
			}
		}
		for _, i := range paused {
			require.NoError(t, e.nodes.Node(i).Resume())
		}
		for _, i := range killed {
			require.NoError(t, e.nodes.Node(i).Restart())
		}
		e.ready(t)
		// Nothing is left held: the key is free on every node once the
		// releases of the background have landed.
		requireReleased(t, e.nodes, key, what)
	}
}

// requireReleased waits until key is gone from every node, and fails
// naming the nodes that keep it.
func requireReleased(t testing.TB, nodes *redistest.Cluster, key, what string) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		var held []string
		for i, s := range nodes.Nodes() {
			if v, _ := s.Do("PTTL", key); v != int64(-2) {
				held = append(held, fmt.Sprintf("node %d (PTTL %v)", i, v))
			}
		}
		if len(held) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s is left held on %v", what, key, held)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// handoffs counts the locks taken by hand-offs.
type handoffs struct{ n atomic.Int64 }

func (h *handoffs) Round(info *redlock.RoundInfo) {
	if info.Op == "handoff" {
		h.n.Add(1)
	}
}
func (*handoffs) Event(redlock.Event) {}

func waiters(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	const workers, rounds = 3, 8
	seen := &handoffs{}
	var mu sync.Mutex
	holder := ""
	var wg sync.WaitGroup
	for w := range workers {
		c := e.client(t, redlock.WithObserver(seen))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				l, err := c.Lock(ctxT(t, waitLimit), "lock:hot", 10*time.Second)
				if err != nil {
					t.Errorf("worker %d round %d: %v", w, r, err)
					return
				}
				mu.Lock()
				if holder != "" {
					t.Errorf("worker %d got the lock while %s held it", w, holder)
				}
				holder = fmt.Sprint(w)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				holder = ""
				mu.Unlock()
				if err := l.Unlock(ctxT(t, waitLimit)); err != nil {
					t.Errorf("worker %d round %d: unlock: %v", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	t.Logf("%d of %d acquisitions by hand-offs", seen.n.Load(), workers*rounds)
}

// handOff checks that a release is announced and hands the key to the
// head of the queue: the first holder took the key with TryLock, so its
// release frees the key and the first waiter takes it with a round; each
// waiter's release then gives the key to the next, which holds it without
// a round when the announcements of a quorum of nodes arrive within the
// grace period (a few ms). On a busy machine they may not: then a waiter
// takes the key with a round, and the scenario is tried again, up to 3
// times. In every attempt the waiters get the key in the order they came,
// one at a time, without waiting for a TTL.
func handOff(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	if _, ok := e.pools[0].(pool.Subscriber); !ok {
		require.False(t, f.Subscriber, "the Factory says the pool implements pool.Subscriber")
		t.Skip("the pool does not implement pool.Subscriber: waiters poll")
	}
	for attempt := range 3 {
		if handOffOnce(t, e, fmt.Sprint("lock:handoff:", attempt)) {
			return
		}
		t.Logf("attempt %d: a later waiter took the key with a round", attempt)
	}
	t.Fatal("the later waiters never held the key by hand-offs")
}

// handOffOnce runs the scenario of handOff on key and reports whether
// every waiter after the first held the key by a hand-off.
func handOffOnce(t *testing.T, e *lockEnv, key string) bool {
	holder := e.client(t)
	held, err := holder.TryLock(ctxT(t, waitLimit), key, time.Minute)
	require.NoError(t, err)
	// Every node holds the key before the first waiter asks: TryLock
	// returns on a quorum, and a node that a waiter's round reached first
	// would be the waiter's, which is not queued where it holds the key.
	require.Eventually(t, func() bool {
		in, err := holder.Inspect(ctxT(t, waitLimit), key)
		require.NoError(t, err)
		for _, n := range in.Nodes {
			if n.Holder != holder.ID() {
				return false
			}
		}
		return true
	}, waitLimit, 5*time.Millisecond, "the holder's key is on every node")
	recs := []*handoffs{{}, {}, {}}
	got := make(chan int, len(recs))
	var holding atomic.Int32
	var wg sync.WaitGroup
	defer wg.Wait() // the Unlocks end before the Clients close
	for i, rec := range recs {
		c := e.client(t, redlock.WithObserver(rec))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t, waitLimit), key, time.Minute)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				got <- i
				return
			}
			if n := holding.Add(1); n != 1 {
				t.Errorf("waiter %d holds the key with %d others", i, n-1)
			}
			got <- i
			time.Sleep(20 * time.Millisecond)
			holding.Add(-1)
			if err := l.Unlock(ctxT(t, waitLimit)); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		}()
		// The next waiter begins once this one is queued on every node.
		require.Eventually(t, func() bool {
			in, err := holder.Inspect(ctxT(t, waitLimit), key)
			require.NoError(t, err)
			for _, n := range in.Nodes {
				if n.Queued < i+1 {
					return false
				}
			}
			return true
		}, waitLimit, 5*time.Millisecond, "waiter %d is queued", i)
	}
	start := time.Now()
	require.NoError(t, held.Unlock(ctxT(t, waitLimit)))
	for i := range recs {
		require.Equal(t, i, <-got, "the waiters get the key in the order they came")
	}
	require.Less(t, time.Since(start), 3*time.Second, "the waiters hear of the releases: no one waits for a TTL")
	for _, rec := range recs[1:] {
		if rec.n.Load() == 0 {
			return false
		}
	}
	return true
}

// fencing checks that the fences of a key's holders grow strictly from
// holder to holder, for Clients that take turns and for Clients that
// compete.
func fencing(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	clients := []*redlock.Client{e.client(t), e.client(t), e.client(t)}
	var last uint64
	for i := range 6 {
		l, err := clients[i%2].Lock(ctxT(t, waitLimit), "lock:fenced", time.Minute, redlock.WithFencing())
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, "fences grow from holder to holder")
		last = l.Fence()
		require.NoError(t, l.Unlock(ctxT(t, waitLimit)))
	}

	var mu sync.Mutex
	var fences []uint64
	var wg sync.WaitGroup
	for w, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range 4 {
				l, err := c.Lock(ctxT(t, waitLimit), "lock:fenced", time.Minute, redlock.WithFencing())
				if err != nil {
					t.Errorf("client %d round %d: %v", w, r, err)
					return
				}
				mu.Lock() // held while the lock is: the order of the holds
				fences = append(fences, l.Fence())
				mu.Unlock()
				if err := l.Unlock(ctxT(t, waitLimit)); err != nil {
					t.Errorf("client %d round %d: unlock: %v", w, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, fences, 3*4)
	for _, fence := range fences {
		require.Greater(t, fence, last, "fences grow from holder to holder: %v", fences)
		last = fence
	}
}

// extendAndUnlock checks Extend and Unlock: on nodes that lost the scripts
// (SCRIPT FLUSH: EVAL after NOSCRIPT, through the lock client), a held
// lock is extended and refuses another owner, an extension never revives
// a lock whose key is gone, and Unlock then reports the loss.
func extendAndUnlock(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	c := e.client(t)
	flush := func() {
		for _, s := range e.nodes.Nodes() {
			_, err := s.Do("SCRIPT", "FLUSH")
			require.NoError(t, err)
		}
	}
	l, err := c.TryLock(ctxT(t, waitLimit), "lock:ext", 10*time.Second)
	require.NoError(t, err)
	flush()
	require.NoError(t, l.Extend(ctxT(t, waitLimit), time.Minute))
	require.Greater(t, l.Validity(), 50*time.Second)
	for _, s := range e.nodes.Nodes() {
		// A node beyond the quorum may answer after Extend returned.
		require.Eventually(t, func() bool {
			v, err := s.Do("PTTL", "lock:ext")
			return err == nil && v.(int64) > 50_000
		}, waitLimit, 5*time.Millisecond, "the new TTL is set on %s", s.Addr())
	}
	// Another Client finds the key busy; its Close waits for every reply,
	// so that no late SET NX of its round can land after the DEL below.
	other := e.client(t)
	_, err = other.TryLock(ctxT(t, waitLimit), "lock:ext", 10*time.Second)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.True(t, qe.Busy())
	require.NoError(t, other.Close())

	for _, s := range e.nodes.Nodes() {
		_, err := s.Do("DEL", "lock:ext")
		require.NoError(t, err)
	}
	require.True(t, errors.Is(l.Extend(ctxT(t, waitLimit), 10*time.Second), redlock.ErrLockLost), "an extension never revives a lock")
	require.ErrorIs(t, l.Unlock(ctxT(t, waitLimit)), redlock.ErrLockLost)
	for _, s := range e.nodes.Nodes() {
		v, err := s.Do("EXISTS", "lock:ext")
		require.NoError(t, err)
		require.Equal(t, int64(0), v, "nothing recreated on %s", s.Addr())
	}

	l, err = c.TryLock(ctxT(t, waitLimit), "lock:ext2", time.Minute)
	require.NoError(t, err)
	flush()
	require.NoError(t, l.Unlock(ctxT(t, waitLimit)))
	for _, s := range e.nodes.Nodes() {
		require.Eventually(t, func() bool {
			v, err := s.Do("EXISTS", "lock:ext2")
			return err == nil && v == int64(0)
		}, waitLimit, 5*time.Millisecond, "released on %s", s.Addr())
	}
}

// RunCluster checks a pool whose node is a Redis Cluster: newPool makes
// one for the cluster at seeds. Each of 3 Redlock nodes is a 3-master
// cluster; locks on keys with and without hash tags are taken, waited for
// (hand-offs), extended and fenced, and multi-key locks need a common
// hash tag. Restart safety is off unless opts turn it on (they come
// after the defaults).
func RunCluster(t *testing.T, newPool func(t testing.TB, seeds []string) pool.Pool, opts ...redlock.Option) {
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}
	client := func() *redlock.Client {
		pools := make([]pool.Pool, len(clusters))
		for i, rc := range clusters {
			pools[i] = newPool(t, rc.Addrs())
			c := closer(t, pools[i])
			t.Cleanup(func() { _ = c.Close() })
		}
		// A fresh cluster client's first call loads the slots and dials a
		// master: more than the default node timeout (50ms) on a busy
		// machine under -race.
		c, err := redlock.New(pools, append([]redlock.Option{redlock.WithRestartSafety(0), redlock.WithNodeTimeout(time.Second)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	a, b := client(), client()
	for _, key := range []string{"lock:cluster:plain", "{order42}:lock", "odd}key", "odd{key"} {
		ctx := ctxT(t, waitLimit)
		held, err := a.TryLock(ctx, key, 10*time.Second, redlock.WithFencing())
		require.NoError(t, err, key)
		got := make(chan *redlock.Lock, 1)
		go func() {
			l, err := b.Lock(ctx, key, 10*time.Second, redlock.WithFencing())
			if err != nil {
				t.Error(key, err)
			}
			got <- l
		}()
		// The waiter is queued on a quorum of nodes: on a busy machine a
		// node may time out (the holder's lock then stands on the others).
		require.Eventually(t, func() bool {
			in, err := a.Inspect(ctx, key)
			require.NoError(t, err)
			queued := 0
			for _, n := range in.Nodes {
				if n.Err == nil && n.Queued > 0 {
					queued++
				}
			}
			return queued >= in.Quorum
		}, waitLimit, 5*time.Millisecond, "%s: the waiter is queued on a quorum of nodes", key)
		require.NoError(t, held.Extend(ctx, 10*time.Second))
		require.NoError(t, held.Unlock(ctx))
		next := <-got
		require.NotNil(t, next, key)
		require.Greater(t, next.Fence(), held.Fence(), key)
		require.NoError(t, next.Unlock(ctx))
	}

	ctx := ctxT(t, waitLimit)
	l, err := a.TryLockMulti(ctx, []string{"{acct}:7", "{acct}:3"}, 10*time.Second, redlock.WithFencing())
	require.NoError(t, err, "keys with a common hash tag")
	require.Len(t, l.Fences(), 2)
	require.NoError(t, l.Unlock(ctx))
	_, err = a.TryLockMulti(ctx, []string{"lock:acct:7", "lock:acct:3"}, 10*time.Second)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.ErrorContains(t, err, "common hash tag")
}
