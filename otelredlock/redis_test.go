package otelredlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/quorumlock/redlock/internal/redistest"
	"github.com/quorumlock/redlock/pool"
	"github.com/quorumlock/redlock/redlock"
)

// Timings for the tests on real nodes. They are generous: the tests run
// with -race on a small, busy machine.
const (
	nodeTimeout = time.Second
	longTTL     = 10 * time.Second
	quickly     = 3 * time.Second // bounds calls that must return at once
)

// keySeq makes keys unique within the test binary.
var keySeq atomic.Int64

func newKey(t testing.TB) string {
	return fmt.Sprintf("otel:%s:%d", t.Name(), keySeq.Add(1))
}

// ctxT returns a context that ends after d or with the test.
func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// env is five redis-server nodes.
type env struct {
	t       testing.TB
	cluster *redistest.Cluster
	addrs   []string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	c := redistest.StartT(t, 5)
	return &env{t: t, cluster: c, addrs: c.Addrs()}
}

// client returns a Client over new pools of the nodes that records its
// metrics in a new meter, and that meter. Both are closed with the test.
func (e *env) client(opts ...redlock.Option) (*redlock.Client, *meter) {
	e.t.Helper()
	m := newMeter(e.t)
	return e.plainClient(append([]redlock.Option{WithMetrics(m.provider)}, opts...)...), m
}

// plainClient returns a Client over new pools of the nodes with opts,
// closed with the test.
func (e *env) plainClient(opts ...redlock.Option) *redlock.Client {
	e.t.Helper()
	pools := make([]pool.Pool, len(e.addrs))
	for i, a := range e.addrs {
		p, err := pool.New(a, pool.WithIOTimeout(2*time.Second))
		require.NoError(e.t, err)
		e.t.Cleanup(func() { _ = p.Close() })
		pools[i] = p
	}
	opts = append([]redlock.Option{redlock.WithNodeTimeout(nodeTimeout)}, opts...)
	c, err := redlock.New(pools, opts...)
	require.NoError(e.t, err)
	e.t.Cleanup(func() { require.NoError(e.t, c.Close()) })
	return c
}

// requireNodes asserts that the node samples of op came from the nodes
// (never another name), and that at least min of them are outcome.
func requireNodes(t *testing.T, c collected, addrs []string, op, outcome string, min uint64) {
	t.Helper()
	for addr := range c.values(t, nodeName, "server.address") {
		require.Contains(t, addrs, addr)
	}
	n, sum := c.count(t, nodeName, map[string]string{"redlock.operation": op, "redlock.node.outcome": outcome})
	require.GreaterOrEqual(t, n, min, "%s %s", op, outcome)
	require.LessOrEqual(t, n, uint64(len(addrs)), "%s %s: one round, one sample per node", op, outcome)
	require.Positive(t, sum)
	require.Less(t, sum, float64(n)*nodeTimeout.Seconds())
}

func TestRedis_anUncontendedLockAndItsRelease(t *testing.T) {
	e := newEnv(t)
	c, m := e.client()
	l, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
	require.NoError(t, err)
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))

	got := m.collect(t)
	n, sum := got.count(t, acquireName, map[string]string{"redlock.outcome": "acquired"})
	require.Equal(t, uint64(1), n)
	require.Positive(t, sum)
	require.Less(t, sum, quickly.Seconds())
	require.Equal(t, map[string]bool{"acquired": true}, got.values(t, acquireName, "redlock.outcome"))
	require.Empty(t, got.hist(t, waitName), "TryLock does not wait")
	n, sum = got.count(t, heldName, nil)
	require.Equal(t, uint64(1), n)
	require.GreaterOrEqual(t, sum, 0.02)
	require.Less(t, sum, longTTL.Seconds())
	require.NotContains(t, got, lostName)
	require.NotContains(t, got, extendName)

	requireNodes(t, got, e.addrs, "acquire", "ok", 3)
	requireNodes(t, got, e.addrs, "unlock", "ok", 3)
	require.Equal(t, map[string]bool{"acquire": true, "unlock": true}, got.values(t, nodeName, "redlock.operation"))
	require.Equal(t, map[string]bool{"ok": true}, got.values(t, nodeName, "redlock.node.outcome"))
}

// Each kind of lock is recorded with its redlock.kind: a semaphore's
// permit, a read-write lock's reader and writer, an election's leader.
func TestRedis_eachKindOfLockHasItsKind(t *testing.T) {
	e := newEnv(t)
	c, m := e.client()
	ctx := ctxT(t, 10*time.Second)
	name := newKey(t)
	p, err := c.Semaphore(name+":sem", 2).TryAcquire(ctx, longTTL)
	require.NoError(t, err)
	require.NoError(t, p.Unlock(ctx))
	rw := c.RWLock(name + ":rw")
	r, err := rw.TryRLock(ctx, longTTL)
	require.NoError(t, err)
	_, err = rw.TryLock(ctx, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired, "a reader holds it")
	require.NoError(t, r.Unlock(ctx))
	l, err := c.Election(name+":e").Campaign(ctx, "me", longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	got := m.collect(t)
	for kind, outcome := range map[string]string{"semaphore": "acquired", "rwlock_read": "acquired", "rwlock_write": "busy", "election": "acquired"} {
		n, _ := got.count(t, acquireName, map[string]string{"redlock.kind": kind, "redlock.outcome": outcome})
		require.Equal(t, uint64(1), n, kind)
	}
	require.Equal(t, map[string]bool{"semaphore": true, "rwlock_read": true, "rwlock_write": true, "election": true},
		got.values(t, acquireName, "redlock.kind"))
	require.Equal(t, map[string]bool{"semaphore": true, "rwlock_read": true, "election": true},
		got.values(t, heldName, "redlock.kind"))
}

func TestRedis_aBusyKey(t *testing.T) {
	e := newEnv(t)
	holder, _ := e.client()
	key := newKey(t)
	_, err := holder.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)

	c, m := e.client()
	_, err = c.TryLock(ctxT(t, quickly), key, longTTL)
	require.ErrorIs(t, err, redlock.ErrNotAcquired)

	got := m.collect(t)
	n, _ := got.count(t, acquireName, map[string]string{"redlock.outcome": "busy"})
	require.Equal(t, uint64(1), n)
	require.Equal(t, map[string]bool{"busy": true}, got.values(t, acquireName, "redlock.outcome"))
	requireNodes(t, got, e.addrs, "acquire", "refused", 3)
	require.Empty(t, got.hist(t, heldName))
}

// A Lock that waits for the holder's release gets the key (by a round or
// by hand-offs) and reports its wait; one whose context ends first is
// canceled.
func TestRedis_aLockThatWaits(t *testing.T) {
	e := newEnv(t)
	holder, _ := e.client()
	key := newKey(t)
	held, err := holder.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)

	c, m := e.client()
	_, err = c.Lock(ctxT(t, 200*time.Millisecond), key, longTTL)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	n, _ := m.collect(t).count(t, acquireName, map[string]string{"redlock.outcome": "canceled"})
	require.Equal(t, uint64(1), n, "a Lock whose deadline passed while the key was held")

	refused := map[string]string{"redlock.operation": "acquire", "redlock.node.outcome": "refused"}
	before, _ := m.collect(t).count(t, nodeName, refused)
	var wg sync.WaitGroup
	var l *redlock.Lock
	var lockErr error
	began := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		l, lockErr = c.Lock(ctxT(t, 2*longTTL), key, longTTL)
	}()
	// The waiter's first round was refused: it waits.
	require.Eventually(t, func() bool {
		n, _ := m.collect(t).count(t, nodeName, refused)
		return n >= before+3
	}, 5*time.Second, 5*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, held.Unlock(ctxT(t, quickly)))
	wg.Wait()
	waited := time.Since(began)
	require.NoError(t, lockErr)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))

	got := m.collect(t)
	n, _ = got.count(t, acquireName, map[string]string{"redlock.outcome": "acquired"})
	require.Equal(t, uint64(1), n)
	n, sum := got.count(t, waitName, nil)
	require.Equal(t, uint64(1), n, "one Lock waited and got the key")
	require.GreaterOrEqual(t, sum, 0.1)
	require.LessOrEqual(t, sum, waited.Seconds())
	n, _ = got.count(t, heldName, nil)
	require.Equal(t, uint64(1), n)
	require.NotContains(t, got.values(t, nodeName, "redlock.operation"), "handoff")
}

func TestRedis_aLockFoundGoneIsLost(t *testing.T) {
	e := newEnv(t)
	c, m := e.client()
	key := newKey(t)
	l, err := c.TryLock(ctxT(t, quickly), key, longTTL)
	require.NoError(t, err)
	for _, s := range e.cluster.Nodes() {
		_, err := s.Do("DEL", key)
		require.NoError(t, err)
	}
	require.ErrorIs(t, l.Extend(ctxT(t, quickly), longTTL), redlock.ErrLockLost)
	require.Error(t, l.Unlock(ctxT(t, quickly)))

	got := m.collect(t)
	require.Equal(t, int64(1), got.counter(t, lostName, "{lock}", map[string]string{"redlock.cause": "lost"}), "once, not again by Unlock")
	require.Equal(t, int64(1), got.counter(t, lostName, "{lock}", nil))
	require.Equal(t, int64(1), got.counter(t, extendName, "{round}", nil))
	n, _ := got.count(t, heldName, nil)
	require.Equal(t, uint64(1), n)
	requireNodes(t, got, e.addrs, "extend", "refused", 3)
}

func TestRedis_aLockWhoseValidityRanOutIsExpired(t *testing.T) {
	e := newEnv(t)
	c, m := e.client()
	const ttl = 300 * time.Millisecond
	l, err := c.TryLock(ctxT(t, quickly), newKey(t), ttl)
	require.NoError(t, err)
	select {
	case <-l.Context().Done():
	case <-time.After(quickly):
		t.Fatal("the lock's context did not end with its validity")
	}
	require.Eventually(t, func() bool {
		return m.collect(t).counter(t, lostName, "{lock}", map[string]string{"redlock.cause": "expired"}) == 1
	}, quickly, 5*time.Millisecond)
	got := m.collect(t)
	require.Equal(t, int64(1), got.counter(t, lostName, "{lock}", nil))
	n, sum := got.count(t, heldName, nil)
	require.Equal(t, uint64(1), n)
	// Held until the Client learned of the loss: the context's timer,
	// at the validity's end (the TTL less the drift allowance), or later
	// on a busy machine.
	require.GreaterOrEqual(t, sum, (ttl / 2).Seconds())
	require.Less(t, sum, quickly.Seconds())
}

// A killed node has failed samples or none; the others answer. When it
// comes back empty, a Client that counted it before reports it reset and
// excluded (restart safety).
func TestRedis_aKilledNodeAndItsRestart(t *testing.T) {
	e := newEnv(t)
	c, m := e.client()
	dead := e.cluster.Node(0)
	// The Client counts node 0 before it dies: only then does it know the
	// run id that the restart replaces. A lock is taken once a quorum of
	// nodes counts, which node 0's check, answering late, may not be in.
	// A loop of the test's own, not require.Eventually: its checks must
	// run on the test's goroutine.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
		require.NoError(t, err, "the nodes are checked and marked")
		require.NoError(t, l.Unlock(ctxT(t, quickly)))
		n, _ := m.collect(t).count(t, nodeName, map[string]string{"server.address": dead.Addr(), "redlock.operation": "acquire", "redlock.node.outcome": "ok"})
		if n >= 1 {
			break
		}
		require.True(t, time.Now().Before(deadline), "node 0 is counted")
	}
	require.NoError(t, dead.Kill())

	before := m.collect(t)
	l, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t, quickly)))
	got := m.collect(t)
	for _, outcome := range []string{"ok", "refused"} {
		n, _ := got.count(t, nodeName, map[string]string{"server.address": dead.Addr(), "redlock.node.outcome": outcome})
		n0, _ := before.count(t, nodeName, map[string]string{"server.address": dead.Addr(), "redlock.node.outcome": outcome})
		require.Equal(t, n0, n, "a dead node is never %s", outcome)
	}
	ok := map[string]string{"redlock.operation": "acquire", "redlock.node.outcome": "ok"}
	n, _ := got.count(t, nodeName, ok)
	n0, _ := before.count(t, nodeName, ok)
	require.GreaterOrEqual(t, n-n0, uint64(3), "the live nodes granted")
	require.LessOrEqual(t, n-n0, uint64(4), "the live nodes granted")

	require.NoError(t, dead.RestartEmpty())
	reset := func() bool {
		return m.collect(t).counter(t, resetName, "{reset}", map[string]string{"server.address": dead.Addr()}) >= 1
	}
	// The next calls reconnect to the node; the restart check that
	// follows, in the background, finds a new run id.
	for i := 0; i < 50 && !reset(); i++ {
		if l, err := c.TryLock(ctxT(t, quickly), newKey(t), longTTL); err == nil {
			require.NoError(t, l.Unlock(ctxT(t, quickly)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.True(t, reset(), "the restarted node is reported reset")
	got = m.collect(t)
	require.Equal(t, int64(1), got.counter(t, resetName, "{reset}", nil), "only the restarted node")
	require.Equal(t, int64(1), got.counter(t, excludedName, "{exclusion}", map[string]string{"server.address": dead.Addr()}))
}

// nopObserver is an Observer that does nothing: the cost of the hooks
// themselves.
type nopObserver struct{}

func (nopObserver) Round(*redlock.RoundInfo) {}
func (nopObserver) Event(redlock.Event)      {}

// An uncontended TryLock+Unlock on five real nodes without observers,
// with one that does nothing, and with WithMetrics: the difference
// between the last two is what recording costs.
func BenchmarkRedis_tryLockUnlock(b *testing.B) {
	e := newEnv(b)
	for _, bc := range []struct {
		name string
		opts []redlock.Option
	}{
		{"none", nil},
		{"nopObserver", []redlock.Option{redlock.WithObserver(nopObserver{})}},
		{"metrics", nil}, // e.client adds WithMetrics
	} {
		b.Run(bc.name, func(b *testing.B) {
			var c *redlock.Client
			if bc.name == "metrics" {
				c, _ = e.client()
			} else {
				c = e.plainClient(bc.opts...)
			}
			ctx := context.Background()
			key := newKey(b)
			b.ReportAllocs()
			for b.Loop() {
				l, err := c.TryLock(ctx, key, longTTL)
				if err != nil {
					b.Fatal(err)
				}
				if err := l.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
