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
	// default user with password when it is not "". The suite closes it
	// (Pool.Close), and New must arrange for anything else it made (a
	// client) to be closed when t ends. A client that authenticates when
	// it is made (rueidis) refuses a wrong password then, before any pool
	// exists: New checks that error itself and returns nil.
	New func(t testing.TB, addr, password string) pool.Pool
	// Subscriber says the pools implement pool.Subscriber; the suite then
	// checks their publish/subscribe and that waiters are handed the key.
	Subscriber bool
}

// Bounds: generous, since the machines are shared; the checks say "a call
// is bounded", not "a call is fast".
const (
	shortDeadline = 300 * time.Millisecond
	boundedBy     = 3 * time.Second
	waitLimit     = 10 * time.Second
)

// Run runs every check of the suite as subtests of t.
func Run(t *testing.T, f Factory) {
	t.Run("Replies", func(t *testing.T) { replies(t, f) })
	t.Run("ErrorReplies", func(t *testing.T) { errorReplies(t, f) })
	t.Run("NoScript", func(t *testing.T) { noScript(t, f) })
	t.Run("WrongPassword", func(t *testing.T) { wrongPassword(t, f) })
	t.Run("PausedAndKilledNodes", func(t *testing.T) { pausedAndKilled(t, f) })
	if f.Subscriber {
		t.Run("PubSub", func(t *testing.T) { pubSub(t, f) })
	}
	t.Run("QuorumSubsets", func(t *testing.T) { quorumSubsets(t, f) })
	t.Run("Waiters", func(t *testing.T) { waiters(t, f) })
	if f.Subscriber {
		t.Run("HandOff", func(t *testing.T) { handOff(t, f) })
	}
	t.Run("Fencing", func(t *testing.T) { fencing(t, f) })
	t.Run("ExtendAndUnlock", func(t *testing.T) { extendAndUnlock(t, f) })
}

func newPool(t testing.TB, f Factory, addr, password string) pool.Pool {
	t.Helper()
	p := f.New(t, addr, password)
	require.NotNil(t, p)
	t.Cleanup(func() { _ = p.Close() })
	return p
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
	t.Cleanup(func() { _ = p.Close() })
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

func pausedAndKilled(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	_, err := p.Do(ctxT(t, waitLimit), "PING") // connected
	require.NoError(t, err)

	require.NoError(t, s.Pause())
	for _, call := range []func(context.Context) error{
		func(ctx context.Context) error { _, err := p.Do(ctx, "GET", "k"); return err },
		func(ctx context.Context) error { _, err := p.Eval(ctx, pool.NewScript(0, "return 1")); return err },
	} {
		start := time.Now()
		err := call(ctxT(t, shortDeadline))
		require.Less(t, time.Since(start), boundedBy, "a call on a paused node returns by its deadline")
		requireNodeError(t, err, s.Addr())
	}
	require.NoError(t, s.Resume())
	require.Eventually(t, func() bool {
		_, err := p.Do(ctxT(t, waitLimit), "PING")
		return err == nil
	}, waitLimit, 10*time.Millisecond, "the pool recovers once the node answers again")

	require.NoError(t, s.Kill())
	start := time.Now()
	_, err = p.Do(ctxT(t, shortDeadline), "PING")
	require.Less(t, time.Since(start), boundedBy)
	requireNodeError(t, err, s.Addr())
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
	sub, ok := newPool(t, f, s.Addr(), "").(pool.Subscriber)
	require.True(t, ok, "the pool implements pool.Subscriber")
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

// client makes a Client on the env's pools. Its node timeout is a second,
// not 50ms: the checks are of the pools, on machines that may be busy.
func (e *lockEnv) client(t testing.TB, opts ...redlock.Option) *redlock.Client {
	c, err := redlock.New(e.pools, append([]redlock.Option{redlock.WithNodeTimeout(time.Second)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func quorumSubsets(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	c := e.client(t, redlock.WithRestartSafety(0))
	for n, down := range [][]int{{}, {0}, {1, 3}, {0, 2, 4}, {1, 2, 3, 4}, {4}, {0, 1}} {
		for _, i := range down {
			require.NoError(t, e.nodes.Node(i).Pause())
		}
		key := fmt.Sprintf("lock:subset:%d", n)
		start := time.Now()
		l, err := c.TryLock(ctxT(t, waitLimit), key, 10*time.Second)
		require.Less(t, time.Since(start), boundedBy, "bounded by the node timeout")
		if len(down) <= 2 {
			require.NoError(t, err, "nodes %v down: a quorum is up", down)
			require.NoError(t, l.Unlock(ctxT(t, waitLimit)))
		} else {
			require.ErrorIs(t, err, redlock.ErrNotAcquired, "nodes %v down", down)
			var qe *redlock.QuorumError
			require.ErrorAs(t, err, &qe)
			require.False(t, qe.Busy(), "unreachable, not busy")
		}
		for _, i := range down {
			require.NoError(t, e.nodes.Node(i).Resume())
		}
		// Nothing is left held: the key is free on every node once the
		// releases of the background have landed.
		require.Eventually(t, func() bool {
			for _, s := range e.nodes.Nodes() {
				if v, _ := s.Do("EXISTS", key); v != int64(0) {
					return false
				}
			}
			return true
		}, waitLimit, 10*time.Millisecond, "nodes %v down: a key is left held", down)
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
// release frees the key and the first waiter takes it with a round; that
// waiter's release gives the key to the second, which holds it without a
// round when the announcements of a quorum of nodes arrive within the
// grace period (a few ms). On a busy machine they may not: then the waiter
// takes the key with a round, and the scenario is tried again, up to 3
// times.
func handOff(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	for attempt := range 3 {
		if handOffOnce(t, e, fmt.Sprint("lock:handoff:", attempt)) {
			return
		}
		t.Logf("attempt %d: the second waiter took the key with a round", attempt)
	}
	t.Fatal("the second waiter never held the key by hand-offs")
}

// handOffOnce runs the scenario of handOff on key and reports whether the
// second waiter held the key by hand-offs.
func handOffOnce(t *testing.T, e *lockEnv, key string) bool {
	holder := e.client(t)
	held, err := holder.TryLock(ctxT(t, waitLimit), key, 10*time.Second)
	require.NoError(t, err)
	recs := []*handoffs{{}, {}}
	got := make(chan int, 2)
	var wg sync.WaitGroup
	defer wg.Wait() // the Unlocks end before the Clients close
	for i, rec := range recs {
		c := e.client(t, redlock.WithObserver(rec))
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Lock(ctxT(t, waitLimit), key, 10*time.Second)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				got <- i
				return
			}
			got <- i
			time.Sleep(20 * time.Millisecond)
			if err := l.Unlock(ctxT(t, waitLimit)); err != nil {
				t.Errorf("waiter %d: unlock: %v", i, err)
			}
		}()
		// The second waiter begins once the first is queued on every node.
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
	require.Equal(t, 0, <-got, "the first waiter goes first")
	require.Equal(t, 1, <-got)
	require.Less(t, time.Since(start), 2*time.Second, "the waiters hear of the releases: no one waits for a TTL")
	return recs[1].n.Load() > 0
}

func fencing(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	a, b := e.client(t), e.client(t)
	var last uint64
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l, err := c.Lock(ctxT(t, waitLimit), "lock:fenced", 10*time.Second, redlock.WithFencing())
		require.NoError(t, err)
		require.Greater(t, l.Fence(), last, "fences grow from holder to holder")
		last = l.Fence()
		require.NoError(t, l.Unlock(ctxT(t, waitLimit)))
	}
}

func extendAndUnlock(t *testing.T, f Factory) {
	e := newLockEnv(t, f)
	c := e.client(t)
	l, err := c.TryLock(ctxT(t, waitLimit), "lock:ext", 10*time.Second)
	require.NoError(t, err)
	require.NoError(t, l.Extend(ctxT(t, waitLimit), 20*time.Second))
	require.Greater(t, l.Validity(), 15*time.Second)
	_, err = c.TryLock(ctxT(t, waitLimit), "lock:ext", 10*time.Second)
	var qe *redlock.QuorumError
	require.ErrorAs(t, err, &qe)
	require.True(t, qe.Busy())

	for _, s := range e.nodes.Nodes() {
		_, err := s.Do("DEL", "lock:ext")
		require.NoError(t, err)
	}
	require.True(t, errors.Is(l.Extend(ctxT(t, waitLimit), 10*time.Second), redlock.ErrLockLost), "an extension never revives a lock")
	require.ErrorIs(t, l.Unlock(ctxT(t, waitLimit)), redlock.ErrLockLost)
}

// RunCluster checks a pool whose node is a Redis Cluster: newPool makes
// one for the cluster at seeds. Each of 3 Redlock nodes is a 3-master
// cluster; locks on keys with and without hash tags are taken, waited for
// (hand-offs), extended and fenced, and multi-key locks need a common
// hash tag. Restart safety is off: its marker is in one slot of each
// cluster (docs/operations.md).
func RunCluster(t *testing.T, newPool func(t testing.TB, seeds []string) pool.Pool) {
	clusters := redistest.StartRedisClustersT(t, 3, 3)
	if clusters == nil {
		return
	}
	client := func() *redlock.Client {
		pools := make([]pool.Pool, len(clusters))
		for i, rc := range clusters {
			pools[i] = newPool(t, rc.Addrs())
			t.Cleanup(func() { _ = pools[i].Close() })
		}
		c, err := redlock.New(pools, redlock.WithRestartSafety(0))
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
