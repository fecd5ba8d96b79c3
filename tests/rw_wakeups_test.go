package tests

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/async"
	"github.com/quorumlock/redlock/internal/wire"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// What wakes a read-write lock's waiting calls, and how often they ask.

// heard is one release announcement: the node that made it and its
// message.
type heard struct {
	node int
	msg  string
}

// heardReleases subscribes to name's release channel on every node of e
// and returns the announcements it hears, in the order they come.
func heardReleases(t *testing.T, e *env, name string) <-chan heard {
	t.Helper()
	out := make(chan heard, 256)
	for i, addr := range e.addrs {
		conn, err := redis.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		psc := redis.PubSubConn{Conn: conn}
		require.NoError(t, psc.Subscribe(wire.ReleaseChannel(name)))
		confirmed := make(chan struct{})
		go func() {
			for {
				switch m := psc.Receive().(type) {
				case redis.Subscription:
					close(confirmed)
				case redis.Message:
					out <- heard{i, string(m.Data)}
				case error:
					return
				}
			}
		}()
		select {
		case <-confirmed:
		case <-time.After(5 * time.Second):
			t.Fatal("no subscription confirmed")
		}
	}
	return out
}

// heardFor returns the announcements that come within d, by node.
func heardFor(ch <-chan heard, d time.Duration) map[int][]string {
	got := map[int][]string{}
	end := time.After(d)
	for {
		select {
		case h := <-ch:
			got[h.node] = append(got[h.node], h.msg)
		case <-end:
			return got
		}
	}
}

// anyHeard reports whether some node of got announced a message that ok
// accepts.
func anyHeard(got map[int][]string, ok func(string) bool) bool {
	for _, msgs := range got {
		for _, m := range msgs {
			if ok(m) {
				return true
			}
		}
	}
	return false
}

// within returns what ch delivers, failing the test when nothing comes
// within 10s.
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10s", what)
		panic("unreachable")
	}
}

// inBackground runs take in a goroutine and delivers the lock it took
// (nil, and the test fails, on an error).
func inBackground(t *testing.T, take func() (*redlock.Lock, error)) <-chan *redlock.Lock {
	out := make(chan *redlock.Lock, 1)
	go func() {
		l, err := take()
		if err != nil {
			t.Error(err)
		}
		out <- l
	}()
	return out
}

// waitZCard waits until key, a sorted set on node s, holds n members.
func waitZCard(t *testing.T, e *env, key string, n int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		got, err := redis.Int64(e.nodes[0].Do("ZCARD", key))
		return err == nil && got >= n
	}, 5*time.Second, 2*time.Millisecond, "%s has %d members", key, n)
}

// A read-write lock's releases are announced only to the waiting calls
// they let in: a reader's release that leaves another reader in is not
// announced, the last reader's names the first waiting writer, a writer's
// release that begins the readers' turn is told to readers, and a
// waiting call that took the lock leaves its place without an
// announcement. Before, every one of them was announced to every waiting
// call, and each woke every waiting writer and reader to ask in vain
// (6 readers and 2 writers, holds of 2ms: 4.4 rounds a write, 2.65 a read).
func TestRWLock_releasesAreAnnouncedOnlyToTheCallsTheyLetIn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	keys := wire.RWKeys(name)
	ch := heardReleases(t, e, name)
	ctx := ctxT(t, 20*time.Second)
	isReaders := func(m string) bool { return m == wire.ForReaders }
	named := func(m string) bool { return m != "" && !isReaders(m) }

	r1, err := e.client().RWLock(name).RLock(ctx, hourTTL)
	require.NoError(t, err)
	r2, err := e.client().RWLock(name).RLock(ctx, hourTTL)
	require.NoError(t, err)
	wrote := inBackground(t, func() (*redlock.Lock, error) {
		return e.client(neverRetry, noRefresh).RWLock(name).Lock(ctx, hourTTL)
	})
	waitZCard(t, e, keys[2], 1) // the writer waits

	// Where the second reader is in too, the first's release lets no one
	// in (elsewhere, a round of either that failed there may have left
	// the first alone).
	require.NoError(t, r1.Unlock(ctx))
	got := heardFor(ch, 200*time.Millisecond)
	for i, n := range e.nodes {
		if in, _ := redis.Bool(n.Do("HEXISTS", keys[1], r2.Token())); in {
			require.Empty(t, got[i], "node %d: a reader's release left another reader in", i)
		}
	}

	require.NoError(t, r2.Unlock(ctx))
	w := within(t, wrote, "writer")
	require.NotNil(t, w)
	got = heardFor(ch, 200*time.Millisecond)
	require.True(t, anyHeard(got, named), "the last reader's release names the writer: %v", got)
	require.False(t, anyHeard(got, isReaders), "%v", got)
	require.Empty(t, heardFor(ch, 200*time.Millisecond), "the writer took the lock and left its place")

	read := inBackground(t, func() (*redlock.Lock, error) {
		return e.client(neverRetry, noRefresh).RWLock(name).RLock(ctx, hourTTL)
	})
	waitZCard(t, e, keys[5], 1) // the reader waits
	require.NoError(t, w.Unlock(ctx))
	r := within(t, read, "reader")
	require.NotNil(t, r)
	got = heardFor(ch, 200*time.Millisecond)
	require.True(t, anyHeard(got, isReaders), "the writer's release began the readers' turn: %v", got)
	require.NoError(t, r.Unlock(ctx))
	got = heardFor(ch, 200*time.Millisecond)
	require.True(t, anyHeard(got, func(m string) bool { return m == "" }), "the last reader's release, no writer waiting: %v", got)
}

// rwRounds counts the rounds of a read-write lock's readers (wire.RWRead)
// sent through a pool.New pool.
type rwRounds struct {
	pool.Pool
	s     starter
	reads *atomic.Int64
}

func (p rwRounds) count(s *pool.Script) {
	if base, ok := wire.Unsharded(s); ok {
		s = base
	}
	if s == wire.RWRead {
		p.reads.Add(1)
	}
}

func (p rwRounds) Eval(ctx context.Context, s *pool.Script, args ...any) (any, error) {
	p.count(s)
	return p.Pool.Eval(ctx, s, args...)
}

func (p rwRounds) Start(rcv async.Receiver, cmd string, args ...any) { p.s.Start(rcv, cmd, args...) }

func (p rwRounds) StartEval(rcv async.Receiver, s *pool.Script, args ...any) {
	p.count(s)
	p.s.StartEval(rcv, s, args...)
}

func (p rwRounds) DialPubSub(ctx context.Context, on func(pool.PubSubEvent)) (pool.PubSubConn, error) {
	return p.Pool.(pool.Subscriber).DialPubSub(ctx, on)
}

// readRounds returns a Client over fresh pool.New pools of e whose first
// node counts the readers' rounds. The Client has taken a lock already:
// the end of its first restart check, which wakes every waiting call to
// count again, is behind it.
func readRounds(t *testing.T, e *env, opts ...redlock.Option) (*redlock.Client, *atomic.Int64) {
	t.Helper()
	pools := newPools(t, e.addrs)
	n := new(atomic.Int64)
	pools[0] = rwRounds{Pool: pools[0], s: async.StarterOf[*pool.Script](pools[0]), reads: n}
	c := newClient(t, pools, opts...)
	l, err := c.TryLock(ctxT(t, 10*time.Second), newKey(t), time.Minute)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, 10*time.Second)))
	return c, n
}

// A waiting reader on a Client that is still subscribed to the lock's
// releases (an earlier call's subscription lingers) listens before its
// first round, and does not ask again at once when it is refused: a
// release during that round is heard. Before, every waiting call asked
// twice before it slept, the second time in case a release came between
// its first round and its subscription.
func TestRWLock_aWaitingCallOnASubscribedLockAsksOnceBeforeItSleeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	w, err := e.client().RWLock(name).Lock(ctxT(t, 10*time.Second), hourTTL)
	require.NoError(t, err)
	c, reads := readRounds(t, e)
	rw := c.RWLock(name)
	_, err = rw.RLock(ctxT(t, 300*time.Millisecond), hourTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.EqualValues(t, 2, reads.Load(), "not subscribed yet: once refused, once subscribed")
	// The call that gave up took its place away, announced for anyone:
	// that lands before the next call listens.
	require.Eventually(t, func() bool {
		for _, n := range e.nodes {
			if got, err := redis.Int64(n.Do("ZCARD", wire.RWKeys(name)[5])); err != nil || got != 0 {
				return false
			}
		}
		return true
	}, 5*time.Second, 2*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	reads.Store(0)
	_, err = rw.RLock(ctxT(t, 300*time.Millisecond), hourTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.EqualValues(t, 1, reads.Load(), "subscribed: the first round is heard around")
	require.NoError(t, w.Unlock(ctxT(t, 10*time.Second)))
}

// A reader refused because a writer waits sleeps until an announcement,
// or until the waiting writer's place would lapse, not by the back-off:
// whatever lets it in is announced. Before, the node gave no time it
// would end, and the reader asked again after 5-10ms, 10-20ms, 20-40ms
// and so on, each round in vain.
func TestRWLock_aReaderBehindAWaitingWriterDoesNotPoll(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	name := newKey(t)
	ctx := ctxT(t, 20*time.Second)
	r, err := e.client().RWLock(name).RLock(ctx, hourTTL)
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _, _ = e.client().RWLock(name).Lock(wctx, hourTTL) }()
	waitZCard(t, e, wire.RWKeys(name)[2], 1) // the writer waits
	c, reads := readRounds(t, e)
	_, err = c.RWLock(name).RLock(ctxT(t, 500*time.Millisecond), hourTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)
	require.LessOrEqual(t, reads.Load(), int64(2), "once refused, once subscribed, then it sleeps")
	stop()
	require.NoError(t, r.Unlock(ctx))
}

// A waiting writer that died without leaving keeps its place on the
// nodes until the place lapses: a writer and a reader refused behind it
// learn from the nodes when that is, and ask again then, without an
// announcement and whatever their back-off. Before, the nodes answered
// "no known end", and both slept by the back-off (here ten minutes).
func TestRWLock_callsBehindADeadWaitingWriterAskAgainWhenItsPlaceLapses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	const lapse = 300 * time.Millisecond
	for _, tc := range []struct {
		side string
		take func(rw *redlock.RWLock) func(context.Context, time.Duration, ...redlock.LockOption) (*redlock.Lock, error)
	}{
		{"writer", func(rw *redlock.RWLock) func(context.Context, time.Duration, ...redlock.LockOption) (*redlock.Lock, error) {
			return rw.Lock
		}},
		{"reader", func(rw *redlock.RWLock) func(context.Context, time.Duration, ...redlock.LockOption) (*redlock.Lock, error) {
			return rw.RLock
		}},
	} {
		t.Run(tc.side, func(t *testing.T) {
			name := newKey(t)
			start := time.Now() // before the places: none lapses before start+lapse
			plantDeadWriter(t, e, name, lapse)
			ctx := ctxT(t, 5*time.Second)
			l, err := tc.take(e.client(neverRetry, noRefresh).RWLock(name))(ctx, hourTTL)
			require.NoError(t, err, "asked again when the dead writer's place lapsed")
			require.GreaterOrEqual(t, time.Since(start), lapse-50*time.Millisecond, "waited for the place")
			require.NoError(t, l.Unlock(ctx))
		})
	}
}

// plantDeadWriter places a waiting writer that no call makes on every
// node of e, first in the order of name's waiting writers, its place
// lapsing after lapse by each node's clock.
func plantDeadWriter(t *testing.T, e *env, name string, lapse time.Duration) {
	t.Helper()
	keys := wire.RWKeys(name)
	for _, n := range e.nodes {
		now, err := redis.Int64s(n.Do("TIME"))
		require.NoError(t, err)
		due := now[0]*1_000_000 + now[1] + lapse.Microseconds()
		_, err = n.Do("ZADD", keys[2], 0, "dead.writer")
		require.NoError(t, err)
		_, err = n.Do("ZADD", keys[4], due, "dead.writer")
		require.NoError(t, err)
	}
}

// A holder that took the lock after waiting, and dies without a release,
// does not hold the next writer back any longer than its hold. A waiting
// writer leaves its place as soon as it takes the lock; a waiting
// reader's place stays until its release, and lapses with its hold, not
// a place's life (seconds) later: it would keep the readers' turn its
// writer's release began.
func TestRWLock_aWaitingCallThatDiesHoldingLetsTheNextWriterInWhenItsHoldEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 5)
	const hold = 300 * time.Millisecond
	t.Run("writer", func(t *testing.T) {
		name := newKey(t)
		keys := wire.RWKeys(name)
		for _, n := range e.nodes {
			_, err := n.Do("SET", keys[0], "someone-else", "PX", 100) // the writer waits
			require.NoError(t, err)
		}
		ctx := ctxT(t, 10*time.Second)
		_, err := e.client().RWLock(name).Lock(ctx, hold) // never released
		require.NoError(t, err)
		nextWriterAfter(t, e, name, time.Now(), hold)
	})
	t.Run("reader", func(t *testing.T) {
		name := newKey(t)
		keys := wire.RWKeys(name)
		ctx := ctxT(t, 10*time.Second)
		w, err := e.client().RWLock(name).Lock(ctx, hourTTL)
		require.NoError(t, err)
		got := make(chan error, 1)
		go func() {
			_, err := e.client().RWLock(name).RLock(ctx, hold) // never released
			got <- err
		}()
		for _, n := range e.nodes {
			require.Eventually(t, func() bool {
				placed, err := redis.Int(n.Do("ZCARD", keys[5]))
				return err == nil && placed == 1
			}, 5*time.Second, time.Millisecond, "the reader waits on every node")
		}
		require.NoError(t, w.Unlock(ctx)) // the readers' turn begins
		require.NoError(t, <-got)
		nextWriterAfter(t, e, name, time.Now(), hold)
	})
}

// nextWriterAfter checks that a writer takes name within half a second
// of the end of a hold that began at took.
func nextWriterAfter(t *testing.T, e *env, name string, took time.Time, hold time.Duration) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	next, err := e.client().RWLock(name).Lock(ctx, hourTTL)
	require.NoError(t, err)
	waited := time.Since(took)
	require.NoError(t, next.Unlock(ctx))
	require.Less(t, waited, hold+500*time.Millisecond,
		"the dead holder's place held the next writer back after its hold ended")
}

// A waiting writer's round that takes the lock leaves its place lapsing
// no later than the hold: should its leave not reach a node, a writer
// that died holding keeps the next writer waiting there for its TTL, not
// for a place's life.
func TestScripts_aWaitingWritersPlaceLapsesNoLaterThanTheHoldItTook(t *testing.T) {
	t.Parallel()
	e := newEnv(t, 1)
	conn := dialNode(t, e.nodes[0])
	keys := wire.RWKeys(newKey(t))
	const ttl, life = 300, 10_000 // ms
	v, err := script(wire.RWWrite, 8).Do(conn, wire.RWWriteArgs(&keys, "w/t", ttl, life, "c.w", time.Now().UnixMicro(), 0)...)
	require.NoError(t, err)
	require.EqualValues(t, 1, v, "the writer takes the free lock")
	now, err := redis.Int64s(conn.Do("TIME"))
	require.NoError(t, err)
	due, err := redis.Int64(conn.Do("ZSCORE", keys[4], "c.w"))
	require.NoError(t, err, "the place stays until the call leaves")
	require.LessOrEqual(t, due, now[0]*1_000_000+now[1]+ttl*1000, "the place outlives the hold")
}
