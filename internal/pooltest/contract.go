package pooltest

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
)

// subscriberOf returns p as a pool.Subscriber, or skips t when it is not
// one and the Factory did not say it is.
func subscriberOf(t *testing.T, f Factory, p pool.Pool) pool.Subscriber {
	t.Helper()
	sub, ok := p.(pool.Subscriber)
	if !ok {
		require.False(t, f.Subscriber, "the Factory says the pool implements pool.Subscriber")
		t.Skip("the pool does not implement pool.Subscriber")
	}
	return sub
}

// resp2Replies checks that replies a RESP3 client gets in other types
// reach the caller as RESP2 gives them: maps as flat arrays, doubles as
// their text, sets as arrays, status replies as strings, nil elements as
// nil.
func resp2Replies(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	ctx := ctxT(t, waitLimit)
	do := func(cmd string, args ...any) any {
		t.Helper()
		v, err := p.Do(ctx, cmd, args...)
		require.NoError(t, err, cmd)
		return v
	}
	texts := func(v any) []string {
		t.Helper()
		vs, ok := v.([]any)
		require.True(t, ok, "an array reply is []any: %T %v", v, v)
		out := make([]string, len(vs))
		for i, e := range vs {
			out[i] = text(t, e)
		}
		return out
	}

	do("HSET", "h", "f", "v")
	require.Equal(t, []string{"f", "v"}, texts(do("HGETALL", "h")), "a map is a flat array")
	require.Equal(t, []string{"maxmemory-policy", "noeviction"}, texts(do("CONFIG", "GET", "maxmemory-policy")))
	do("ZADD", "z", "1.5", "m")
	score, err := strconv.ParseFloat(text(t, do("ZSCORE", "z", "m")), 64)
	require.NoError(t, err, "a double is its text")
	require.Equal(t, 1.5, score)
	do("SADD", "set", "x")
	require.Equal(t, []string{"x"}, texts(do("SMEMBERS", "set")), "a set is an array")
	do("SET", "k", "v")
	v := do("MGET", "k", "missing")
	vs, ok := v.([]any)
	require.True(t, ok, "%T", v)
	require.Len(t, vs, 2)
	require.Equal(t, "v", text(t, vs[0]))
	require.Nil(t, vs[1], "a nil element is nil")
	require.Equal(t, int64(1), do("EXISTS", "k"))

	eval := func(src string) any {
		t.Helper()
		v, err := p.Eval(ctx, pool.NewScript(0, src))
		require.NoError(t, err, src)
		return v
	}
	require.Equal(t, "FINE", text(t, eval(`return redis.status_reply("FINE")`)))
	require.Equal(t, int64(3), eval(`return 3.99`), "a Lua number is an integer")
	v = eval(`return {}`)
	vs, ok = v.([]any)
	require.True(t, ok, "an empty array is []any: %T", v)
	require.Empty(t, vs)
	require.Nil(t, eval(`return nil`))
	require.Equal(t, int64(1), eval(`return true`))
	// What the lock scripts return: a GET's false inside a table.
	v = eval(`return {redis.call("GET", "missing"), redis.call("PTTL", "k"), redis.call("GET", "k")}`)
	vs, ok = v.([]any)
	require.True(t, ok, "%T", v)
	require.Len(t, vs, 3)
	require.Nil(t, vs[0], "Lua false (a nil GET inside a script) is nil")
	require.Equal(t, int64(-1), vs[1])
	require.Equal(t, "v", text(t, vs[2]))
}

// concurrentCalls checks that concurrent callers each get their own
// replies.
func concurrentCalls(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	echo := pool.NewScript(1, `return {KEYS[1], ARGV[1]}`)
	const workers, calls = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("c:", w)
			for i := range calls {
				ctx := ctxT(t, waitLimit)
				val := fmt.Sprint(w, ":", i)
				if _, err := p.Do(ctx, "SET", key, val); err != nil {
					t.Errorf("SET: %v", err)
					return
				}
				v, err := p.Do(ctx, "GET", key)
				if err != nil || asText(v) != val {
					t.Errorf("GET %s: %v %v, want %s", key, v, err, val)
					return
				}
				v, err = p.Eval(ctx, echo, key, val)
				vs, _ := v.([]any)
				if err != nil || len(vs) != 2 || asText(vs[0]) != key || asText(vs[1]) != val {
					t.Errorf("Eval: %v %v, want [%s %s]", v, err, key, val)
					return
				}
				if _, err := p.Do(ctx, "INCR", "total"); err != nil {
					t.Errorf("INCR: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	v, err := p.Do(ctxT(t, waitLimit), "GET", "total")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprint(workers*calls), text(t, v))
}

func asText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	}
	return fmt.Sprintf("<%T %v>", v, v)
}

// closedPool checks that a context that has ended stops a call at once,
// and that calls on a closed pool fail with pool.ErrClosed.
func closedPool(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	_, err := p.Do(ctxT(t, waitLimit), "PING")
	require.NoError(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err = p.Do(ctx, "SET", "k", "v")
	require.Less(t, time.Since(start), boundedBy)
	requireNodeError(t, err, s.Addr())
	v, err := s.Do("EXISTS", "k")
	require.NoError(t, err)
	require.Equal(t, int64(0), v, "a command whose context ended first is not sent")

	require.NoError(t, closer(t, p).Close())
	_, err = p.Do(ctxT(t, waitLimit), "PING")
	requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, pool.ErrClosed)
	_, err = p.Eval(ctxT(t, waitLimit), pool.NewScript(0, "return 1"))
	requireNodeError(t, err, s.Addr())
	require.ErrorIs(t, err, pool.ErrClosed)
	if sub, ok := p.(pool.Subscriber); ok {
		_, err = sub.DialPubSub(ctxT(t, waitLimit), func(pool.PubSubEvent) {})
		requireNodeError(t, err, s.Addr())
		require.ErrorIs(t, err, pool.ErrClosed)
	}
}

// pubSubClose checks Close: from inside the callback, on a paused node,
// twice; it never waits for the node, the PubSubClosed event follows with
// a nil Err, and nothing follows that.
func pubSubClose(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	sub := subscriberOf(t, f, newPool(t, f, s.Addr(), ""))

	// Close from the callback, on the first confirmation.
	evs := &events{ch: make(chan pool.PubSubEvent, 64)}
	var c pool.PubSubConn
	ready := make(chan struct{})
	closeTook := make(chan time.Duration, 1)
	c, err := sub.DialPubSub(ctxT(t, waitLimit), func(ev pool.PubSubEvent) {
		if ev.Kind == pool.PubSubSubscribed {
			<-ready
			start := time.Now()
			_ = c.Close()
			closeTook <- time.Since(start)
		}
		evs.on(ev)
	})
	require.NoError(t, err)
	close(ready)
	require.NoError(t, c.Subscribe("a"))
	require.Equal(t, pool.PubSubSubscribed, evs.nextExcept(t, pool.PubSubPong).Kind)
	require.Less(t, <-closeTook, boundedBy, "Close from the callback does not wait for the reader")
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, evs.nextExcept(t, pool.PubSubPong))
	_, err = s.Do("PUBLISH", "a", "late")
	require.NoError(t, err)
	require.NoError(t, c.Close(), "a second Close")
	start := time.Now()
	_ = c.Subscribe("b") // may fail; must not block
	_ = c.Ping()
	require.Less(t, time.Since(start), boundedBy)
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, evs.ch, "nothing follows PubSubClosed")

	// Close while the node is paused.
	c, err = sub.DialPubSub(ctxT(t, waitLimit), evs.on)
	require.NoError(t, err)
	require.NoError(t, c.Subscribe("a"))
	require.Equal(t, pool.PubSubSubscribed, evs.nextExcept(t, pool.PubSubPong).Kind)
	require.NoError(t, s.Pause())
	start = time.Now()
	require.NoError(t, c.Close())
	require.Less(t, time.Since(start), boundedBy, "Close does not wait for a paused node")
	ev := evs.nextExcept(t, pool.PubSubPong)
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, ev)
	require.NoError(t, s.Resume())
}

// pubSubNoSilentReconnect checks that a pub/sub connection that the node
// drops ends, with an error naming the node, instead of reconnecting and
// subscribing again by itself: nothing is delivered after PubSubClosed, and
// the node is left with no subscriber.
func pubSubNoSilentReconnect(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	sub := subscriberOf(t, f, newPool(t, f, s.Addr(), ""))
	evs := &events{ch: make(chan pool.PubSubEvent, 64)}
	c, err := sub.DialPubSub(ctxT(t, waitLimit), evs.on)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.Subscribe("a"))
	require.Equal(t, pool.PubSubSubscribed, evs.nextExcept(t, pool.PubSubPong).Kind)

	_, err = s.Do("CLIENT", "KILL", "TYPE", "pubsub")
	require.NoError(t, err)
	ev := evs.nextExcept(t, pool.PubSubPong)
	require.Equal(t, pool.PubSubClosed, ev.Kind, "%+v", ev)
	requireNodeError(t, ev.Err, s.Addr())

	numsub := func() int64 {
		v, err := s.Do("PUBSUB", "NUMSUB", "a")
		require.NoError(t, err)
		vs := v.([]any)
		return vs[1].(int64)
	}
	require.Eventually(t, func() bool { return numsub() == 0 }, waitLimit, 5*time.Millisecond)
	for range 5 {
		time.Sleep(20 * time.Millisecond)
		require.Zero(t, numsub(), "the pool subscribed again by itself")
	}
	n, err := s.Do("PUBLISH", "a", "after")
	require.NoError(t, err)
	require.Equal(t, int64(0), n)
	time.Sleep(50 * time.Millisecond)
	require.Empty(t, evs.ch, "nothing follows PubSubClosed")
}

// generation checks pool.Reconnector: Generation stays while the pool's
// connections hold, and has grown by the time a reply comes from a
// restarted node.
func generation(t *testing.T, f Factory) {
	s := redistest.StartT(t, 1).Node(0)
	p := newPool(t, f, s.Addr(), "")
	rc, ok := p.(pool.Reconnector)
	if !ok {
		require.False(t, f.Reconnector, "the Factory says the pool implements pool.Reconnector")
		t.Skip("the pool does not implement pool.Reconnector")
	}
	ping := func() error {
		_, err := p.Do(ctxT(t, waitLimit), "PING")
		return err
	}
	require.NoError(t, ping())
	g := rc.Generation()
	for range 20 {
		require.NoError(t, ping())
	}
	require.Equal(t, g, rc.Generation(), "no connection was opened")

	for round := range 2 {
		require.NoError(t, s.Kill())
		require.NoError(t, s.Restart())
		require.Eventually(t, func() bool { return ping() == nil }, waitLimit, 5*time.Millisecond)
		now := rc.Generation()
		require.Greater(t, now, g, "round %d: a restarted node is reached on a new connection", round)
		g = now
		for range 10 {
			require.NoError(t, ping())
		}
		require.Equal(t, g, rc.Generation(), "round %d: no connection was opened", round)
	}
}
