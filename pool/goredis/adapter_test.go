package goredis_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/pool/goredis"
	"github.com/quorumlock/redlock/redlock"
)

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// A call that gave up on a paused node before its connection was set up
// never sends its command later, with or without ContextTimeoutEnabled:
// the lock client releases what a failed call may have set, and a command
// written after those releases would stay for its TTL.
func TestCall_givenUpBeforeItWasSentIsNeverSent(t *testing.T) {
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprint("ContextTimeoutEnabled=", ctxTimeouts), func(t *testing.T) {
			s := redistest.StartT(t, 1).Node(0)
			c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: ctxTimeouts,
				ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
			defer c.Close()
			p := goredis.New(c)
			script := pool.NewScript(1, `return redis.call("SET", KEYS[1], ARGV[1])`)

			require.NoError(t, s.Pause())
			// No connection yet: each call needs one, whose HELLO waits for
			// the node.
			for i, call := range []func(ctx context.Context) error{
				func(ctx context.Context) error { _, err := p.Do(ctx, "SET", "late:do", "v"); return err },
				func(ctx context.Context) error { _, err := p.Eval(ctx, script, "late:eval", "v"); return err },
				func(ctx context.Context) error { _, err := p.Do(ctx, "PING"); return err },
			} {
				start := time.Now()
				err := call(ctxT(t, 200*time.Millisecond))
				require.Less(t, time.Since(start), time.Second, "call %d", i)
				var ne *pool.NodeError
				require.ErrorAs(t, err, &ne, "call %d", i)
			}
			require.NoError(t, s.Resume())
			require.Eventually(t, func() bool {
				_, err := p.Do(ctxT(t, time.Second), "PING")
				return err == nil
			}, 10*time.Second, 5*time.Millisecond)
			time.Sleep(200 * time.Millisecond) // the abandoned calls have had their connections
			for _, key := range []string{"late:do", "late:eval"} {
				v, err := s.Do("EXISTS", key)
				require.NoError(t, err)
				require.Equal(t, int64(0), v, "%s was written after its call gave up", key)
			}
		})
	}
}

// Arguments of every type reach the node as go-redis writes them, also
// through the gate of a client without ContextTimeoutEnabled.
func TestCall_argumentsAreWrittenAsGoRedisWritesThem(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	plain := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer plain.Close()
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer c.Close()
	p := goredis.New(c)
	at := time.Date(2026, 11, 24, 1, 2, 3, 456789, time.UTC)
	for i, v := range []any{"s", []byte("b"), "", nil, 7, int8(-8), int16(9), int32(-10), int64(1) << 40,
		uint(11), uint8(12), uint16(13), uint32(14), uint64(1) << 63, float32(1.25), 3.0e-7, 1e21,
		true, false, 1500 * time.Millisecond, at, net.IPv4(10, 0, 0, 1)} {
		ctx := ctxT(t, 5*time.Second)
		require.NoError(t, plain.Set(ctx, "want", v, 0).Err(), "%T", v)
		_, err := p.Do(ctx, "SET", "got", v)
		require.NoError(t, err, "%T", v)
		want, err := plain.Get(ctx, "want").Result()
		require.NoError(t, err)
		got, err := plain.Get(ctx, "got").Result()
		require.NoError(t, err)
		require.Equal(t, want, got, "argument %d (%T)", i, v)
	}
}

func TestNew_whatEachClientGets(t *testing.T) {
	var nilClient *redis.Client
	require.Nil(t, goredis.New(nilClient))
	var nilCluster *redis.ClusterClient
	require.Nil(t, goredis.New(nilCluster))

	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	p := goredis.New(c)
	require.Implements(t, (*pool.Subscriber)(nil), p)
	require.Implements(t, (*pool.Reconnector)(nil), p)

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:2"}})
	defer cc.Close()
	p = goredis.New(cc)
	require.Implements(t, (*pool.Subscriber)(nil), p)
	require.Implements(t, (*pool.Reconnector)(nil), p)

	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"b": "127.0.0.1:4", "a": "127.0.0.1:3"}})
	defer ring.Close()
	p = goredis.New(ring)
	require.Equal(t, "127.0.0.1:3,127.0.0.1:4", p.Addr())
	_, ok := p.(pool.Subscriber)
	require.False(t, ok, "a ring cannot subscribe without a channel")
	_, ok = p.(pool.Reconnector)
	require.False(t, ok)

	// A client of another type (here one that wraps a *redis.Client).
	w := wrapped{c}
	p = goredis.New(w)
	require.Equal(t, "goredis_test.wrapped", p.Addr(), "named after its type")
	require.Implements(t, (*pool.Subscriber)(nil), p)
	_, ok = p.(pool.Reconnector)
	require.False(t, ok, "its connections cannot be counted")
	require.Equal(t, "n1", goredis.New(w, goredis.WithName("n1")).Addr())
	_, err := redlock.New([]pool.Pool{goredis.New(w), goredis.New(w)})
	require.ErrorContains(t, err, "same node", "two such clients need WithName")
}

type wrapped struct{ *redis.Client }

// Another UniversalClient works through the interface: calls bounded (it
// does not say whether it applies contexts' deadlines, so it is taken not
// to), pub/sub.
func TestNew_anotherUniversalClient(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ReadTimeout: 5 * time.Second})
	defer c.Close()
	p := goredis.New(wrapped{c}, goredis.WithName(s.Addr()))
	v, err := p.Do(ctxT(t, time.Second), "PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", v)
	require.NoError(t, s.Pause())
	start := time.Now()
	_, err = p.Do(ctxT(t, 200*time.Millisecond), "GET", "k")
	require.Less(t, time.Since(start), time.Second)
	require.Error(t, err)
	require.NoError(t, s.Resume())

	evs := make(chan pool.PubSubEvent, 8)
	ps, err := p.(pool.Subscriber).DialPubSub(ctxT(t, time.Second), func(ev pool.PubSubEvent) { evs <- ev })
	require.NoError(t, err)
	require.NoError(t, ps.Subscribe("ch"))
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: "ch"}, nextEvent(t, evs))
	require.NoError(t, ps.Close())
	require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubClosed}, nextEvent(t, evs))
}

// WithTimeout bounds calls whose context has no deadline.
func TestWithTimeout_boundsCallsWithoutADeadline(t *testing.T) {
	s := redistest.StartT(t, 1).Node(0)
	for _, ctxTimeouts := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: ctxTimeouts, ReadTimeout: 10 * time.Second})
		defer c.Close()
		p := goredis.New(c, goredis.WithTimeout(300*time.Millisecond))
		_, err := p.Do(context.Background(), "PING")
		require.NoError(t, err)
		require.NoError(t, s.Pause())
		start := time.Now()
		_, err = p.Do(context.Background(), "GET", "k")
		took := time.Since(start)
		require.NoError(t, s.Resume())
		require.Error(t, err)
		require.GreaterOrEqual(t, took, 250*time.Millisecond)
		require.Less(t, took, 2*time.Second, "ContextTimeoutEnabled=%v", ctxTimeouts)
	}
}

// The client's password never appears in an error, even when a lower
// layer quotes it.
func TestErrors_neverShowThePassword(t *testing.T) {
	const secret = "s3cret-pass"
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", Password: secret, MaxRetries: -1,
		Dialer: func(context.Context, string, string) (net.Conn, error) {
			return nil, fmt.Errorf("cannot log in with %s: %w", secret, net.ErrClosed)
		}})
	defer c.Close()
	p := goredis.New(c)
	_, err := p.Do(ctxT(t, time.Second), "PING")
	require.Error(t, err)
	require.NotContains(t, err.Error(), secret)
	require.Contains(t, err.Error(), "cannot log in with xxxxx")
	require.True(t, errors.Is(err, net.ErrClosed), "the cause is kept: %v", err)
	_, err = p.(pool.Subscriber).DialPubSub(ctxT(t, time.Second), func(pool.PubSubEvent) {})
	require.Error(t, err)
	require.NotContains(t, err.Error(), secret)
}

// A Redlock node that is a Redis Cluster, through *redis.ClusterClient: the
// connections of every master count for restart safety, calls to a paused
// master are bounded, and release announcements published on one master
// reach a subscription on another.
func TestClusterClient_countsConnectionsBoundsCallsAndSubscribes(t *testing.T) {
	rc := redistest.StartRedisClusterT(t, 3)
	for _, ctxTimeouts := range []bool{true, false} {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs(), ContextTimeoutEnabled: ctxTimeouts,
			ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
		defer cc.Close()
		p := goredis.New(cc)
		gen := p.(pool.Reconnector)
		keys := []string{"a", "b", "c", "d", "e", "f"}
		// Every master answers (the keys' slots are on all three).
		require.Eventually(t, func() bool {
			for _, k := range keys {
				if _, err := p.Do(ctxT(t, time.Second), "SET", k, "v"); err != nil {
					return false
				}
			}
			return true
		}, 10*time.Second, 10*time.Millisecond)
		g := gen.Generation()
		require.GreaterOrEqual(t, g, uint64(3), "a connection to each master at least")
		for range 3 {
			for _, k := range keys {
				_, err := p.Do(ctxT(t, time.Second), "GET", k)
				require.NoError(t, err)
			}
		}
		require.Equal(t, g, gen.Generation(), "no new connection")

		m := rc.MasterFor("a")
		require.NoError(t, m.Pause())
		start := time.Now()
		_, err := p.Do(ctxT(t, 200*time.Millisecond), "GET", "a")
		require.Less(t, time.Since(start), time.Second, "bounded while a master is paused")
		require.Error(t, err)
		require.NoError(t, m.Resume())
		require.Eventually(t, func() bool {
			_, err := p.Do(ctxT(t, time.Second), "GET", "a")
			return err == nil
		}, 10*time.Second, 10*time.Millisecond)

		evs := make(chan pool.PubSubEvent, 8)
		ps, err := p.(pool.Subscriber).DialPubSub(ctxT(t, time.Second), func(ev pool.PubSubEvent) { evs <- ev })
		require.NoError(t, err)
		require.NoError(t, ps.Subscribe("announce"))
		require.Equal(t, pool.PubSubEvent{Kind: pool.PubSubSubscribed, Channel: "announce"}, nextEvent(t, evs))
		for _, s := range rc.Nodes() {
			requirePublishedReaches(t, s, evs)
		}
		require.NoError(t, ps.Close())
		for ev := nextEvent(t, evs); ev.Kind != pool.PubSubClosed; ev = nextEvent(t, evs) {
			require.Equal(t, pool.PubSubMessage, ev.Kind, "only a late copy of a message comes before the close")
		}
	}
}

// nextEvent returns the next event of a subscription, failing the test
// after 10s without one.
func nextEvent(t *testing.T, evs <-chan pool.PubSubEvent) pool.PubSubEvent {
	t.Helper()
	select {
	case ev := <-evs:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no pub/sub event in 10s")
		return pool.PubSubEvent{}
	}
}

// requirePublishedReaches publishes the node's address on "announce" from
// the cluster node s until the subscription hears it, for 10s at most: a
// cluster that has just formed may not yet pass a message from every
// node to every other (its bus links come up one by one). Late copies of
// earlier nodes' messages are passed over.
func requirePublishedReaches(t *testing.T, s *redistest.Server, evs <-chan pool.PubSubEvent) {
	t.Helper()
	want := pool.PubSubEvent{Kind: pool.PubSubMessage, Channel: "announce", Data: s.Addr()}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		_, err := s.Do("PUBLISH", "announce", s.Addr())
		require.NoError(t, err)
		wait := time.After(100 * time.Millisecond)
		for {
			select {
			case ev := <-evs:
				if ev == want {
					return
				}
				require.Equal(t, pool.PubSubMessage, ev.Kind, "%v", ev)
				continue
			case <-wait:
			}
			break
		}
	}
	t.Fatalf("a message published on %s did not reach the subscription in 10s", s.Addr())
}
